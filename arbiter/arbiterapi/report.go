package arbiterapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Report is what an agent tells the arbiter on every interval: what the node has, what online
// work uses and will need, and what the node can lend now — for the whole node and per NUMA
// node. All quantities are non-negative; CPU in millicores, memory in bytes, GPUs whole.
type Report struct {
	// Node is the node's name; the agent's credentials must be bound to it.
	Node string `json:"node"`
	// Labels are the node's labels; lending rules select nodes by them, and the owner label
	// (tidalqos.io/queue by default) says which queue owns the node.
	Labels map[string]string `json:"labels,omitempty"`
	// Time is when the agent sampled what it reports (RFC 3339).
	Time time.Time `json:"time"`
	// Capacity is the node's total capacity.
	Capacity Resources `json:"capacity"`
	// Online is what online work uses now and is predicted to need.
	Online Online `json:"online"`
	// Lendable is what the node can lend now.
	Lendable Lendable `json:"lendable"`
	// NUMA breaks the same figures down per NUMA node (optional; sums may not exceed the
	// node's figures).
	NUMA []NUMANode `json:"numa,omitempty"`
}

// Resources is an amount of CPU, memory and GPUs.
type Resources struct {
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
	GPUs        int   `json:"gpus"`
}

// IsZero reports whether r has none of anything.
func (r Resources) IsZero() bool { return r == Resources{} }

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.MemoryBytes + o.MemoryBytes, r.GPUs + o.GPUs}
}

// Sub returns r - o, each resource floored at zero.
func (r Resources) Sub(o Resources) Resources {
	return Resources{max(r.MilliCPU-o.MilliCPU, 0), max(r.MemoryBytes-o.MemoryBytes, 0), max(r.GPUs-o.GPUs, 0)}
}

