// Package reporter publishes what the agent does: the status document `tidal status` shows
// (and its stable JSON schema) and the Prometheus metrics.
package reporter

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// StatusSchemaVersion changes only when a field is removed or changes meaning; new fields may
// be added within a version.
const StatusSchemaVersion = "tidal.status/v1"

// Status is the document behind `tidal status --json`. Its schema is documented in
// docs/status.md.
type Status struct {
	Schema      string     `json:"schema"`
	Node        string     `json:"node"`
	Mode        string     `json:"mode"`
	Time        time.Time  `json:"time"`
	CgroupRoot  string     `json:"cgroupRoot"`
	CgroupVer   string     `json:"cgroupVersion"`
	CPUIdle     bool       `json:"cpuIdle"`
	MetricsOK   bool       `json:"metricsFresh"`
	Pools       []Pool     `json:"pools"`
	Lendable    Lendable   `json:"lendable"`
	Workloads   []Workload `json:"workloads"`
	GPUs        []GPU      `json:"gpus"`
	Actions     []Action   `json:"actions"`
	CgroupError string     `json:"cgroupError,omitempty"`
	// SlowPasses counts the slow loop's completed passes since start: a test (or an
	// operator) waits on it to know the agent has looked again.
	SlowPasses uint64 `json:"slowPasses"`
	// Lease is what the arbiter lets the node lend; absent without an arbiter.
	Lease *Lease `json:"lease,omitempty"`
	// Memory is the memory dimension: lent, throttle point, online demand and page cache.
	Memory *Memory `json:"memory,omitempty"`
	// IO is the disk IO dimension: what each disk lends and why (nil when IO isolation is
	// off).
	IO *IO `json:"io,omitempty"`
	// FastPath is the fast path's watch: what wakes the agent, and what came of it.
	FastPath *FastPath `json:"fastPath,omitempty"`
}

// FastPath is the fast path's watch of online work's CPU use: the limits over which it wakes
// the agent now, how often since the start online use crossed them and how often that cut
// lending (a crossing may cut nothing: the limits are rounded down, and lending may already
// be where the new demand puts it), and the latest crossing's figures.
type FastPath struct {
	// WindowLimitMilliCPU is the spike threshold of what online work kept, over the fast
	// window (loops.fastWindow); BurstLimitMilliCPU all it kept, over the burst window. 0:
	// none (nothing lent a spike could cut).
	WindowLimitMilliCPU int64     `json:"windowLimitMilliCPU"`
	BurstLimitMilliCPU  int64     `json:"burstLimitMilliCPU"`
	Crossings           uint64    `json:"crossings"`
	Cuts                uint64    `json:"cuts"`
	LastAt              time.Time `json:"lastCrossingAt,omitzero"`
	LastWindowMilliCPU  int64     `json:"lastCrossingWindowMilliCPU,omitempty"`
	LastBurstMilliCPU   int64     `json:"lastCrossingBurstMilliCPU,omitempty"`
}

// Lease is the node's lease from the arbiter.
type Lease struct {
	Arbiter    string    `json:"arbiter"`
	Generation uint64    `json:"generation"`
	Received   time.Time `json:"received,omitzero"`
	// Expires is on the agent's clock; after it the node lends nothing. Both are absent
	// before the first lease.
	Expires   time.Time `json:"expires,omitzero"`
	Active    bool      `json:"active"`
	Grants    []Grant   `json:"grants"`
	LastError string    `json:"lastError,omitempty"`
}

// Grant is capacity lent to one queue.
type Grant struct {
	Queue       string    `json:"queue"`
	Rule        string    `json:"rule,omitempty"`
	MilliCPU    int64     `json:"milliCPU"`
	MemoryBytes int64     `json:"memoryBytes"`
	GPUs        []string  `json:"gpus,omitempty"`
	Until       time.Time `json:"until"`
}

// Pool is one NUMA node's CPU pools, as Linux CPU lists ("2-3,6").
type Pool struct {
	NUMANode  int    `json:"numaNode"`
	System    string `json:"system"`
	Dedicated string `json:"dedicated"`
	Shared    string `json:"shared"`
	Reclaimed string `json:"reclaimed"`
	// Online is where online work runs: the shared CPUs, less the reclaimed ones when they
	// are Exclusive (whole cores of their own, the cores mechanism).
	Online    string `json:"online"`
	Exclusive bool   `json:"exclusive"`
	// LentMilliCPU is the CPU lent on this node (the reclaimed pool's quota share).
	LentMilliCPU int64 `json:"lentMilliCPU"`
	// OnlineMilliCPU is online work's latest usage of the shared pool.
	OnlineMilliCPU int64 `json:"onlineMilliCPU"`
	// Control says how LentMilliCPU was sized.
	Control Control `json:"control"`
}

