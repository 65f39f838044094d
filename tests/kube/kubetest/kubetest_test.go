package kubetest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A cluster serves the admin, enforces RBAC on a service-account token, and keeps its
// objects across an apiserver restart.
func TestCluster(t *testing.T) {
	c := Start(t)
	ctx := t.Context()
	cs := c.Clientset()

	const ns, sa = "kubetest", "node-reader"
	mustCreate(t, "namespace", func() error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "node", func() error {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "service account", func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "cluster role", func() error {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "get-nodes"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "cluster role binding", func() error {
		_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "get-nodes"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "get-nodes"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
		}, metav1.CreateOptions{})
		return err
	})

	token := c.ServiceAccountToken(t, ns, sa)
	cfg := c.AdminConfig()
	cfg.BearerToken = token
	saClient := kubernetes.NewForConfigOrDie(cfg)
	// The RBAC authorizer reads bindings through an informer: allow it to catch up.
	eventually(t, 10*time.Second, "service account gets node-a", func() error {
		_, err := saClient.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		return err
	})
	if _, err := saClient.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account lists pods: err = %v, want 403 Forbidden", err)
	}

	if out, err := c.Kubectl(t, "version", "--output=json"); err != nil || strings.Count(out, `"gitVersion": "v1.37.2"`) != 2 {
		t.Errorf("kubectl version: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(t, "get", "node", "node-a", "--output=name"); err != nil || strings.TrimSpace(out) != "node/node-a" {
		t.Errorf("kubectl get node: %v\n%s", err, out)
	}
	saKubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := c.WriteKubeconfig(saKubeconfig, token); err != nil {
		t.Fatal(err)
	}
	out, _ := c.Kubectl(t, "--kubeconfig="+saKubeconfig, "auth", "can-i", "list", "pods", "--namespace="+ns)
	if strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i list pods as the service account = %q, want no", out)
	}

	c.StopAPIServer(t)
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err == nil {
		t.Errorf("get node with the apiserver stopped succeeded")
	}
	c.StartAPIServer(t)
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("node-a after the apiserver restart: %v", err)
	}
	// Tokens stay valid: same signing key, same issuer.
	if _, err := saClient.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Errorf("service account after the restart: %v", err)
	}
}

func mustCreate(t *testing.T, what string, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
