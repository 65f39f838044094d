// Package kubetest runs a real etcd and kube-apiserver on loopback for integration tests, with
// the kubectl built beside them by scripts/kube-tools.sh. Each Cluster lives in its own
// temporary folder with freshly generated certificates and keys, and its processes are
// children of the test that are stopped (SIGTERM, then SIGKILL) when the test ends.
package kubetest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tidalqos/tidal/tests/testutil"
)

const (
	// readyTimeout bounds how long etcd plus the apiserver may take to become ready; a cold
	// apiserver on a busy 2-CPU machine takes 10-20 s.
	readyTimeout = 60 * time.Second
	// stopTimeout is how long a process gets after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
	// logTailLines is how much of a log a failure shows.
	logTailLines = 40
	// AdminUser is the user the admin token authenticates as (group system:masters).
	AdminUser = "kubetest-admin"
)

// Binaries returns the folder holding kube-apiserver, kubectl and etcd: $TIDAL_KUBE_TOOLS, or
// .cache/kube-tools/bin in the repository. It fails the test when one is missing.
func Binaries(t testing.TB) string {
	t.Helper()
	return testutil.ToolsDir(t, "TIDAL_KUBE_TOOLS", "kube-tools", "scripts/kube-tools.sh", "kube-apiserver", "kubectl", "etcd")
}

// Cluster is one etcd and one kube-apiserver serving https://127.0.0.1:<port>. Its methods
// may be called from several goroutines.
type Cluster struct {
	dir        string // the test's temporary folder: certificates, keys, data, logs
	bin        string
	port       int
	token      string // admin bearer token
	caPEM      []byte
	kubeconfig string
	apiArgs    []string

	mu        sync.Mutex
	etcd      *proc
	apiserver *proc
}

// Start starts etcd and kube-apiserver and waits until the apiserver is ready. Both stop when
// the test ends; if the test failed, the tails of their logs are logged. Under -short the
// test is skipped.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver")
	}
	c := &Cluster{dir: t.TempDir(), bin: Binaries(t)}
	// Registered after TempDir's own cleanup, so it runs first: processes stop before their
	// folder is removed.
	t.Cleanup(func() { c.stopAll(t) })

	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("kubetest: free ports: %v", err)
	}
	etcdClient, etcdPeer := ports[0], ports[1]
	c.port = ports[2]
	if err := c.writeCredentials(); err != nil {
		t.Fatalf("kubetest: credentials: %v", err)
	}
	c.kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := c.WriteKubeconfig(c.kubeconfig, c.token); err != nil {
		t.Fatalf("kubetest: %v", err)
	}

	deadline := time.Now().Add(readyTimeout)
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcd, err := startProc("etcd", filepath.Join(c.bin, "etcd"), filepath.Join(c.dir, "etcd.log"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(c.dir, "etcd-data"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		"--log-level=warn",
		// Throwaway data: durability only costs time.
		"--unsafe-no-fsync=true",
	)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	c.mu.Lock()
	c.etcd = etcd
	c.mu.Unlock()
	if err := waitHTTP(etcd, deadline, http.DefaultClient, clientURL+"/health", ""); err != nil {
		t.Fatalf("kubetest: etcd not healthy: %v\n%s", err, etcd.tail())
	}

	c.apiArgs = []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The lease reconciler refuses a loopback advertise address (1.37); nothing here
		// reaches the apiserver through the kubernetes Service anyway.
		"--endpoint-reconciler-type=none",
		// The agent's DaemonSet is privileged, as on a real cluster's API server.
		"--allow-privileged=true",
		"--secure-port=" + strconv.Itoa(c.port),
		"--etcd-servers=" + clientURL,
		"--tls-cert-file=" + filepath.Join(c.dir, "apiserver.crt"),
		"--tls-private-key-file=" + filepath.Join(c.dir, "apiserver.key"),
		"--client-ca-file=" + filepath.Join(c.dir, "ca.crt"),
		"--token-auth-file=" + filepath.Join(c.dir, "tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(c.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(c.dir, "sa.key"),
		"--api-audiences=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// No controller-manager creates the token secrets it would wait for.
		"--disable-admission-plugins=ServiceAccount",
		// Keeps apiserver.crt/key from being regenerated into the working directory.
		"--cert-dir=" + filepath.Join(c.dir, "cert-dir"),
	}
	c.startAPIServer(t, deadline)
	return c
}

// URL is the apiserver's https address.
func (c *Cluster) URL() string { return fmt.Sprintf("https://127.0.0.1:%d", c.port) }

// AdminConfig is a client config for a system:masters user (bearer token, CA pinned).
func (c *Cluster) AdminConfig() *rest.Config { return c.config(c.token) }

func (c *Cluster) config(token string) *rest.Config {
	return &rest.Config{
		Host:            c.URL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.caPEM...)},
		// client-go's default 5 QPS would make tests slow, not more realistic.
		QPS:   100,
		Burst: 200,
	}
}

// Clientset is an admin clientset.
func (c *Cluster) Clientset() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.AdminConfig())
}

// ClientsetFor is a clientset that authenticates with a bearer token (a ServiceAccount's).
func (c *Cluster) ClientsetFor(token string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(c.config(token))
}

// AdminKubeconfig is the path of a kubeconfig for the admin user.
func (c *Cluster) AdminKubeconfig() string { return c.kubeconfig }