// Control is how a NUMA node's lending is sized: the smaller of the usage ceiling (the pool
// less predicted online demand) and the interference cap (fed back from online work's
// indicators), never under the minimum, and within the lease when there is one.
type Control struct {
	// Mechanism is how reclaimed work is held to what is lent now (cpu.mechanism, or the
	// candidate cpu.mechanism auto runs); MechanismChoice says why, with the auto chooser's
	// trial or choice and each candidate's score.
	Mechanism       string `json:"mechanism"`
	MechanismChoice string `json:"mechanismChoice"`
	// Bound names the rule that sets what is lent now: "usage ceiling", "interference cap",
	// "minimum", "baseline measurement" (the minimum while online work's own indicators are
	// measured) or "lease".
	Bound string `json:"bound"`
	// UsageCeilingMilliCPU is the pool less the predicted online demand over cpu.limitWindow:
	// reclaimed work's limits never allow more. Formula shows it with its live inputs.
	UsageCeilingMilliCPU    int64  `json:"usageCeilingMilliCPU"`
	PredictedOnlineMilliCPU int64  `json:"predictedOnlineMilliCPU"`
	Formula                 string `json:"formula"`
	// PublishedCeilingMilliCPU is the same over cpu.peakWindow: the node never publishes
	// (Node resources, the arbiter) more than this.
	PublishedCeilingMilliCPU int64  `json:"publishedCeilingMilliCPU"`
	PublishedFormula         string `json:"publishedFormula"`
	// InterferenceCapMilliCPU is the most the interference feedback lets the node lend;
	// State is grow (slack on every indicator), hold (no slack, or within HeldUntil after a
	// cut) or cut (the last reading crossed a target).
	InterferenceCapMilliCPU int64     `json:"interferenceCapMilliCPU"`
	State                   string    `json:"state"`
	HeldUntil               time.Time `json:"heldUntil,omitzero"`
	// Indicators are online workloads' latest figures against their targets, worst first.
	Indicators []Indicator `json:"indicators"`
	// LastCut is the last cut with its figures.
	LastCut   string    `json:"lastCut,omitempty"`
	LastCutAt time.Time `json:"lastCutAt,omitzero"`
}

// Indicator is one interference figure of one online workload.
// Indicator names of online workloads' SLO signals, whose figures are seconds: a probe's
// answers, and a quantile of a latency histogram the workload exports.
const (
	IndicatorProbe  = "probe latency"
	IndicatorMetric = "metric latency"
)

type Indicator struct {
	Workload string  `json:"workload"`
	Tier     string  `json:"tier"`
	Name     string  `json:"name"` // run-queue wait, throttled
	Value    float64 `json:"value"`
	Target   float64 `json:"target"` // 0: not used by the feedback
	// Baseline is the workload's own figure with nothing lent, when measured. A run-queue
	// wait's target is then the larger of the tier's and a multiple of this; an SLO probe's
	// stays the operator's, and a baseline over it says lending less cannot meet it.
	Baseline float64 `json:"baseline,omitempty"`
	// BaselineBorrowed: no baseline is known yet at the load the workload runs now; Baseline
	// is the nearest load level's.
	BaselineBorrowed bool `json:"baselineBorrowed,omitempty"`
	// BaselineOverTarget (SLO probes only) is the share of the probe's answers with nothing
	// lent that were over its target, of BaselineAnswers (its latest, at most 50): a target
	// under the median is unreachable, one inside the tail is missed that often whatever is lent.
	BaselineOverTarget float64 `json:"baselineOverTarget,omitempty"`
	BaselineAnswers    int     `json:"baselineAnswers,omitempty"`
	// RunMilliCPU is the CPU the workload ran over the reading (the ratio's base).
	RunMilliCPU int64 `json:"runMilliCPU"`
}

// Lendable is what the node lends to reclaimed work now.
type Lendable struct {
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
	GPUs        int   `json:"gpus"`
}

// GPU is one device's lending state.
type GPU struct {
	UUID       string `json:"uuid"`
	Index      int    `json:"index"`
	NUMANode   int    `json:"numaNode"`
	Lendable   bool   `json:"lendable"`
	Reason     string `json:"reason"`
	AssignedTo string `json:"assignedTo,omitempty"`
}

