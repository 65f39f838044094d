package kube_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
	n.start()
	eventually(t, 30*time.Second, "queue label on the Node", func() error {
		if v := c.node(t, "node-a").Labels["queue.tidalqos.io/queue-1"]; v != "true" {
			return fmt.Errorf("labels %v", c.node(t, "node-a").Labels)
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