// Usage is an amount of CPU and memory.
type Usage struct {
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// Online is online work's use of a node (or a NUMA node).
type Online struct {
	// Used is what online work uses now.
	Used Usage `json:"used"`
	// Predicted is what online work is predicted to need (peak plus margin).
	Predicted Usage `json:"predicted"`
	// Utilization is online work's CPU utilization of its pool, 0..1. Lending rules apply only
	// while it is under their threshold.
	Utilization float64 `json:"utilization"`
}

// Lendable is what a node (or a NUMA node) can lend now.
type Lendable struct {
	MilliCPU    int64 `json:"milliCPU"`
	MemoryBytes int64 `json:"memoryBytes"`
	// GPUs is the number of lendable GPUs; GPUUUIDs names them (len(GPUUUIDs) == GPUs).
	GPUs     int      `json:"gpus"`
	GPUUUIDs []string `json:"gpuUUIDs"`
}

// Resources returns the lendable amounts (GPUs as a count).
func (l Lendable) Resources() Resources {
	return Resources{MilliCPU: l.MilliCPU, MemoryBytes: l.MemoryBytes, GPUs: l.GPUs}
}

// NUMANode is one NUMA node's share of a report.
type NUMANode struct {
	ID       int       `json:"id"`
	Capacity Resources `json:"capacity"`
	Online   Online    `json:"online"`
	Lendable Lendable  `json:"lendable"`
}

// Limits on reported values. They keep arithmetic far from overflow (amount x weight) and
// reject nonsense early.
const (
	MaxMilliCPU    = 1 << 24 // about 16,000 cores
	MaxMemoryBytes = 1 << 50 // 1 PiB
	MaxGPUs        = 1024
	MaxNUMANodes   = 1024
	MaxLabels      = 256
	maxUUIDLen     = 128
)

// checker collects field errors.
type checker struct {
	errs    FieldErrors
	dropped int // errors past maxFieldErrors
}

// maxFieldErrors bounds what one report's answer lists: a report of a megabyte could hold a
// quarter of a million bad entries.
const maxFieldErrors = 100

func (c *checker) addf(field, format string, args ...any) {
	if len(c.errs) >= maxFieldErrors {
		c.dropped++
		return
	}
	c.errs = append(c.errs, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// result is the errors found, with a last one saying how many were left out.
func (c *checker) result() FieldErrors {
	if c.dropped > 0 {
		return append(c.errs, FieldError{Msg: fmt.Sprintf("and %d more errors", c.dropped)})
	}
	return c.errs
}

// amount checks 0 <= v <= hi.
func (c *checker) amount(field string, v, hi int64) {
	switch {
	case v < 0:
		c.addf(field, "%d is negative: want 0..%d", v, hi)
	case v > hi:
		c.addf(field, "%d is too large: want 0..%d", v, hi)
	}
}

// Validate checks every field of r: names and labels are well formed, amounts are in range,
// lendable amounts fit in the capacity, GPU UUIDs are unique and counted, NUMA figures sum to
// no more than the node's, and r.Time is within maxSkew of now (maxSkew <= 0: not checked).
// It returns nil or FieldErrors.
func (r *Report) Validate(now time.Time, maxSkew time.Duration) error {
	var c checker
	if msg := CheckNodeName(r.Node); msg != "" {
		c.addf("node", "%s", msg)
	}
	if len(r.Labels) > MaxLabels {
		c.addf("labels", "%d labels: want at most %d", len(r.Labels), MaxLabels)
	} else {
		// In name order, before the cap: the same report always gets the same answer.
		keys := slices.Sorted(maps.Keys(r.Labels))
		for _, k := range keys {
			if msg := CheckLabel(k, r.Labels[k]); msg != "" {
				c.addf("labels."+k, "%s", msg)
			}
		}
	}
	switch {
	case r.Time.IsZero():
		c.addf("time", "missing: want an RFC 3339 time")
	case maxSkew > 0 && r.Time.Sub(now) > maxSkew:
		c.addf("time", "%s is %v ahead of the arbiter's clock: want at most %v of skew (check NTP)", r.Time.Format(time.RFC3339), r.Time.Sub(now).Round(time.Second), maxSkew)
	case maxSkew > 0 && now.Sub(r.Time) > maxSkew:
		c.addf("time", "%s is %v behind the arbiter's clock: want at most %v of skew (check NTP, or a stale report)", r.Time.Format(time.RFC3339), now.Sub(r.Time).Round(time.Second), maxSkew)
	}
	checkFigures(&c, "", r.Capacity, r.Online, r.Lendable)
	if len(r.NUMA) > MaxNUMANodes {
		c.addf("numa", "%d entries: want at most %d", len(r.NUMA), MaxNUMANodes)
		return c.result()
	}
	nodeGPUs := make(map[string]bool, len(r.Lendable.GPUUUIDs))
	for _, u := range r.Lendable.GPUUUIDs {
		nodeGPUs[u] = true
	}
	ids := map[int]int{}
	gpuNUMA := map[string]int{}
	var capSum, lendSum Resources
	for i, n := range r.NUMA {
		p := fmt.Sprintf("numa[%d]", i)
		if n.ID < 0 || n.ID >= MaxNUMANodes {
			c.addf(p+".id", "%d is out of range: want 0..%d", n.ID, MaxNUMANodes-1)
		} else if first, dup := ids[n.ID]; dup {
			c.addf(p+".id", "%d repeats numa[%d].id: want each NUMA node once", n.ID, first)
		} else {
			ids[n.ID] = i
		}
		checkFigures(&c, p+".", n.Capacity, n.Online, n.Lendable)
		for j, u := range n.Lendable.GPUUUIDs {
			f := fmt.Sprintf("%s.lendable.gpuUUIDs[%d]", p, j)
			if !nodeGPUs[u] {
				c.addf(f, "%q is not in lendable.gpuUUIDs: want a subset of the node's lendable GPUs", yamlconf.Clip(u))
			} else if other, dup := gpuNUMA[u]; dup && other != i {
				c.addf(f, "%q is also on numa[%d]: want each GPU on one NUMA node", yamlconf.Clip(u), other)
			}
			gpuNUMA[u] = i
		}
		capSum = capSum.Add(n.Capacity)
		lendSum = lendSum.Add(n.Lendable.Resources())
	}
	if len(r.NUMA) > 0 && len(c.errs) == 0 {
		sumAtMost(&c, "numa[*].capacity", capSum, r.Capacity, "capacity")
		sumAtMost(&c, "numa[*].lendable", lendSum, r.Lendable.Resources(), "lendable")
	}
	if len(c.errs) > 0 {
		return c.result()
	}
	return nil
}

// checkFigures checks one set of capacity, online and lendable figures (the node's or a NUMA
// node's); p is the field prefix ("" or "numa[0].").
func checkFigures(c *checker, p string, capacity Resources, online Online, lend Lendable) {
	c.amount(p+"capacity.milliCPU", capacity.MilliCPU, MaxMilliCPU)
	c.amount(p+"capacity.memoryBytes", capacity.MemoryBytes, MaxMemoryBytes)
	c.amount(p+"capacity.gpus", int64(capacity.GPUs), MaxGPUs)
	c.amount(p+"online.used.milliCPU", online.Used.MilliCPU, MaxMilliCPU)
	c.amount(p+"online.used.memoryBytes", online.Used.MemoryBytes, MaxMemoryBytes)
	c.amount(p+"online.predicted.milliCPU", online.Predicted.MilliCPU, MaxMilliCPU)
	c.amount(p+"online.predicted.memoryBytes", online.Predicted.MemoryBytes, MaxMemoryBytes)
	if u := online.Utilization; !(u >= 0 && u <= 1) {
		c.addf(p+"online.utilization", "%v is out of range: want 0..1", u)
	}
	c.amount(p+"lendable.milliCPU", lend.MilliCPU, MaxMilliCPU)
	c.amount(p+"lendable.memoryBytes", lend.MemoryBytes, MaxMemoryBytes)
	c.amount(p+"lendable.gpus", int64(lend.GPUs), MaxGPUs)
	if lend.MilliCPU > capacity.MilliCPU && lend.MilliCPU <= MaxMilliCPU {
		c.addf(p+"lendable.milliCPU", "%d is more than %scapacity.milliCPU (%d)", lend.MilliCPU, p, capacity.MilliCPU)
	}
	if lend.MemoryBytes > capacity.MemoryBytes && lend.MemoryBytes <= MaxMemoryBytes {
		c.addf(p+"lendable.memoryBytes", "%d is more than %scapacity.memoryBytes (%d)", lend.MemoryBytes, p, capacity.MemoryBytes)
	}
	if lend.GPUs > capacity.GPUs && lend.GPUs <= MaxGPUs {
		c.addf(p+"lendable.gpus", "%d is more than %scapacity.gpus (%d)", lend.GPUs, p, capacity.GPUs)
	}
	if len(lend.GPUUUIDs) != lend.GPUs {
		c.addf(p+"lendable.gpuUUIDs", "%d UUIDs for lendable.gpus %d: want one UUID per lendable GPU", len(lend.GPUUUIDs), lend.GPUs)
	}
	if len(lend.GPUUUIDs) > MaxGPUs {
		return
	}
	seen := make(map[string]int, len(lend.GPUUUIDs))
	for i, u := range lend.GPUUUIDs {
		f := fmt.Sprintf("%slendable.gpuUUIDs[%d]", p, i)
		if msg := checkUUID(u); msg != "" {
			c.addf(f, "%s", msg)
		} else if first, dup := seen[u]; dup {
			c.addf(f, "%q repeats gpuUUIDs[%d]: want each GPU once", u, first)
		} else {
			seen[u] = i
		}
	}
}

func sumAtMost(c *checker, field string, sum, limit Resources, limitName string) {
	if sum.MilliCPU > limit.MilliCPU {
		c.addf(field, "milliCPU sums to %d, more than %s.milliCPU (%d)", sum.MilliCPU, limitName, limit.MilliCPU)
	}
	if sum.MemoryBytes > limit.MemoryBytes {
		c.addf(field, "memoryBytes sums to %d, more than %s.memoryBytes (%d)", sum.MemoryBytes, limitName, limit.MemoryBytes)
	}
	if sum.GPUs > limit.GPUs {
		c.addf(field, "gpus sums to %d, more than %s.gpus (%d)", sum.GPUs, limitName, limit.GPUs)
	}
}

// checkUUID accepts a GPU UUID: 1..128 printable ASCII characters without spaces.
func checkUUID(u string) string {
	if u == "" || len(u) > maxUUIDLen {
		return fmt.Sprintf("%d characters: want a GPU UUID of 1..%d characters", len(u), maxUUIDLen)
	}
	for i := 0; i < len(u); i++ {
		if u[i] <= ' ' || u[i] > '~' {
			return fmt.Sprintf("%q has a character at %d that is not printable ASCII: want a GPU UUID such as \"GPU-5c1a...\"", yamlconf.Clip(u), i)
		}
	}
	return ""
}

// CheckNodeName accepts a Kubernetes node name: a DNS subdomain (lowercase letters, digits,
// '-' and '.', starting and ending with a letter or digit, at most 253 characters). It returns
// "" or what is wrong.
func CheckNodeName(s string) string {
	if s == "" {
		return "missing: want the node's name"
	}
	if len(s) > 253 || !IsDNSSubdomain(s) {
		return fmt.Sprintf("%q is not a valid node name: want a DNS subdomain (lowercase letters, digits, '-' and '.'; at most 253 characters)", yamlconf.Clip(s))
	}
	return ""
}

// IsDNSSubdomain reports whether s is dot-separated DNS labels (lowercase letters, digits and
// '-' inside, each 1..63 characters); callers check the total length.
func IsDNSSubdomain(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if part == "" || len(part) > 63 {
			return false
		}
		for i := 0; i < len(part); i++ {
			ch := part[i]
			alnum := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
			if !alnum && (ch != '-' || i == 0 || i == len(part)-1) {
				return false
			}
		}
	}
	return true
}

// CheckLabel accepts a Kubernetes label: key [prefix/]name with a DNS subdomain prefix and a
// name of at most 63 characters; value empty or at most 63 characters. Names and values are
// alphanumeric with '-', '_' and '.' inside. It returns "" or what is wrong.
func CheckLabel(k, v string) string {
	name := k
	if prefix, rest, ok := strings.Cut(k, "/"); ok {
		if len(prefix) > 253 || !IsDNSSubdomain(prefix) {
			return fmt.Sprintf("key %q has an invalid prefix: want a DNS subdomain such as \"tidalqos.io\"", yamlconf.Clip(k))
		}
		name = rest
	}
	if !IsLabelValue(name) || name == "" {
		return fmt.Sprintf("key %q is not a valid label key: want [prefix/]name, name of 1..63 letters, digits, '-', '_', '.'", yamlconf.Clip(k))
	}
	if !IsLabelValue(v) {
		return fmt.Sprintf("value %q is not a valid label value: want at most 63 letters, digits, '-', '_', '.', starting and ending with a letter or digit", yamlconf.Clip(v))
	}
	return ""
}

// IsLabelValue accepts "" or 1..63 alphanumerics with '-', '_', '.' inside.
func IsLabelValue(s string) bool {
	if len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		if !alnum && ((ch != '-' && ch != '_' && ch != '.') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