// Workload is one managed workload.
type Workload struct {
	Name            string `json:"name"`
	Tier            string `json:"tier"`
	Cgroup          string `json:"cgroup"`
	PIDs            []int  `json:"pids"`
	CPUs            string `json:"cpus,omitempty"` // dedicated cores
	ReclaimPriority int32  `json:"reclaimPriority"`
	MilliCPU        int64  `json:"cpuUsageMilliCPU"`
	// CPULimitMilliCPU is the CFS quota tidal writes on the workload's own cgroup (0: none of
	// tidal's): its own cap, or a reclaimed pod's part of what is lent while a quota holds.
	CPULimitMilliCPU int64     `json:"cpuLimitMilliCPU,omitempty"`
	MemoryBytes      int64     `json:"memoryUsageBytes"`
	Started          time.Time `json:"started"`
	State            string    `json:"state"` // running, evicting
	Queue            string    `json:"queue,omitempty"`
	// GPUs are the device UUIDs the workload may see; Env what its command must get
	// (NVIDIA_VISIBLE_DEVICES) so it sees no others.
	GPUs []string          `json:"gpus,omitempty"`
	Env  map[string]string `json:"env,omitempty"`

	// CPU burst and starvation (issue 12).
	// CPUBurstMilliCPU is the CPU burst it has above the CPU limit tidal sets (0: none);
	// CPUBurstPercent a pod's, as a share of each of its cgroups' quota (the kubelet's).
	CPUBurstMilliCPU int64 `json:"cpuBurstMilliCPU,omitempty"`
	CPUBurstPercent  int32 `json:"cpuBurstPercentOfQuota,omitempty"`
	// CPUSatisfaction is a reclaimed workload's latest CPU satisfaction: the share of the
	// CPU time it was ready to run that it got (with eviction.starvationFloor set).
	CPUSatisfaction *float64 `json:"cpuSatisfaction,omitempty"`
}

// Action is a decision the agent took.
type Action struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // grow, shrink, throttle, evict, admit, release, lease
	// Trigger is what set it off, a short bounded label (online-spike, interference,
	// memory-short, ...): the reason label of tidal_actions_total, so a program can tell
	// decisions apart without parsing Reason.
	Trigger string `json:"trigger"`
	Reason  string `json:"reason"`
}

