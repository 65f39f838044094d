package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	sysgpu "github.com/tidalqos/tidal/sysadvisor/gpu"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// gpu is one device in a read: index i, UUID "GPU-i", minor i, on NUMA node numa.
func gpu(i, numa, util int, pids ...int) sysgpu.Device {
	d := sysgpu.Device{
		Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "NVIDIA H200", Minor: i,
		NUMANode: numa, UtilizationGPU: util, MemoryTotal: 141 << 30,
	}
	for _, p := range pids {
		d.Processes = append(d.Processes, sysgpu.Process{PID: p, UsedMemory: 1 << 30})
	}
	return d
}

// owners maps PIDs to owners; a PID not listed is of no known workload.
type owners map[int]Owner

func (o owners) fn(pid int) Owner { return o[pid] }

func online(w string) Owner { return Owner{Workload: w, Online: true} }
func reclaimed(w string, prio int32) Owner {
	return Owner{Workload: w, ReclaimPriority: prio}
}

func newTracker(t *testing.T) *Tracker {
	t.Helper()
	tr, err := NewTracker(Config{IdleUtilizationBelow: 10, IdleWindow: 5 * time.Minute, ReclaimGrace: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func state(t *testing.T, tr *Tracker, uuid string) DeviceState {
	t.Helper()
	for _, s := range tr.States() {
		if s.UUID == uuid {
			return s
		}
	}
	t.Fatalf("no state for %s", uuid)
	return DeviceState{}
}

func wantLendable(t *testing.T, tr *Tracker, uuid string, want bool, reasonHas string) {
	t.Helper()
	s := state(t, tr, uuid)
	if s.Lendable != want || !strings.Contains(s.Reason, reasonHas) {
		t.Fatalf("%s: lendable %v (%q), want %v with reason containing %q", uuid, s.Lendable, s.Reason, want, reasonHas)
	}
}

// lendAll makes every device idle for a whole window.
func lendAll(tr *Tracker, o owners, devs ...sysgpu.Device) {
	tr.Observe(at(0), devs, o.fn)
	tr.Observe(at(5*time.Minute), devs, o.fn)
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	tr, err := NewTracker(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.cfg != DefaultConfig() {
		t.Fatalf("zero config: got %+v, want defaults %+v", tr.cfg, DefaultConfig())
	}
	_, err = NewTracker(Config{IdleUtilizationBelow: 101, IdleWindow: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "IdleUtilizationBelow 101") || !strings.Contains(err.Error(), "IdleWindow -1s") {
		t.Fatalf("want both fields named, got %v", err)
	}
}

func TestIdleWindowMakesLendable(t *testing.T) {
	tr := newTracker(t)
	for _, step := range []struct {
		at       time.Duration
		util     int
		lendable bool
		reason   string
	}{
		{0, 5, false, "idle for 0s of 5m0s"},
		{4 * time.Minute, 9, false, "idle for 4m0s of 5m0s"},
		{5 * time.Minute, 0, true, "idle for 5m0s (utilization under 10%"},
	} {
		tr.Observe(at(step.at), []sysgpu.Device{gpu(0, 0, step.util)}, nil)
		wantLendable(t, tr, "GPU-0", step.lendable, step.reason)
	}
	if n := tr.Lendable(); n != 1 {
		t.Fatalf("Lendable() = %d, want 1", n)
	}
}

func TestBusySpikeRestartsIdleClock(t *testing.T) {
	tr := newTracker(t)
	tr.Observe(at(0), []sysgpu.Device{gpu(0, 0, 0)}, nil)
	tr.Observe(at(4*time.Minute), []sysgpu.Device{gpu(0, 0, 50)}, nil)
	wantLendable(t, tr, "GPU-0", false, "utilization 50%, idle needs under 10% for 5m0s")
	tr.Observe(at(4*time.Minute+30*time.Second), []sysgpu.Device{gpu(0, 0, 3)}, nil)
	tr.Observe(at(9*time.Minute), []sysgpu.Device{gpu(0, 0, 3)}, nil) // 5m after t0, 4m30 after the spike
	wantLendable(t, tr, "GPU-0", false, "idle for 4m30s of 5m0s")
	tr.Observe(at(9*time.Minute+30*time.Second), []sysgpu.Device{gpu(0, 0, 3)}, nil)
	wantLendable(t, tr, "GPU-0", true, "idle for 5m0s")

	// A spike on a lendable GPU nobody borrows takes it back too.
	tr.Observe(at(10*time.Minute), []sysgpu.Device{gpu(0, 0, 10)}, nil)
	wantLendable(t, tr, "GPU-0", false, "utilization 10%")
}

func TestUnknownUtilizationIsNeverIdle(t *testing.T) {
	tr := newTracker(t)
	lendAll(tr, nil, gpu(0, 0, -1))
	wantLendable(t, tr, "GPU-0", false, "utilization unknown")
}

func TestOnlineProcessBlocksAtOnce(t *testing.T) {
	tr := newTracker(t)
	o := owners{100: online("web"), 200: reclaimed("job", 1)}
	lendAll(tr, o, gpu(0, 0, 0), gpu(1, 0, 0))
	if _, err := tr.Assign(Request{Workload: "job", GPUs: 1, ReclaimPriority: 1}); err != nil {
		t.Fatal(err)
	}
	// The online workload starts on GPU-0 (the one lent to job) while it is idle.
	tr.Observe(at(6*time.Minute), []sysgpu.Device{gpu(0, 0, 0, 100, 200), gpu(1, 0, 0)}, o.fn)
	wantLendable(t, tr, "GPU-0", false, "used by online workload web (pid 100)")
	wantLendable(t, tr, "GPU-1", true, "idle")
	if n := tr.Lendable(); n != 1 {
		t.Fatalf("Lendable() = %d, want 1", n)
	}
	got := tr.Reclaim(at(6 * time.Minute))
	want := []Victim{{
		Workload: "job", ReclaimPriority: 1, GPUs: []string{"GPU-0"},
		Reason: "GPU 0 (GPU-0) taken back: used by online workload web (pid 100)",
		Since:  at(6 * time.Minute), Deadline: at(6*time.Minute + 30*time.Second),
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("victims:\n got %+v\nwant %+v", got, want)
	}
}

func TestProcessOfNoKnownWorkloadBlocksAndGoneIsIgnored(t *testing.T) {
	tr := newTracker(t)
	o := owners{7: {Gone: true}}
	lendAll(tr, o, gpu(0, 0, 0, 7), gpu(1, 0, 0, 8))
	wantLendable(t, tr, "GPU-0", true, "idle")
	wantLendable(t, tr, "GPU-1", false, "used by pid 8 of no known workload")
	// A nil OwnerFunc knows nobody.
	tr.Observe(at(6*time.Minute), []sysgpu.Device{gpu(0, 0, 0, 7)}, nil)
	wantLendable(t, tr, "GPU-0", false, "used by pid 7 of no known workload")
}

func TestBorrowerUtilizationKeepsItLent(t *testing.T) {
	tr := newTracker(t)
	o := owners{200: reclaimed("job", 0)}
	lendAll(tr, o, gpu(0, 0, 0))
	if _, err := tr.Assign(Request{Workload: "job", GPUs: 1}); err != nil {
		t.Fatal(err)
	}
	// Before its process shows up, and while it runs at 100%: still lendable.
	tr.Observe(at(6*time.Minute), []sysgpu.Device{gpu(0, 0, 100)}, o.fn)
	for m := 7; m < 30; m += 5 {
		tr.Observe(at(time.Duration(m)*time.Minute), []sysgpu.Device{gpu(0, 0, 100, 200)}, o.fn)
	}
	wantLendable(t, tr, "GPU-0", true, "no online use for 27m0s (its utilization is the borrower's)")
	if v := tr.Reclaim(at(30 * time.Minute)); len(v) != 0 {
		t.Fatalf("no victims expected, got %+v", v)
	}
}

func TestLeaseLendsAndItsEndTakesBack(t *testing.T) {
	tr := newTracker(t)
	o := owners{100: online("train"), 200: reclaimed("job", 0)}
	// Busy GPUs with no online process: not idle, but the lease lends them.
	busy := []sysgpu.Device{gpu(0, 0, 90), gpu(1, 0, 90)}
	tr.Observe(at(0), busy, o.fn)
	wantLendable(t, tr, "GPU-0", false, "utilization 90%")
	tr.SetLeased(at(time.Second), []string{"GPU-0", "GPU-1"})
	wantLendable(t, tr, "GPU-0", true, "lent by the lease")
	if n := tr.Lendable(); n != 2 {
		t.Fatalf("Lendable() = %d, want 2", n)
	}
	// An online process still wins over the lease.
	tr.Observe(at(2*time.Second), []sysgpu.Device{gpu(0, 0, 90), gpu(1, 0, 90, 100)}, o.fn)
	wantLendable(t, tr, "GPU-1", false, "used by online workload train")

	uuids, err := tr.Assign(Request{Workload: "job", GPUs: 1})
	if err != nil || !reflect.DeepEqual(uuids, []string{"GPU-0"}) {
		t.Fatalf("Assign: %v, %v", uuids, err)
	}
	tr.Observe(at(time.Hour), []sysgpu.Device{gpu(0, 0, 90, 200), gpu(1, 0, 0)}, o.fn)
	wantLendable(t, tr, "GPU-0", true, "lent by the lease")

	// The lease ends: GPU-0 is taken back at once, its borrower must go.
	tr.SetLeased(at(2*time.Hour), nil)
	wantLendable(t, tr, "GPU-0", false, "the lease stopped lending it")
	v := tr.Reclaim(at(2 * time.Hour))
	if len(v) != 1 || v[0].Workload != "job" || !v[0].Deadline.Equal(at(2*time.Hour+30*time.Second)) ||
		!strings.Contains(v[0].Reason, "the lease stopped lending it") {
		t.Fatalf("victims: %+v", v)
	}
}

func TestAssignPrefersNUMAAndRefusesWithReason(t *testing.T) {
	tr := newTracker(t)
	// NUMA 0: GPU-0, GPU-1; NUMA 1: GPU-2, GPU-3, GPU-4; GPU-5 busy.
	lendAll(tr, nil, gpu(0, 0, 0), gpu(1, 0, 0), gpu(2, 1, 0), gpu(3, 1, 0), gpu(4, 1, 0), gpu(5, 1, 80))

	got, err := tr.Assign(Request{Workload: "a", GPUs: 2, PreferNUMA: []int{0}})
	if err != nil || !reflect.DeepEqual(got, []string{"GPU-0", "GPU-1"}) {
		t.Fatalf("prefer NUMA 0: got %v, %v", got, err)
	}
	got, err = tr.Assign(Request{Workload: "b", GPUs: 2}) // no preference: the node with most free
	if err != nil || !reflect.DeepEqual(got, []string{"GPU-2", "GPU-3"}) {
		t.Fatalf("no preference: got %v, %v", got, err)
	}
	_, err = tr.Assign(Request{Workload: "c", GPUs: 2})
	if err == nil || !strings.Contains(err.Error(), "gpu assign c: asks for 2 GPUs, 1 lendable and free (6 GPUs: 4 lent, 0 being taken back, 1 lendable") {
		t.Fatalf("want a refusal with counts, got %v", err)
	}
	if _, err := tr.Assign(Request{Workload: "a", GPUs: 1}); err == nil || !strings.Contains(err.Error(), "already holds GPU-0,GPU-1") {
		t.Fatalf("second assign: got %v", err)
	}
	if _, err := tr.Assign(Request{Workload: "d", GPUs: 0}); err == nil {
		t.Fatal("0 GPUs: want an error")
	}
	tr.Release("a")
	got, err = tr.Assign(Request{Workload: "c", GPUs: 2, PreferNUMA: []int{1}})
	// NUMA 1 has only GPU-4 free; the rest comes from NUMA 0.
	if err != nil || !reflect.DeepEqual(got, []string{"GPU-0", "GPU-4"}) {
		t.Fatalf("after release: got %v, %v", got, err)
	}
	if s := state(t, tr, "GPU-4"); s.AssignedTo != "c" || s.NUMANode != 1 || s.Index != 4 {
		t.Fatalf("state of GPU-4: %+v", s)
	}
}

func TestVisibility(t *testing.T) {
	tr := newTracker(t)
	devs := []sysgpu.Device{gpu(0, 0, 0), gpu(1, 0, 0), gpu(2, 0, 0)}
	devs[1].Minor, devs[2].Minor = 5, 4
	lendAll(tr, nil, devs...)
	if _, err := tr.Assign(Request{Workload: "job", GPUs: 2, PreferNUMA: []int{0}}); err != nil {
		t.Fatal(err)
	}
	env, minors := tr.Visibility("job")
	wantEnv := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1", "CUDA_VISIBLE_DEVICES": "GPU-0,GPU-1"}
	if !reflect.DeepEqual(env, wantEnv) || !reflect.DeepEqual(minors, []int{0, 5}) {
		t.Fatalf("job: env %v minors %v", env, minors)
	}
	env, minors = tr.Visibility("other")
	wantEnv = map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
	if !reflect.DeepEqual(env, wantEnv) || minors != nil {
		t.Fatalf("no GPUs: env %v minors %v", env, minors)
	}
}

func TestNoMinorNumberIsNotLent(t *testing.T) {
	tr := newTracker(t)
	d := gpu(0, 0, 0)
	d.Minor = -1
	lendAll(tr, nil, d)
	wantLendable(t, tr, "GPU-0", false, "no /dev/nvidia minor number")
}

func TestReclaimOrderDeadlinesAndRelease(t *testing.T) {
	tr := newTracker(t)
	o := owners{
		100: online("web"),
		1:   reclaimed("low", 1), 2: reclaimed("high", 9), 3: reclaimed("mid", 5),
	}
	devs := func(pids ...[]int) []sysgpu.Device {
		var out []sysgpu.Device
		for i, p := range pids {
			out = append(out, gpu(i, 0, 0, p...))
		}
		return out
	}
	tr.Observe(at(0), devs(nil, nil, nil, nil), o.fn)
	tr.SetLeased(at(0), []string{"GPU-0", "GPU-1", "GPU-2"})
	for _, r := range []Request{{Workload: "high", GPUs: 1, ReclaimPriority: 9}, {Workload: "low", GPUs: 1, ReclaimPriority: 1}} {
		if _, err := tr.Assign(r); err != nil {
			t.Fatal(err)
		}
	}
	// "mid" runs on GPU-2 without an assignment (it was started before an agent restart).
	tr.Observe(at(time.Minute), devs([]int{2}, []int{1}, []int{3}, nil), o.fn)

	// The online workload starts on GPU-0 (high's) at 2m; the lease ends at 3m.
	tr.Observe(at(2*time.Minute), devs([]int{2, 100}, []int{1}, []int{3}, nil), o.fn)
	tr.SetLeased(at(3*time.Minute), nil)

	got := tr.Reclaim(at(2*time.Minute + 45*time.Second))
	type brief struct {
		w        string
		deadline time.Time
		overdue  bool
		gpus     string
	}
	var b []brief
	for _, v := range got {
		b = append(b, brief{v.Workload, v.Deadline, v.Overdue, strings.Join(v.GPUs, ",")})
	}
	want := []brief{
		{"low", at(3*time.Minute + 30*time.Second), false, "GPU-1"},
		{"mid", at(3*time.Minute + 30*time.Second), false, "GPU-2"},
		{"high", at(2*time.Minute + 30*time.Second), true, "GPU-0"},
	}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("victims:\n got %+v\nwant %+v", b, want)
	}

	// Victims stay listed, with their first deadline, until released.
	tr.SetLeased(at(4*time.Minute), []string{"GPU-1"})
	if got := tr.Reclaim(at(4 * time.Minute)); len(got) != 3 || !got[0].Overdue {
		t.Fatalf("sticky victims: %+v", got)
	}
	// high stopped; low's GPU is leased again so it may stay (but was told to go).
	tr.Observe(at(4*time.Minute), devs([]int{100}, []int{1}, []int{3}, nil), o.fn)
	tr.Release("low")
	tr.Release("high")
	got = tr.Reclaim(at(4 * time.Minute))
	if len(got) != 1 || got[0].Workload != "mid" {
		t.Fatalf("after release: %+v", got)
	}
	// mid released while its process is still on GPU-2: listed again, still overdue.
	tr.Release("mid")
	got = tr.Reclaim(at(4 * time.Minute))
	if len(got) != 1 || got[0].Workload != "mid" || !got[0].Overdue {
		t.Fatalf("mid still running: %+v", got)
	}
	tr.Observe(at(5*time.Minute), devs([]int{100}, nil, nil, nil), o.fn)
	tr.Release("mid")
	if got := tr.Reclaim(at(5 * time.Minute)); len(got) != 0 {
		t.Fatalf("all gone: %+v", got)
	}
}

func TestUnlentBorrowerIsNotReclaimedWithoutOnlineNeed(t *testing.T) {
	// After an agent restart a reclaimed job runs on a GPU that is not lendable yet.
	tr := newTracker(t)
	o := owners{1: reclaimed("job", 0)}
	tr.Observe(at(0), []sysgpu.Device{gpu(0, 0, 95, 1), gpu(1, 0, 0)}, o.fn)
	if v := tr.Reclaim(at(0)); len(v) != 0 {
		t.Fatalf("no online need, no victims: %+v", v)
	}
	tr.Observe(at(5*time.Minute), []sysgpu.Device{gpu(0, 0, 95, 1), gpu(1, 0, 0)}, o.fn)
	wantLendable(t, tr, "GPU-0", true, "no online use for 5m0s")
	// Its GPU is not handed to anyone else.
	got, err := tr.Assign(Request{Workload: "other", GPUs: 2})
	if err == nil {
		t.Fatalf("GPU-0 is in use by job: want a refusal, got %v", got)
	}
	if got, err := tr.Assign(Request{Workload: "job", GPUs: 2}); err != nil || len(got) != 2 {
		t.Fatalf("job itself may take it: %v, %v", got, err)
	}
}

func TestMissingDeviceIsNotLendableButNotRevoked(t *testing.T) {
	tr := newTracker(t)
	lendAll(tr, nil, gpu(0, 0, 0), gpu(1, 0, 0))
	if _, err := tr.Assign(Request{Workload: "job", GPUs: 2}); err != nil {
		t.Fatal(err)
	}
	tr.Observe(at(6*time.Minute), []sysgpu.Device{gpu(1, 0, 0)}, nil)
	wantLendable(t, tr, "GPU-0", false, "not in the latest NVML read")
	if v := tr.Reclaim(at(6 * time.Minute)); len(v) != 0 {
		t.Fatalf("a failed read is no online need: %+v", v)
	}
	tr.Observe(at(7*time.Minute), []sysgpu.Device{gpu(0, 0, 0), gpu(1, 0, 0)}, nil)
	wantLendable(t, tr, "GPU-0", false, "idle for 0s of 5m0s")
}

func TestForNUMAAndNUMAOf(t *testing.T) {
	tr := newTracker(t)
	o := owners{100: online("web"), 1: reclaimed("job", 0)}
	// NUMA 0: GPU-0 (online), GPU-1; NUMA 1: GPU-2 (lent to job), GPU-3, GPU-4.
	devs := []sysgpu.Device{gpu(0, 0, 0, 100), gpu(1, 0, 0), gpu(2, 1, 0), gpu(3, 1, 0), gpu(4, 1, 0)}
	lendAll(tr, o, devs...)
	devs[2].Processes = []sysgpu.Process{{PID: 1}}
	tr.Observe(at(6*time.Minute), devs, o.fn)

	node, uuids, ok := tr.ForNUMA(2)
	if !ok || node != 1 || !reflect.DeepEqual(uuids, []string{"GPU-3", "GPU-4"}) {
		t.Fatalf("ForNUMA(2) = %d %v %v; want node 1, unlent GPU-3,GPU-4", node, uuids, ok)
	}
	node, uuids, ok = tr.ForNUMA(3)
	if !ok || node != 1 || !reflect.DeepEqual(uuids, []string{"GPU-3", "GPU-4", "GPU-2"}) {
		t.Fatalf("ForNUMA(3) = %d %v %v", node, uuids, ok)
	}
	if _, _, ok := tr.ForNUMA(4); ok {
		t.Fatal("ForNUMA(4): no node has 4 GPUs free of online use")
	}
	if node, ok := tr.NUMAOf([]string{"GPU-0", "GPU-2", "GPU-3"}); !ok || node != 1 {
		t.Fatalf("NUMAOf: %d %v", node, ok)
	}
	if _, ok := tr.NUMAOf([]string{"GPU-9"}); ok {
		t.Fatal("NUMAOf unknown GPU: want !ok")
	}
}

func TestStatesInIndexOrder(t *testing.T) {
	tr := newTracker(t)
	tr.Observe(at(0), []sysgpu.Device{gpu(2, 1, 0), gpu(0, 0, 50), gpu(1, -1, 0)}, nil)
	got := tr.States()
	want := []DeviceState{
		{UUID: "GPU-0", Index: 0, NUMANode: 0, Reason: "utilization 50%, idle needs under 10% for 5m0s"},
		{UUID: "GPU-1", Index: 1, NUMANode: -1, Reason: "idle for 0s of 5m0s"},
		{UUID: "GPU-2", Index: 2, NUMANode: 1, Reason: "idle for 0s of 5m0s"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("states:\n got %+v\nwant %+v", got, want)
	}
}

func TestOwnerByCgroup(t *testing.T) {
	workloads := []plugins.Workload{
		{Name: "web", Tier: qos.Shared, Cgroup: "tidal/shared/web"},
		{Name: "db", Tier: qos.Dedicated, Cgroup: "tidal/dedicated/db"},
		{Name: "job", Tier: qos.Reclaimed, Cgroup: "tidal/reclaimed/job", ReclaimPriority: 3},
	}
	cgroups := map[int]string{
		1: "tidal/shared/web",
		2: "/tidal/reclaimed/job/cri-containerd-abc.scope", // a container under the workload
		3: "tidal/dedicated/db",
		4: "user.slice/session-1.scope",
		5: "tidal/shared/webby", // not under tidal/shared/web
	}
	cgroupOf := func(pid int) (string, error) {
		switch pid {
		case 6:
			return "", fmt.Errorf("cgroup of pid 6: %w", fs.ErrNotExist)
		case 7:
			return "", errors.New("permission denied")
		}
		return cgroups[pid], nil
	}
	owner := OwnerByCgroup(workloads, cgroupOf)
	for pid, want := range map[int]Owner{
		1: {Workload: "web", Online: true},
		2: {Workload: "job", ReclaimPriority: 3},
		3: {Workload: "db", Online: true},
		4: {},
		5: {},
		6: {Gone: true},
		7: {},
	} {
		if got := owner(pid); got != want {
			t.Errorf("pid %d: got %+v, want %+v", pid, got, want)
		}
	}
}

func TestLateReclaimedUserStillGetsGrace(t *testing.T) {
	tr := newTracker(t)
	o := owners{100: online("web"), 1: reclaimed("job", 0)}
	tr.Observe(at(0), []sysgpu.Device{gpu(0, 0, 0, 100)}, o.fn)
	// A reclaimed job starts on the online GPU (not through tidal) 10 minutes later.
	tr.Observe(at(10*time.Minute), []sysgpu.Device{gpu(0, 0, 0, 100, 1)}, o.fn)
	tr.Observe(at(11*time.Minute), []sysgpu.Device{gpu(0, 0, 0, 100, 1)}, o.fn)
	v := tr.Reclaim(at(11 * time.Minute))
	if len(v) != 1 || !v[0].Since.Equal(at(10*time.Minute)) || !v[0].Deadline.Equal(at(10*time.Minute+30*time.Second)) {
		t.Fatalf("victims: %+v", v)
	}
}

// TestConcurrentUse runs the control loop and the hooks' calls at once (go test -race).
func TestConcurrentUse(t *testing.T) {
	tr := newTracker(t)
	o := owners{1: reclaimed("job-0", 0)}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			tr.Observe(at(time.Duration(i)*time.Minute), []sysgpu.Device{gpu(0, 0, 0, 1), gpu(1, 0, 0)}, o.fn)
			if i%50 == 0 {
				tr.SetLeased(at(time.Duration(i)*time.Minute), []string{"GPU-1"})
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			w := fmt.Sprintf("job-%d", i%3)
			_, _ = tr.Assign(Request{Workload: w, GPUs: 1})
			tr.Visibility(w)
			tr.Reclaim(at(time.Duration(i) * time.Minute))
			tr.States()
			tr.ForNUMA(1)
			tr.Release(w)
		}
	}()
	wg.Wait()
}

func TestAdoptAfterRestart(t *testing.T) {
	tr := newTracker(t)
	o := owners{1: reclaimed("job", 2), 100: online("web")}
	tr.Observe(at(0), []sysgpu.Device{gpu(0, 0, 90, 1), gpu(1, 0, 0)}, o.fn)
	if err := tr.Adopt("job", 2, []string{"GPU-0"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		w     string
		uuids []string
		want  string
	}{
		{"other", []string{"GPU-0"}, "GPU GPU-0 is held by job"},
		{"other", []string{"GPU-7"}, "GPU GPU-7 is not known"},
		{"other", []string{"GPU-1", "GPU-1"}, "listed twice"},
		{"job", []string{"GPU-1"}, "already holds GPU-0"},
	} {
		if err := tr.Adopt(bad.w, 0, bad.uuids); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Adopt(%s, %v): got %v, want %q", bad.w, bad.uuids, err, bad.want)
		}
	}
	// Not lendable yet, but not taken back either; lendable after a window.
	if v := tr.Reclaim(at(time.Minute)); len(v) != 0 {
		t.Fatalf("victims: %+v", v)
	}
	tr.Observe(at(5*time.Minute), []sysgpu.Device{gpu(0, 0, 90, 1), gpu(1, 0, 0)}, o.fn)
	wantLendable(t, tr, "GPU-0", true, "no online use")
	if env, _ := tr.Visibility("job"); env["NVIDIA_VISIBLE_DEVICES"] != "GPU-0" {
		t.Fatalf("env %v", env)
	}
	// Online work arrives: the adopted holder is reclaimed with its priority.
	tr.Observe(at(6*time.Minute), []sysgpu.Device{gpu(0, 0, 90, 1, 100), gpu(1, 0, 0)}, o.fn)
	if v := tr.Reclaim(at(6 * time.Minute)); len(v) != 1 || v[0].Workload != "job" || v[0].ReclaimPriority != 2 {
		t.Fatalf("victims: %+v", v)
	}
}

func TestDeviceRules(t *testing.T) {
	none := DeviceRules([]int{0, 1}, nil)
	if got := strings.Join(none, ";"); got != "allow c 195:* rwm;allow c 195:0 rwm;allow c 195:1 rwm;deny c 195:* rwm" {
		t.Errorf("no GPU held: %s", got)
	}
	one := DeviceRules([]int{0, 1, 2}, []int{1})
	if got := strings.Join(one, ";"); got != "allow c 195:* rwm;allow c 195:0 rwm;allow c 195:1 rwm;allow c 195:2 rwm;deny c 195:0 rwm;deny c 195:2 rwm" {
		t.Errorf("GPU 1 held: %s", got)
	}
}
