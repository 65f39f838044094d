package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// arbiterProc is a real `tidal arbiter` on loopback.
type arbiterProc struct {
	t      *testing.T
	dir    string
	url    string
	policy string
	cmd    *exec.Cmd
	log    *syncBuffer
}

// window returns a daily window in UTC that contains now (from, to minutes around it).
func window(now time.Time, fromMin, toMin int) string {
	f := now.UTC().Add(time.Duration(fromMin) * time.Minute)
	t := now.UTC().Add(time.Duration(toMin) * time.Minute)
	return f.Format("15:04") + "-" + t.Format("15:04")
}

func policyYAML(win string) string {
	return fmt.Sprintf(`sharedQueue: best-effort
queues:
  - name: queue-1
rules:
  - name: batch-window
    queue: queue-1
    lend: {milliCPU: 400, memory: 128Mi}
    window: "%s"
    timeZone: UTC
`, win)
}

func startArbiter(t *testing.T, nodes ...string) *arbiterProc {
	t.Helper()
	a := &arbiterProc{t: t, dir: t.TempDir(), log: &syncBuffer{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a.url = "http://" + addr
	var tokens strings.Builder
	for _, n := range nodes {
		tok := "token-of-" + n + "-0123456789"
		fmt.Fprintf(&tokens, "%s: %s\n", n, tok)
		if err := os.WriteFile(filepath.Join(a.dir, n+".token"), []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) string {
		p := filepath.Join(a.dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a.policy = write("policy.yaml", policyYAML(window(time.Now(), -60, 60)))
	cfg := write("arbiter.yaml", fmt.Sprintf("listenAddress: %s\npolicyFile: %s\ntokensFile: %s\nstateDir: %s\nleaseTTL: 3s\nnodeTimeout: 20s\npollInterval: 1s\n",
		addr, a.policy, write("tokens.yaml", tokens.String()), filepath.Join(a.dir, "state")))
	a.cmd = exec.Command(tidalBin, "arbiter", "--config", cfg)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.stop()
		if t.Failed() {
			t.Logf("arbiter log:\n%s", tail(a.log.String(), 40))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(a.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("arbiter not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (a *arbiterProc) stop() {
	if a.cmd.ProcessState != nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.cmd.Wait()
}

func (a *arbiterProc) agentConfig(node string) string {
	return fmt.Sprintf("nodeName: %s\narbiter:\n  url: %s\n  tokenFile: %s\n  reportInterval: 1s\neviction:\n  gracePeriod: 1s\n  coolDown: 1s\n",
		node, a.url, filepath.Join(a.dir, node+".token"))
}

func grantFor(n *node, queue string) (int64, bool) {
	s := n.status()
	if s.Lease == nil || !s.Lease.Active {
		return 0, false
	}
	for _, g := range s.Lease.Grants {
		if g.Queue == queue {
			return g.MilliCPU, true
		}
	}
	return 0, false
}

// With an arbiter the node lends only what its lease grants, and after a restart it holds no
// lease until the arbiter answers its first report: a limit at that cap would be under what
// the shared queue's work holds, which would be evicted at once as holding more than is lent.
// Nor does an expired lease take it: that work stops growing, and only a queue's work is
// evicted, after the grace period.
func TestLeaseNeverTakesWhatReclaimedWorkHolds(t *testing.T) {
	arb := startArbiter(t, "node-a")
	n := newNode(t, arb.agentConfig("node-a")+"memory:\n  growStepBytes: 512Mi\nloops:\n  slowInterval: 500ms\n")
	n.start()
	n.eventually(20*time.Second, "an active lease", func() error {
		if s := n.status(); s.Lease == nil || !s.Lease.Active {
			return fmt.Errorf("lease %+v", s.Lease)
		}
		return nil
	})
	hog := n.startMemoryHog()
	n.kill9()
	n.start()
	hog.keptFor(6)
	arb.stop()
	n.eventually(15*time.Second, "the lease expired", func() error {
		if s := n.status(); s.Lease == nil || s.Lease.Active {
			return fmt.Errorf("lease %+v", s.Lease)
		}
		return nil
	})
	hog.keptFor(6)
}

// Two real agents report to a real arbiter over loopback; each lends only what its lease
// grants; when the rule's window ends the queue's work is evicted while work of the shared
// queue stays; when the arbiter goes away the lease expires and the node lends nothing.
func TestArbiterLeasesAreEnforced(t *testing.T) {
	arb := startArbiter(t, "node-a", "node-b")
	// The quota mechanism, so the cgroup shows the grant to the millicore.
	a := newNode(t, arb.agentConfig("node-a")+"cpu:\n  growStepMilliCPU: 1000\n  mechanism: quota\n")
	b := newNode(t, arb.agentConfig("node-b"))
	a.start()
	b.start()

	for _, n := range []*node{a, b} {
		n.eventually(20*time.Second, "a lease granting queue-1", func() error {
			if m, ok := grantFor(n, "queue-1"); !ok || m == 0 {
				return fmt.Errorf("lease %+v", n.status().Lease)
			}
			return nil
		})
	}
	a.run("--tier", "reclaimed", "--queue", "queue-1", "--reclaim-priority", "1", "--name", "night-job", "--", "sleep", "120")
	a.run("--tier", "reclaimed", "--name", "shared-job", "--", "sleep", "120")
	a.waitWorkload("night-job")
	a.waitWorkload("shared-job")

	// Lending never exceeds what the lease grants.
	a.eventually(10*time.Second, "lending capped by the lease", func() error {
		s := a.status()
		var granted int64
		for _, g := range s.Lease.Grants {
			granted += g.MilliCPU
		}
		if s.Lendable.MilliCPU > granted {
			return fmt.Errorf("lends %dm, lease grants %dm", s.Lendable.MilliCPU, granted)
		}
		quota := a.file("cpu", a.root+"-reclaimed", "cpu.cfs_quota_us")
		if want := fmt.Sprint(max(granted, 100) * 100); granted > 100 && quota != want {
			return fmt.Errorf("reclaimed quota %s, want %s (granted %dm)", quota, want, granted)
		}
		return nil
	})

	// The window ends: the arbiter reloads the policy, queue-1's grant goes, its work is
	// evicted after the grace period; the shared queue's work stays.
	if err := os.WriteFile(arb.policy, []byte(policyYAML(window(time.Now(), 120, 180))), 0o600); err != nil {
		t.Fatal(err)
	}
	a.eventually(20*time.Second, "queue-1 work evicted", func() error {
		if _, ok := a.workload("night-job"); ok {
			return fmt.Errorf("night-job still runs; lease %+v", a.status().Lease)
		}
		return nil
	})
	if w, ok := a.workload("shared-job"); !ok || len(w.PIDs) == 0 {
		t.Error("shared-queue work was stopped when queue-1's window ended")
	}
	evicted := false
	for _, act := range a.status().Actions {
		evicted = evicted || (act.Kind == "evict" && strings.HasPrefix(act.Reason, "night-job"))
	}
	if !evicted {
		t.Error("no evict action names night-job")
	}

	// The arbiter goes away: once the lease expires (3s TTL) the node lends nothing.
	arb.stop()
	for _, n := range []*node{a, b} {
		n.eventually(15*time.Second, "lease expired, nothing lent", func() error {
			s := n.status()
			if s.Lease == nil || s.Lease.Active || s.Lendable.MilliCPU != 0 || s.Lendable.MemoryBytes != 0 {
				return fmt.Errorf("lease %+v, lendable %+v", s.Lease, s.Lendable)
			}
			return nil
		})
	}
	// The cgroups follow at the next slow-loop pass.
	a.eventually(5*time.Second, "reclaimed quota at the minimum", func() error {
		if got := a.file("cpu", a.root+"-reclaimed", "cpu.cfs_quota_us"); got != "10000" {
			return fmt.Errorf("reclaimed quota after the lease expired = %s, want 10000 (the 100m minimum)", got)
		}
		return nil
	})
}