// WriteKubeconfig writes a kubeconfig for this cluster authenticating with token, the CA
// embedded. (JSON is valid kubeconfig YAML and needs no extra module.)
func (c *Cluster) WriteKubeconfig(path, token string) error {
	type named struct {
		Name    string         `json:"name"`
		Cluster map[string]any `json:"cluster,omitempty"`
		User    map[string]any `json:"user,omitempty"`
		Context map[string]any `json:"context,omitempty"`
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "kubetest",
		"clusters": []named{{Name: "kubetest", Cluster: map[string]any{
			"server":                     c.URL(),
			"certificate-authority-data": c.caPEM, // []byte marshals as base64, as kubeconfig wants
		}}},
		"users":    []named{{Name: "kubetest", User: map[string]any{"token": token}}},
		"contexts": []named{{Name: "kubetest", Context: map[string]any{"cluster": "kubetest", "user": "kubetest"}}},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Kubectl runs the built kubectl with the admin kubeconfig and returns its combined output.
func (c *Cluster) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig=" + c.kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+c.dir) // nothing from the host's ~/.kube
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ServiceAccountToken returns a one-hour token for namespace/name (TokenRequest API).
func (c *Cluster) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	ttl := int64(3600)
	tr, err := c.Clientset().CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// StopAPIServer stops the apiserver only (etcd keeps the data), as when it goes away under a
// running client.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	c.takeAPIServer(t, "StopAPIServer").stop()
}

// takeAPIServer hands the running apiserver to the caller, who ends it; the cluster then has
// none until StartAPIServer.
func (c *Cluster) takeAPIServer(t testing.TB, caller string) *proc {
	t.Helper()
	c.mu.Lock()
	p := c.apiserver
	c.apiserver = nil
	c.mu.Unlock()
	if p == nil {
		t.Fatalf("kubetest: %s: the apiserver is not running", caller)
	}
	return p
}

// KillAPIServer kills the apiserver with SIGKILL (etcd keeps the data), as when it crashes
// under a running client: no graceful shutdown, connections cut mid-request.
func (c *Cluster) KillAPIServer(t testing.TB) {
	t.Helper()
	p := c.takeAPIServer(t, "KillAPIServer")
	_ = p.cmd.Process.Kill()
	<-p.done
}

// StartAPIServer starts the apiserver again, on the same port with the same certificates and
// flags, and waits until it is ready.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	c.startAPIServer(t, time.Now().Add(readyTimeout))
}

func (c *Cluster) startAPIServer(t testing.TB, deadline time.Time) {
	t.Helper()
	c.mu.Lock()
	if c.apiserver != nil {
		c.mu.Unlock()
		t.Fatalf("kubetest: the apiserver is already running")
	}
	p, err := startProc("kube-apiserver", filepath.Join(c.bin, "kube-apiserver"), filepath.Join(c.dir, "kube-apiserver.log"), c.apiArgs...)
	if err == nil {
		c.apiserver = p // stopped by the cleanup even if it never gets ready
	}
	c.mu.Unlock()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	if err := waitHTTP(p, deadline, client, c.URL()+"/readyz", c.token); err != nil {
		t.Fatalf("kubetest: kube-apiserver not ready: %v\n%s", err, p.tail())
	}
}

// stopAll stops the apiserver, then etcd. If the test failed, it logs the tails of their
// logs as they were before the shutdown, whose own lines would hide the cause.
func (c *Cluster) stopAll(t testing.TB) {
	var tails []string
	if t.Failed() {
		for _, name := range []string{"kube-apiserver", "etcd"} {
			path := filepath.Join(c.dir, name+".log")
			if _, err := os.Stat(path); err == nil {
				tails = append(tails, fmt.Sprintf("kubetest: last lines of %s:\n%s", path, tailFile(path, logTailLines)))
			}
		}
	}
	c.mu.Lock()
	api, etcd := c.apiserver, c.etcd
	c.apiserver, c.etcd = nil, nil
	c.mu.Unlock()
	for _, p := range []*proc{api, etcd} {
		if p != nil {
			p.stop()
		}
	}
	for _, tail := range tails {
		t.Log(tail)
	}
}

// proc is a child process whose stdout and stderr go to a log file. One goroutine belongs to
// it, waiting for the exit; stop ends the process and waits for that goroutine.
type proc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and err is set
	err  error
}

func startProc(name, path, logPath string, args ...string) (*proc, error) {
	// Appended to, so that after a restart the tail shows both runs.
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "=== kubetest: %s %s\n", path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary even if it dies without running cleanups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after stopTimeout, and waits for the exit.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) tail() string {
	return fmt.Sprintf("last lines of %s:\n%s", p.log, tailFile(p.log, logTailLines))
}

// waitHTTP polls url until it answers 200, p exits, or the deadline passes.
func waitHTTP(p *proc, deadline time.Time, client *http.Client, url, token string) error {
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited: %v", p.name, p.err)
		}
		last = probe(client, url, token)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %v after %v", url, last, readyTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func probe(client *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

func tailFile(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}

// freePorts reserves n distinct loopback ports by listening on them all at once, then frees
// them for the processes (a small race with other programs, acceptable in tests).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// writeCredentials writes into c.dir: a CA (ca.crt), the apiserver's serving certificate for
// 127.0.0.1/localhost (apiserver.crt/key), the service-account key pair (sa.key/sa.pub) and
// a static token file with the admin token (tokens.csv).
func (c *Cluster) writeCredentials() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// 10.0.0.1 is the kubernetes Service's address in --service-cluster-ip-range.
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	c.token = hex.EncodeToString(tok)

	files := map[string][]byte{
		"ca.crt":        c.caPEM,
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"apiserver.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"sa.key":        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"sa.pub":        pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		// token,user,uid,"group,..."
		"tokens.csv": fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", c.token, AdminUser, AdminUser),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
