package faults

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/tests/testutil"
)

// sample is one look at the agent during the soak.
type sample struct {
	At         float64 `json:"at"` // seconds since the churn began
	RSSBytes   int64   `json:"rssBytes"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	Cgroups    int     `json:"cgroups"`
	Workloads  int     `json:"workloads"`
}

type soakResult struct {
	Duration   string   `json:"duration"`
	Workloads  int      `json:"workloads"`
	Churned    int      `json:"churned"`
	Refused    int      `json:"refused"`
	Baseline   sample   `json:"baseline"` // agent started, nothing admitted
	Samples    []sample `json:"samples"`
	After      sample   `json:"after"` // churn stopped, everything released
	Pass       bool     `json:"pass"`
	Rule       string   `json:"rule"`
	Violations []string `json:"violations,omitempty"`
}

func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("TIDAL_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TIDAL_SOAK_DURATION: %v", err)
		}
		return d
	}
	return 20 * time.Second // the short mode plain `go test` runs; `make soak` runs 30m
}

// TestSoak keeps 200 workloads on a real agent (half shared, half reclaimed), churning them
// at random (a workload's process killed, the workload released, a new one started and
// admitted) with bursts of online CPU load on the node so the fast path acts, for
// TIDAL_SOAK_DURATION. It samples the agent's RSS, goroutines, open fds and the cgroup count.
// Pass rule: after the churn, with everything released, no cgroup, fd or goroutine is left
// beyond the baseline (+2 fds, +5 goroutines of slack); RSS in the last quarter of the churn
// is within 20% + 8 MiB of RSS in its second quarter (the first is warm-up).
func TestSoak(t *testing.T) {
	d := soakDuration(t)
	o := testutil.Record(t, fmt.Sprintf("soak: 200 workloads churned for %s", d))
	a := testutil.NewAgent(t, tidalBin, "", "", true)
	a.Start()
	pid := a.Cmd.Process.Pid

	look := func(start time.Time) sample {
		s := sample{At: time.Since(start).Seconds()}
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, l := range strings.Split(string(data), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					s.RSSBytes = kb << 10
				}
			}
		}
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			s.FDs = len(fds)
		}
		if m, err := a.Scrape(); err == nil {
			for _, l := range strings.Split(m, "\n") {
				if strings.HasPrefix(l, "go_goroutines ") {
					s.Goroutines, _ = strconv.Atoi(strings.Fields(l)[1])
				}
			}
		}
		_ = filepath.WalkDir(a.Layout.Dir("cpu", a.Root), func(_ string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				s.Cgroups++
			}
			return nil
		})
		if st, err := a.Client.Status(); err == nil {
			s.Workloads = len(st.Workloads)
		}
		return s
	}
	time.Sleep(2 * time.Second)
	res := soakResult{Duration: d.String(), Workloads: 200, Baseline: look(time.Now())}

	type slot struct {
		name string
		cmd  *exec.Cmd
	}
	slots := make([]slot, 200)
	gen := 0
	admit := func(i int) {
		cmd := exec.Command("sleep", "7200")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		gen++
		tier := "shared"
		if i%2 == 1 {
			tier = "reclaimed"
		}
		name := fmt.Sprintf("w%d-%d", i, gen)
		if _, err := a.Client.Admit(agent.AdmitRequest{Name: name, Tier: tier, PID: cmd.Process.Pid}); err != nil {
			res.Refused++
			t.Logf("admit %s: %v", name, err)
		}
		slots[i] = slot{name, cmd}
	}
	drop := func(i int) {
		s := slots[i]
		if s.cmd == nil {
			return
		}
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		// Released once its cgroup is empty (the kernel may take a moment).
		for try := 0; try < 100; try++ {
			err := a.Client.Release(s.name)
			if err == nil || strings.Contains(err.Error(), "no workload named") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		slots[i] = slot{}
	}
	t.Cleanup(func() {
		for i := range slots {
			if slots[i].cmd != nil {
				_ = slots[i].cmd.Process.Kill()
				_ = slots[i].cmd.Wait()
			}
		}
	})
	for i := range slots {
		admit(i)
	}

	start := time.Now()
	every := max(d/60, 2*time.Second)
	nextSample, nextBurst := start, start.Add(5*time.Second)
	for time.Since(start) < d {
		if !a.Alive() {
			t.Fatal("agent died during the soak")
		}
		i := rand.IntN(len(slots))
		drop(i)
		admit(i)
		res.Churned++
		if time.Now().After(nextBurst) {
			// Online load on the node: a second of busy CPU outside tidal's cgroups.
			end := time.Now().Add(time.Second)
			for time.Now().Before(end) {
			}
			nextBurst = time.Now().Add(10 * time.Second)
		}
		if time.Now().After(nextSample) {
			res.Samples = append(res.Samples, look(start))
			nextSample = time.Now().Add(every)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Samples = append(res.Samples, look(start))
	for i := range slots {
		drop(i)
	}
	time.Sleep(3 * time.Second) // a few slow passes
	res.After = look(start)

	b, f := res.Baseline, res.After
	res.Rule = "after release: cgroups == baseline, fds <= baseline+2, goroutines <= baseline+5, 0 workloads; RSS median of the churn's last quarter <= 1.2 x its second quarter's + 8 MiB"
	if f.Cgroups != b.Cgroups {
		res.Violations = append(res.Violations, fmt.Sprintf("cgroups %d, baseline %d", f.Cgroups, b.Cgroups))
	}
	if f.FDs > b.FDs+2 {
		res.Violations = append(res.Violations, fmt.Sprintf("fds %d, baseline %d", f.FDs, b.FDs))
	}
	if f.Goroutines > b.Goroutines+5 {
		res.Violations = append(res.Violations, fmt.Sprintf("goroutines %d, baseline %d", f.Goroutines, b.Goroutines))
	}
	if f.Workloads != 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("%d workloads left", f.Workloads))
	}
	if n := len(res.Samples); n >= 4 {
		q2, q4 := medianRSS(res.Samples[n/4:n/2]), medianRSS(res.Samples[3*n/4:])
		if float64(q4) > 1.2*float64(q2)+8<<20 {
			res.Violations = append(res.Violations, fmt.Sprintf("RSS grew: median %d MiB -> %d MiB", q2>>20, q4>>20))
		}
	}
	res.Pass = len(res.Violations) == 0
	for _, v := range res.Violations {
		t.Error(v)
	}
	var maxRSS int64
	maxG, maxFD := 0, 0
	for _, s := range res.Samples {
		maxRSS, maxG, maxFD = max(maxRSS, s.RSSBytes), max(maxG, s.Goroutines), max(maxFD, s.FDs)
	}
	first := res.Samples[0]
	last := res.Samples[len(res.Samples)-1]
	o.Add(t, "%s, %d churns (%d refused), %d samples", d, res.Churned, res.Refused, len(res.Samples))
	o.Add(t, "RSS start/end/max %.1f/%.1f/%.1f MiB; goroutines %d/%d/%d; fds %d/%d/%d; cgroups %d/%d during churn",
		mib(first.RSSBytes), mib(last.RSSBytes), mib(maxRSS), first.Goroutines, last.Goroutines, maxG, first.FDs, last.FDs, maxFD, first.Cgroups, last.Cgroups)
	o.Add(t, "after release: cgroups %d (baseline %d), fds %d (%d), goroutines %d (%d), workloads %d",
		f.Cgroups, b.Cgroups, f.FDs, b.FDs, f.Goroutines, b.Goroutines, f.Workloads)
	if dir := os.Getenv("TIDAL_RELIABILITY_OUT"); dir != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "soak.json"), data, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func medianRSS(ss []sample) int64 {
	v := make([]int64, len(ss))
	for i, s := range ss {
		v[i] = s.RSSBytes
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
