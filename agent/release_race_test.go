package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// Releasing workloads while reconcile passes run back to back leaves no cgroup behind: a pass
// holding a snapshot from before a release must not make the released workload's cgroup
// again after its removal (the 30-minute soak found 12 such orphans in 29880 churns). Real
// cgroups under a root of the test's own.
func TestReleaseBesideReconcileLeavesNoCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("real cgroups")
	}
	layout := isolationtest.Layout(t)
	root := isolationtest.RootName(t, layout)
	a := realAgent(t, layout, root)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // owned: stopped below, before the test checks
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_ = a.reconcile()
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-done
		}
	}()

	const n = 60
	for i := range n {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("w%d", i)
		tier := []string{"shared", "reclaimed"}[i%2]
		if _, err := a.Admit(AdmitRequest{Name: name, Tier: tier, PID: cmd.Process.Pid}, 0); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("admit %s: %v", name, err)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for try := 0; ; try++ {
			err := a.Release(name)
			if err == nil || strings.Contains(err.Error(), "no workload named") {
				break
			}
			if try == 200 {
				t.Fatalf("release %s: %v", name, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(stop)
	<-done
	var left []string
	for _, tier := range []qos.Tier{qos.Shared, qos.Reclaimed} {
		entries, err := os.ReadDir(layout.Dir("cpu", plugins.TierPath(root, tier)))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				left = append(left, string(tier)+"/"+e.Name())
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("%d of %d released workloads left a cgroup: %v", len(left), n, left)
	}
}
