package kube_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// leaseArbiter runs a standalone `tidal arbiter` (bearer token file, policy file) on loopback
// for an agent in kubernetes mode; it returns the agent's arbiter config lines and the policy
// file, which the test may rewrite (the arbiter polls it).
func leaseArbiter(t *testing.T, node, policy string) (agentConfig, policyFile string) {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := "token-of-" + node + "-0123456789"
	tokenFile := write(node+".token", token+"\n")
	policyFile = write("policy.yaml", policy)
	cfg := write("arbiter.yaml", fmt.Sprintf("listenAddress: %s\npolicyFile: %s\ntokensFile: %s\nstateDir: %s\nleaseTTL: 3s\nnodeTimeout: 20s\npollInterval: 1s\n",
		addr, policyFile, write("tokens.yaml", node+": "+token+"\n"), filepath.Join(dir, "state")))
	log := &syncBuffer{}
	cmd := exec.Command(tidalBin, "arbiter", "--config", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("arbiter log:\n%s", tail(log.String(), 40))
		}
	})
	eventually(t, 10*time.Second, "arbiter healthy", func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	return fmt.Sprintf("arbiter:\n  url: http://%s\n  tokenFile: %s\n  reportInterval: 1s\n  nodeLabels: pool=batch\n", addr, tokenFile), policyFile
}

func leasePolicy(rule bool) string {
	p := "sharedQueue: best-effort\nqueues:\n  - name: queue-1\n"
	if rule {
		p += "rules:\n  - name: nightly\n    queue: queue-1\n    nodeSelector: {pool: batch}\n    lend: {milliCPU: 300, memory: 64Mi}\n    window: \"00:00-24:00\"\n    timeZone: UTC\n"
	}
	return p
}

// In kubernetes mode the queues a node's lease lends to are labels on its Node
// (queue.tidalqos.io/<queue>=true), set while the lease lends and removed when it stops.
func TestNodeCarriesItsLeasedQueues(t *testing.T) {
	c := newCluster(t)
	arbiterCfg, policyFile := leaseArbiter(t, "node-a", leasePolicy(true))
	n := newKubeNode(t, c, "node-a", "cgroupfs", arbiterCfg)
	// A label an earlier run of the agent left for a queue its lease no longer lends to.
	stale := []byte(`{"metadata":{"labels":{"queue.tidalqos.io/gone":"true"}}}`)
	if _, err := c.admin.CoreV1().Nodes().Patch(context.Background(), "node-a", types.MergePatchType, stale, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.start()
	eventually(t, 30*time.Second, "queue label on the Node, and the stale one gone", func() error {
		labels := c.node(t, "node-a").Labels
		if v, ok := labels["queue.tidalqos.io/gone"]; labels["queue.tidalqos.io/queue-1"] != "true" || ok {
			return fmt.Errorf("labels %v (stale label %q)", labels, v)
		}
		return nil
	})
	if err := os.WriteFile(policyFile, []byte(leasePolicy(false)), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "queue label removed when the lease stops lending to it", func() error {
		if v, ok := c.node(t, "node-a").Labels["queue.tidalqos.io/queue-1"]; ok {
			return fmt.Errorf("label still %q", v)
		}
		return nil
	})
	n.alive()
}

// (The arbiter's default 30 s lease needs reports at least every 3 s: an agent honours a
// lease of at most 10 report intervals.)
//
// End to end in Kubernetes: an agent whose token is bound to its pod reports to the arbiter in
// kubernetes mode (TokenReview, leader, policy from its ConfigMap, rules matching the Node's
// labels); its lease lends to queue-1 and the Node carries the queue's label.
func TestAgentLeaseFromTheKubernetesArbiter(t *testing.T) {
	e := newArbEnv(t, arbPolicy(600), nil)
	arb := e.startArb("arb", "")
	eventually(t, 30*time.Second, "arbiter leads", func() error {
		if !arb.ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	tok, _ := e.agentToken("node-a", arbAudience)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	n := newKubeNode(t, e.cluster, "node-a", "cgroupfs", fmt.Sprintf("arbiter:\n  url: %s\n  tokenFile: %s\n  reportInterval: 3s\n", arb.url, tokenFile))
	patch := []byte(`{"metadata":{"labels":{"tidalqos.io/pool":"batch"}}}`)
	if _, err := e.admin.CoreV1().Nodes().Patch(context.Background(), "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.start()
	eventually(t, 30*time.Second, "lease for queue-1 and its label on the Node", func() error {
		s := n.status()
		if s.Lease == nil || !s.Lease.Active {
			return fmt.Errorf("lease %+v", s.Lease)
		}
		granted := false
		for _, g := range s.Lease.Grants {
			granted = granted || g.Queue == "queue-1" && g.MilliCPU > 0
		}
		if !granted {
			return fmt.Errorf("grants %+v", s.Lease.Grants)
		}
		if v := e.node(t, "node-a").Labels["queue.tidalqos.io/queue-1"]; v != "true" {
			return fmt.Errorf("node labels %v", e.node(t, "node-a").Labels)
		}
		return nil
	})
	n.alive()
}