// WriteText renders the status for people.
func WriteText(w io.Writer, s Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node %s (%s, cgroup %s, root %q, cpu.idle %v) at %s\n", s.Node, s.Mode, s.CgroupVer, s.CgroupRoot, s.CPUIdle, s.Time.Format(time.RFC3339))
	if !s.MetricsOK {
		fmt.Fprintln(tw, "metrics: stale or not yet sampled — lending held at its minimum")
	}
	if s.CgroupError != "" {
		fmt.Fprintf(tw, "cgroup writes failing: %s\n", s.CgroupError)
	}
	fmt.Fprintf(tw, "lendable: %dm CPU, %s memory, %d GPUs\n", s.Lendable.MilliCPU, human(s.Lendable.MemoryBytes), s.Lendable.GPUs)
	writeMemoryText(tw, s.Memory)
	writeIOText(tw, s.IO)
	if l := s.Lease; l != nil {
		state := "active until " + l.Expires.Format(time.RFC3339)
		if !l.Active {
			state = "none active: lending nothing"
		}
		fmt.Fprintf(tw, "lease from %s: generation %d, %s\n", l.Arbiter, l.Generation, state)
		for _, g := range l.Grants {
			fmt.Fprintf(tw, "  queue %s: %dm CPU, %s memory, %d GPUs until %s (rule %s)\n", g.Queue, g.MilliCPU, human(g.MemoryBytes), len(g.GPUs), g.Until.Format(time.RFC3339), dash(g.Rule))
		}
		if l.LastError != "" {
			fmt.Fprintf(tw, "  last report failed: %s\n", l.LastError)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NUMA\tSYSTEM\tDEDICATED\tSHARED\tRECLAIMED\tLENT\tONLINE USE")
	for _, p := range s.Pools {
		reclaimed := dash(p.Reclaimed)
		if p.Exclusive {
			reclaimed += " (own cores; online on " + p.Online + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%dm\t%dm\n", p.NUMANode, dash(p.System), dash(p.Dedicated), dash(p.Shared), reclaimed, p.LentMilliCPU, p.OnlineMilliCPU)
	}
	for _, p := range s.Pools {
		writeControl(tw, p)
	}
	if f := s.FastPath; f != nil {
		fmt.Fprintf(tw, "\nfast path: wakes over %dm (fast window) or %dm (burst window) of online use; %d crossings, %d cut lending", f.WindowLimitMilliCPU, f.BurstLimitMilliCPU, f.Crossings, f.Cuts)
		if !f.LastAt.IsZero() {
			fmt.Fprintf(tw, "; the last at %s: %dm, burst %dm", f.LastAt.Format("15:04:05.000"), f.LastWindowMilliCPU, f.LastBurstMilliCPU)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKLOAD\tTIER\tSTATE\tPIDS\tCPU\tCPU QOS\tMEMORY\tCGROUP")
	ws := append([]Workload(nil), s.Workloads...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Tier+ws[i].Name < ws[j].Tier+ws[j].Name })
	for _, wl := range ws {
		pids := make([]string, 0, len(wl.PIDs))
		for _, p := range wl.PIDs {
			pids = append(pids, fmt.Sprint(p))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dm\t%s\t%s\t%s\n", wl.Name, wl.Tier, wl.State, dash(strings.Join(pids, ",")), wl.MilliCPU, cpuQoS(wl), human(wl.MemoryBytes), wl.Cgroup)
	}
	if len(s.GPUs) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GPU\tNUMA\tLENDABLE\tLENT TO\tWHY")
		for _, g := range s.GPUs {
			fmt.Fprintf(tw, "%d %s\t%d\t%v\t%s\t%s\n", g.Index, g.UUID, g.NUMANode, g.Lendable, dash(g.AssignedTo), g.Reason)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TIME\tACTION\tTRIGGER\tREASON")
	for _, a := range s.Actions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Time.Format("15:04:05.000"), a.Kind, a.Trigger, a.Reason)
	}
	return tw.Flush()
}

// writeControl shows how a NUMA node's lending was sized, with the live figures.
func writeControl(w io.Writer, p Pool) {
	c := p.Control
	fmt.Fprintf(w, "\nnuma %d lends %dm (mechanism %s: %s), set by the %s\n", p.NUMANode, p.LentMilliCPU, c.Mechanism, c.MechanismChoice, c.Bound)
	fmt.Fprintf(w, "  usage ceiling %dm = %s\n", c.UsageCeilingMilliCPU, c.Formula)
	fmt.Fprintf(w, "  published at most %dm = %s\n", c.PublishedCeilingMilliCPU, c.PublishedFormula)
	held := ""
	if !c.HeldUntil.IsZero() && c.HeldUntil.After(time.Now()) {
		held = ", no growth until " + c.HeldUntil.Format("15:04:05")
	}
	fmt.Fprintf(w, "  interference cap %dm (%s%s)\n", c.InterferenceCapMilliCPU, dash(c.State), held)
	for _, i := range c.Indicators {
		figure := func(v float64) string { return indicatorFigure(i.Name, v) }
		target := "not used"
		if i.Target > 0 {
			target = "target " + figure(i.Target)
		}
		switch {
		case i.Baseline > 0 && i.BaselineBorrowed:
			target += fmt.Sprintf(" (own baseline %s, at another load)", figure(i.Baseline))
		case i.Baseline > i.Target && i.Target > 0:
			target += fmt.Sprintf(" (own baseline %s: over the target with nothing lent)", figure(i.Baseline))
		case i.BaselineOverTarget > 0:
			target += fmt.Sprintf(" (own baseline %s; with nothing lent %.0f%% of %d answers over the target)",
				figure(i.Baseline), 100*i.BaselineOverTarget, i.BaselineAnswers)
		case i.Baseline > 0:
			target += fmt.Sprintf(" (own baseline %s)", figure(i.Baseline))
		}
		fmt.Fprintf(w, "  %s\t%s\t%s %s\t%s\t(ran %dm)\n", i.Workload, i.Tier, i.Name, figure(i.Value), target, i.RunMilliCPU)
	}
	if c.LastCut != "" {
		fmt.Fprintf(w, "  last cut %s: %s\n", c.LastCutAt.Format("15:04:05.000"), c.LastCut)
	}
}

// cpuQoS is a workload's CPU burst or its CPU satisfaction, for the status table.
func cpuQoS(wl Workload) string {
	switch {
	case wl.CPUBurstMilliCPU > 0:
		return fmt.Sprintf("burst %dm", wl.CPUBurstMilliCPU)
	case wl.CPUBurstPercent > 0:
		return fmt.Sprintf("burst %d%%", wl.CPUBurstPercent)
	case wl.CPUSatisfaction != nil:
		return fmt.Sprintf("satisfied %.2f", *wl.CPUSatisfaction)
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// indicatorFigure shows an indicator's figure: an SLO signal's latency (seconds in the JSON)
// as a duration, the others (ratios) as they are.
func indicatorFigure(name string, v float64) string {
	if name == IndicatorProbe || name == IndicatorMetric {
		return time.Duration(v * float64(time.Second)).Round(10 * time.Microsecond).String()
	}
	return fmt.Sprintf("%.3f", v)
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0fMi", float64(b)/(1<<20))
	case b == 0:
		return "0"
	default:
		return fmt.Sprintf("%dKi", b>>10)
	}
}
