package state

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
	pgpu "github.com/tidalqos/tidal/plugins/gpu"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/sysadvisor/topology"
)

func testStore(t *testing.T) (*Store, string) {
	t.Helper()
	topo := &topology.Topology{NUMANodes: []topology.NUMANode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3)}}}
	for c := range 4 {
		topo.CPUs = append(topo.CPUs, topology.CPU{ID: c, Core: c, NUMANode: 0})
	}
	tracker, err := pgpu.NewTracker(pgpu.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return NewStore(NewAllocator(topo, cpuset.New(), tracker), dir), dir
}

func dedicated(name, uid string, cores int) Spec {
	return Spec{Source: "test", WholeCores: cores, Workload: plugins.Workload{Name: name, UID: uid, Tier: qos.Dedicated, Cgroup: "t/" + name, Started: time.Unix(1, 0)}}
}

// One allocator for every source: cores are kept across updates, given back on remove, and
// a request that cannot be met changes nothing.
func TestStoreAllocatesOnceAndKeepsCores(t *testing.T) {
	s, _ := testStore(t)
	a, err := s.Put(dedicated("a", "u1", 2))
	if err != nil || a.DedicatedCPUs.Size() != 2 {
		t.Fatalf("a: %v %v", a.DedicatedCPUs, err)
	}
	again, err := s.Put(dedicated("a", "u1", 2))
	if err != nil || !again.DedicatedCPUs.Equals(a.DedicatedCPUs) {
		t.Errorf("an update moved a's cores: %v -> %v (%v)", a.DedicatedCPUs, again.DedicatedCPUs, err)
	}
	var cannot *AllocationError
	if _, err := s.Add(dedicated("b", "", 2)); !errors.As(err, &cannot) {
		t.Errorf("2 more cores of 4 with 2 taken and 1 kept shared: err = %v, want an AllocationError", err)
	}
	if _, ok := s.Snapshot().Get("b"); ok {
		t.Error("a failed allocation left a record")
	}
	if _, err := s.Add(dedicated("a", "", 1)); !errors.Is(err, ErrExists) {
		t.Errorf("Add of a taken name: %v", err)
	}
	// A new UID is a new workload: it starts afresh, and allocates again.
	s.Observe("a", time.Now(), Usage{PIDs: []int{42}})
	replaced, err := s.Put(dedicated("a", "u2", 1))
	if err != nil || replaced.DedicatedCPUs.Size() != 1 || len(replaced.PIDs) != 0 {
		t.Errorf("replaced a: %+v %v", replaced, err)
	}
	if _, ok := s.Remove("a"); !ok || !s.Snapshot().Dedicated.IsEmpty() {
		t.Errorf("cores still taken after remove: %v", s.Snapshot().Dedicated)
	}
}

// Snapshots do not change when the store does.
func TestSnapshotsAreImmutable(t *testing.T) {
	s, _ := testStore(t)
	if _, err := s.Put(Spec{Workload: plugins.Workload{Name: "w", Tier: qos.Shared, Cgroup: "t/w"}}); err != nil {
		t.Fatal(err)
	}
	s.Observe("w", time.Now(), Usage{PIDs: []int{1, 2}})
	snap := s.Snapshot()
	s.Observe("w", time.Now(), Usage{PIDs: []int{3}})
	if r, _ := snap.Get("w"); len(r.PIDs) != 2 {
		t.Errorf("the snapshot changed under its reader: %v", r.PIDs)
	}
	snap.Workloads[0].PIDs[0] = 99
	if r, _ := s.Snapshot().Get("w"); r.PIDs[0] != 3 {
		t.Errorf("a reader's edit reached the store: %v", r.PIDs)
	}
}

// The checkpoint is written by Save (or RunCheckpoints), not by the change itself, and holds
// the newest state; a failed write is reported and the next change tries again.
func TestCheckpointWrittenOutsideTheChange(t *testing.T) {
	s, dir := testStore(t)
	if _, err := s.Put(dedicated("a", "u1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpointName)); !os.IsNotExist(err) {
		t.Fatalf("the change wrote the checkpoint itself (%v)", err)
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCheckpoint(dir)
	if err != nil || len(got) != 1 || got[0].UID != "u1" || got[0].DedicatedCPUs.Size() != 1 {
		t.Fatalf("checkpoint = %+v, %v", got, err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if _, err := s.Put(dedicated("b", "u2", 1)); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := s.Save(); err == nil {
			t.Error("a write to a read-only state folder reported no error")
		}
	}
}

// Snapshots list workloads by cgroup, and show each add, replacement and removal at once
// (the store keeps that order between changes).
func TestSnapshotOrderFollowsChanges(t *testing.T) {
	s, _ := testStore(t)
	put := func(name, uid string) {
		t.Helper()
		if _, err := s.Put(Spec{Workload: plugins.Workload{Name: name, UID: uid, Tier: qos.Shared, Cgroup: "t/" + name}}); err != nil {
			t.Fatal(err)
		}
	}
	names := func() (out []string) {
		for _, r := range s.Snapshot().Workloads {
			out = append(out, r.Name+"/"+r.UID)
		}
		return out
	}
	put("c", "1")
	put("a", "1")
	put("b", "1")
	if got := names(); !slices.Equal(got, []string{"a/1", "b/1", "c/1"}) {
		t.Fatalf("snapshot = %v", got)
	}
	s.Remove("b")
	put("a", "2") // replaced
	put("d", "1")
	if got := names(); !slices.Equal(got, []string{"a/2", "c/1", "d/1"}) {
		t.Fatalf("after changes snapshot = %v", got)
	}
}
