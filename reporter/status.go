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
}

// Lease is the node's lease from the arbiter.
type Lease struct {
	Arbiter    string    `json:"arbiter"`
	Generation uint64    `json:"generation"`
	Received   time.Time `json:"received"`
	// Expires is on the agent's clock; after it the node lends nothing.
	Expires   time.Time `json:"expires"`
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
	// LentMilliCPU is the CPU lent on this node (the reclaimed pool's quota share).
	LentMilliCPU int64 `json:"lentMilliCPU"`
	// OnlineMilliCPU is online work's latest usage of the shared pool.
	OnlineMilliCPU int64 `json:"onlineMilliCPU"`
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
	Name            string    `json:"name"`
	Tier            string    `json:"tier"`
	Cgroup          string    `json:"cgroup"`
	PIDs            []int     `json:"pids"`
	CPUs            string    `json:"cpus,omitempty"` // dedicated cores
	ReclaimPriority int32     `json:"reclaimPriority"`
	MilliCPU        int64     `json:"cpuUsageMilliCPU"`
	MemoryBytes     int64     `json:"memoryUsageBytes"`
	Started         time.Time `json:"started"`
	State           string    `json:"state"` // running, evicting
	Queue           string    `json:"queue,omitempty"`
	// GPUs are the device UUIDs the workload may see; Env what its command must get
	// (NVIDIA_VISIBLE_DEVICES) so it sees no others.
	GPUs []string          `json:"gpus,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
}

// Action is a decision the agent took.
type Action struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // grow, shrink, throttle, evict, admit, release, lease
	Reason string    `json:"reason"`
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%dm\t%dm\n", p.NUMANode, dash(p.System), dash(p.Dedicated), dash(p.Shared), dash(p.Reclaimed), p.LentMilliCPU, p.OnlineMilliCPU)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "WORKLOAD\tTIER\tSTATE\tPIDS\tCPU\tMEMORY\tCGROUP")
	ws := append([]Workload(nil), s.Workloads...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].Tier+ws[i].Name < ws[j].Tier+ws[j].Name })
	for _, wl := range ws {
		pids := make([]string, 0, len(wl.PIDs))
		for _, p := range wl.PIDs {
			pids = append(pids, fmt.Sprint(p))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dm\t%s\t%s\n", wl.Name, wl.Tier, wl.State, dash(strings.Join(pids, ",")), wl.MilliCPU, human(wl.MemoryBytes), wl.Cgroup)
	}
	if len(s.GPUs) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GPU\tNUMA\tLENDABLE\tLENT TO\tWHY")
		for _, g := range s.GPUs {
			fmt.Fprintf(tw, "%d %s\t%d\t%v\t%s\t%s\n", g.Index, g.UUID, g.NUMANode, g.Lendable, dash(g.AssignedTo), g.Reason)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "TIME\tACTION\tREASON")
	for _, a := range s.Actions {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", a.Time.Format("15:04:05.000"), a.Kind, a.Reason)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGi", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0fMi", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%dKi", b>>10)
	}
}
