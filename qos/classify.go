package qos

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Names of the annotations, labels and resources that Classify reads.
const (
	// AnnotationQoSLevel declares the tier: system, dedicated, shared or reclaimed.
	AnnotationQoSLevel = "tidalqos.io/qos-level"
	// AnnotationNUMABinding is "true" to bind a dedicated workload's cores
	// and memory to one NUMA node, "false" (the default) not to.
	AnnotationNUMABinding = "tidalqos.io/numa-binding"
	// AnnotationReclaimPriority orders reclaimed work for eviction (lowest
	// first); a decimal int32, default the pod's priority.
	AnnotationReclaimPriority = "tidalqos.io/reclaim-priority"
	// AnnotationCPUBurstPercent is an online workload's CPU burst, a decimal percentage
	// of its CPU limit in 0..100 (0: none); default its tier's (cpu.burstPercent).
	AnnotationCPUBurstPercent = "tidalqos.io/cpu-burst-percent"
	// AnnotationKatalystQoSLevel is Katalyst's tier annotation, accepted so
	// users can migrate: system_cores, dedicated_cores, shared_cores, reclaimed_cores.
	AnnotationKatalystQoSLevel = "katalyst.kubewharf.io/qos_level"
	// LabelKoordinatorQoSClass is Koordinator's tier label, accepted so users
	// can migrate: SYSTEM, LSE, LSR, LS, BE.
	LabelKoordinatorQoSClass = "koordinator.sh/qosClass"
	// ResourcePrefixReclaimed starts the names of the extended resources a
	// node lends to reclaimed work (tidalqos.io/reclaimed-millicpu, -memory,
	// -gpu). A workload that requests any of them is reclaimed unless it
	// declares a tier.
	ResourcePrefixReclaimed = "tidalqos.io/reclaimed-"
)

// Where a value came from, as used in [Problem].Source.
const (
	SourceAnnotation = "annotation"
	SourceLabel      = "label"
	SourceRequest    = "request"
)

// SourceDefault is [Decision].Source when no rule matched.
const SourceDefault = "default"

// Metadata is what Classify needs to know about a workload. Every source
// (pod, CRI request, `tidal run` flags) fills it in; nil maps are fine.
type Metadata struct {
	Name        string // for messages
	Namespace   string // "" in standalone mode
	Annotations map[string]string
	Labels      map[string]string
	Requests    []string // names of the resources the workload requests, e.g. "cpu", "tidalqos.io/reclaimed-millicpu"
	Priority    int32    // the pod's priority; the default reclaim priority
}

// Policy says which namespaces may claim the protected tiers (system and
// dedicated). Shared and reclaimed are open to everyone.
//
// The zero value (Restricted false) allows every claim: that is standalone
// mode, where only root can reach the agent. When Restricted, a system claim
// needs the namespace in SystemNamespaces and a dedicated claim needs it in
// DedicatedNamespaces; the lists are independent, so list a namespace in
// both to allow both.
type Policy struct {
	Restricted          bool
	SystemNamespaces    []string
	DedicatedNamespaces []string
}

// Allows reports whether a workload in namespace may run in tier t.
func (p Policy) Allows(namespace string, t Tier) bool {
	switch t {
	case Shared, Reclaimed:
		return true
	case System:
		return !p.Restricted || slices.Contains(p.SystemNamespaces, namespace)
	case Dedicated:
		return !p.Restricted || slices.Contains(p.DedicatedNamespaces, namespace)
	}
	return false // not a tier
}

// allowedNamespaces lists, for messages, the namespaces that may claim t.
func (p Policy) allowedNamespaces(t Tier) []string {
	if t == System {
		return p.SystemNamespaces
	}
	return p.DedicatedNamespaces
}

// Decision is the result of Classify.
type Decision struct {
	// Tier is the tier the workload gets. It is always one of the four.
	Tier Tier
	// Requested is what the metadata asked for, before the policy. Tier
	// differs from Requested only when the policy downgraded the claim.
	Requested Tier
	// Source says which rule produced Requested, e.g.
	// `annotation "tidalqos.io/qos-level"`, `label "koordinator.sh/qosClass"`,
	// `request "tidalqos.io/reclaimed-millicpu"` or "default".
	Source string
	// NUMABinding is true only for a dedicated workload that asked for it.
	NUMABinding bool
	// ReclaimPriority orders reclaimed work for eviction, lowest first.
	ReclaimPriority int32
	// SLO is an online workload's own latency probe, if it gave one.
	SLO SLO
	// CPUBurstPercent is the workload's own CPU burst: 0 its tier's, NoCPUBurst none,
	// 1..100 that percentage of its CPU limit.
	CPUBurstPercent int32
	// Problems are malformed values, ignored settings and policy
	// downgrades, in a stable order. Each is a *Problem.
	Problems []error
}

// NoCPUBurst is Decision.CPUBurstPercent for an annotation asking for no burst ("0").
const NoCPUBurst int32 = -1

// Kinds of Problem, for errors.Is (for example to pick a Kubernetes Event
// reason).
var (
	// ErrMalformed: a value is not one of the allowed ones; it was skipped.
	ErrMalformed = errors.New("malformed value")
	// ErrNotAllowed: the policy does not let the namespace claim the tier;
	// the workload was downgraded to shared.
	ErrNotAllowed = errors.New("tier not allowed for namespace")
	// ErrIgnored: a well-formed setting that does not apply to this
	// workload, or a key in the wrong place; it had no effect.
	ErrIgnored = errors.New("setting ignored")
)

// Problem is one thing wrong with a workload's metadata. Its message names
// the key, the value, where it came from and what is allowed, so it can be
// shown to users as is (for example as a Kubernetes Event).
type Problem struct {
	Key    string // annotation, label or resource name
	Value  string // the value found ("" for requests)
	Source string // SourceAnnotation, SourceLabel or SourceRequest
	Reason string // what is wrong and what is allowed
	// Fallback is what tidal did instead ("ignored", "using the tier's"): a source that
	// refuses the workload rather than fall back (tidal run) leaves it out.
	Fallback string
	Kind     error // ErrMalformed, ErrNotAllowed or ErrIgnored
}

// maxValueInMessage keeps messages short: annotation values can be up to
// 256 KiB and a Kubernetes Event message is cut at 1 KiB.
const maxValueInMessage = 64

func (p *Problem) Error() string {
	reason := p.Reason
	if p.Fallback != "" {
		reason += "; " + p.Fallback
	}
	if p.Source == SourceRequest {
		return fmt.Sprintf("%s %q: %s", p.Source, p.Key, reason)
	}
	v := p.Value
	if len(v) > maxValueInMessage {
		cut := maxValueInMessage
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		return fmt.Sprintf("%s %q=%q (first %d of %d bytes): %s", p.Source, p.Key, v[:cut], cut, len(v), reason)
	}
	return fmt.Sprintf("%s %q=%q: %s", p.Source, p.Key, v, reason)
}

// Unwrap returns p.Kind, so errors.Is(err, ErrMalformed) works.
func (p *Problem) Unwrap() error { return p.Kind }

// Classify decides a workload's tier and its tier settings from its
// metadata. First match wins:
//
//  1. annotation tidalqos.io/qos-level: system, dedicated, shared, reclaimed;
//  2. aliases: annotation katalyst.kubewharf.io/qos_level (system_cores,
//     dedicated_cores, shared_cores, reclaimed_cores), then label
//     koordinator.sh/qosClass (SYSTEM, LSE or LSR, LS, BE);
//  3. a request for any tidalqos.io/reclaimed-* resource: reclaimed;
//  4. otherwise shared.
//
// Values are exact (no trimming, no case folding). A malformed value is
// reported in Problems and its rule skipped, so the next rule decides; every
// tier key is checked, so a malformed one is reported even when an earlier
// rule has already decided. Then the policy may downgrade a system or
// dedicated claim to shared.
//
// Classify never panics and never returns an invalid tier.
func Classify(m Metadata, p Policy) Decision {
	var d Decision
	c := declaredTier(m, &d.Problems)
	d.Requested, d.Source = c.tier, c.source()
	d.Tier = c.tier

	if !p.Allows(m.Namespace, d.Tier) {
		d.Problems = append(d.Problems, &Problem{
			Key: c.key, Value: c.value, Source: c.kind, Kind: ErrNotAllowed,
			Reason:   fmt.Sprintf("namespace %q may not claim tier %s (allowed namespaces: %s)", m.Namespace, d.Tier, quotedList(p.allowedNamespaces(d.Tier))),
			Fallback: fmt.Sprintf("downgraded to %s", Shared),
		})
		d.Tier = Shared
	}

	d.NUMABinding = numaBinding(m.Annotations, d.Tier, &d.Problems)
	d.ReclaimPriority = reclaimPriority(m.Annotations, m.Priority, d.Tier, &d.Problems)
	d.SLO = sloOf(m.Annotations, d.Tier, &d.Problems)
	d.CPUBurstPercent = cpuBurstPercent(m.Annotations, d.Tier, &d.Problems)
	misplacedKeys(m, &d.Problems)
	return d
}

// claim is the result of the declaration rules: the tier and where it came from.
type claim struct {
	tier  Tier
	kind  string // SourceAnnotation, SourceLabel, SourceRequest or SourceDefault
	key   string
	value string
}

func (c claim) source() string {
	if c.kind == SourceDefault {
		return SourceDefault
	}
	return c.kind + " " + strconv.Quote(c.key)
}

// declaredTier applies rules 1 to 4. It checks every tier key, even after
// one has matched, so a malformed value is reported even when an earlier
// rule shadows it: a user migrating between labels learns about a typo
// before it starts to matter.
func declaredTier(m Metadata, problems *[]error) claim {
	reclaimed := reclaimedRequest(m.Requests)

	// Rules 1 and 2, in order. Each names the allowed values for messages and
	// how a near miss would be spelled correctly, to suggest a fix.
	rules := [...]struct {
		kind, key string
		values    map[string]string // m.Annotations or m.Labels
		parse     func(string) (Tier, bool)
		allowed   string
		fold      func(string) string
	}{
		{SourceAnnotation, AnnotationQoSLevel, m.Annotations, parseTidal, tierList, strings.ToLower},
		{SourceAnnotation, AnnotationKatalystQoSLevel, m.Annotations, parseKatalyst,
			"system_cores, dedicated_cores, shared_cores, reclaimed_cores", strings.ToLower},
		{SourceLabel, LabelKoordinatorQoSClass, m.Labels, parseKoordinator,
			"SYSTEM, LSE, LSR, LS, BE", strings.ToUpper},
	}
	var found claim // kind "" until a rule matches
	for _, r := range rules {
		v, ok := r.values[r.key]
		if !ok {
			continue
		}
		if t, ok := r.parse(v); ok {
			if found.kind == "" {
				found = claim{tier: t, kind: r.kind, key: r.key, value: v}
			}
			continue
		}
		reason := fmt.Sprintf("not a QoS level (allowed, exactly: %s)", r.allowed)
		if fixed := r.fold(strings.TrimSpace(v)); fixed != v {
			if _, ok := r.parse(fixed); ok {
				reason += fmt.Sprintf("; did you mean %q?", fixed)
			}
		}
		fallback := "ignored, the next rule decides the tier"
		if found.kind != "" {
			fallback = fmt.Sprintf("ignored, %s %q decides the tier", found.kind, found.key)
		}
		*problems = append(*problems, &Problem{
			Key: r.key, Value: v, Source: r.kind, Kind: ErrMalformed, Reason: reason, Fallback: fallback,
		})
	}

	if found.kind != "" {
		if found.tier.Online() && reclaimed != "" {
			// Almost surely a mistake: the scheduler placed it on lent
			// capacity, but it will run as online work.
			*problems = append(*problems, &Problem{
				Key: reclaimed, Source: SourceRequest, Kind: ErrIgnored,
				Reason: fmt.Sprintf("reclaimed resources requested, but %s %q=%q declares tier %s, which wins",
					found.kind, found.key, found.value, found.tier),
				Fallback: fmt.Sprintf("the workload runs as %s", found.tier),
			})
		}
		return found
	}

	// Rule 3.
	if reclaimed != "" {
		return claim{tier: Reclaimed, kind: SourceRequest, key: reclaimed}
	}

	// Rule 4.
	return claim{tier: Shared, kind: SourceDefault}
}

// reclaimedRequest returns the smallest requested resource name with the
// reclaimed prefix, or "". Requests may come from a map, so picking the
// smallest rather than the first keeps Source stable across calls.
func reclaimedRequest(requests []string) string {
	var found string
	for _, name := range requests {
		if strings.HasPrefix(name, ResourcePrefixReclaimed) && (found == "" || name < found) {
			found = name
		}
	}
	return found
}

func parseTidal(v string) (Tier, bool) {
	t := Tier(v)
	return t, t.Valid()
}

func parseKatalyst(v string) (Tier, bool) {
	switch v {
	case "system_cores":
		return System, true
	case "dedicated_cores":
		return Dedicated, true
	case "shared_cores":
		return Shared, true
	case "reclaimed_cores":
		return Reclaimed, true
	}
	return "", false
}

func parseKoordinator(v string) (Tier, bool) {
	switch v {
	case "SYSTEM":
		return System, true
	case "LSE", "LSR":
		return Dedicated, true
	case "LS":
		return Shared, true
	case "BE":
		return Reclaimed, true
	}
	return "", false
}

// numaBinding reads tidalqos.io/numa-binding. Only dedicated workloads own
// whole cores, so only they can be bound to a NUMA node; a "true" on any
// other tier is reported as ignored. A "false" there asks for nothing and is
// not reported, so a template may set it on every pod without noise.
func numaBinding(annotations map[string]string, tier Tier, problems *[]error) bool {
	v, ok := annotations[AnnotationNUMABinding]
	if !ok {
		return false
	}
	var want bool
	switch v {
	case "true":
		want = true
	case "false":
		want = false
	default:
		*problems = append(*problems, &Problem{
			Key: AnnotationNUMABinding, Value: v, Source: SourceAnnotation, Kind: ErrMalformed,
			Reason: `not a boolean (allowed, exactly: "true", "false")`, Fallback: `using "false"`,
		})
		return false
	}
	if want && tier != Dedicated {
		*problems = append(*problems, &Problem{
			Key: AnnotationNUMABinding, Value: v, Source: SourceAnnotation, Kind: ErrIgnored,
			Reason: fmt.Sprintf("NUMA binding applies only to tier %s, this workload is %s", Dedicated, tier), Fallback: "ignored",
		})
		return false
	}
	return want
}

// reclaimPriority reads tidalqos.io/reclaim-priority, falling back to the
// pod's priority when it is absent or malformed. It orders only reclaimed work, so on another
// tier it is reported as having no effect.
func reclaimPriority(annotations map[string]string, priority int32, tier Tier, problems *[]error) int32 {
	v, ok := annotations[AnnotationReclaimPriority]
	if !ok {
		return priority
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		*problems = append(*problems, &Problem{
			Key: AnnotationReclaimPriority, Value: v, Source: SourceAnnotation, Kind: ErrMalformed,
			Reason:   fmt.Sprintf("not a decimal integer in int32 range (%d to %d)", math.MinInt32, math.MaxInt32),
			Fallback: fmt.Sprintf("using the pod priority %d", priority),
		})
		return priority
	}
	if tier != Reclaimed {
		*problems = append(*problems, &Problem{
			Key: AnnotationReclaimPriority, Value: v, Source: SourceAnnotation, Kind: ErrIgnored,
			Reason:   fmt.Sprintf("it orders only tier %s for eviction, this workload is %s", Reclaimed, tier),
			Fallback: "ignored",
		})
		return priority
	}
	return int32(n)
}

// cpuBurstPercent reads tidalqos.io/cpu-burst-percent. The kernel takes no burst above the
// quota, so 100 is the most; reclaimed work never bursts (it would run above what is lent).
func cpuBurstPercent(annotations map[string]string, tier Tier, problems *[]error) int32 {
	v, ok := annotations[AnnotationCPUBurstPercent]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 || n > 100 {
		*problems = append(*problems, &Problem{
			Key: AnnotationCPUBurstPercent, Value: v, Source: SourceAnnotation, Kind: ErrMalformed,
			Reason:   "not a decimal integer in 0..100 (a percentage of the CPU limit; the kernel takes no burst above it)",
			Fallback: "using the tier's",
		})
		return 0
	}
	if tier == Reclaimed {
		if n > 0 {
			*problems = append(*problems, &Problem{
				Key: AnnotationCPUBurstPercent, Value: v, Source: SourceAnnotation, Kind: ErrIgnored,
				Reason: fmt.Sprintf("tier %s never bursts (it would run above the CPU lent to it)", Reclaimed), Fallback: "ignored",
			})
		}
		return 0
	}
	if n == 0 {
		return NoCPUBurst
	}
	return int32(n)
}

// misplacedKeys reports tidal's keys set as labels (and Koordinator's label
// set as an annotation): an easy mistake that would otherwise silently do
// nothing. Reported after the rules, so it never hides a decision.
func misplacedKeys(m Metadata, problems *[]error) {
	for _, key := range [...]string{AnnotationQoSLevel, AnnotationKatalystQoSLevel, AnnotationNUMABinding, AnnotationReclaimPriority,
		AnnotationCPUBurstPercent, AnnotationSLOProbe, AnnotationSLOMetric, AnnotationSLOQuantile, AnnotationSLOLatency} {
		if v, ok := m.Labels[key]; ok {
			*problems = append(*problems, &Problem{
				Key: key, Value: v, Source: SourceLabel, Kind: ErrIgnored,
				Reason: "this key is read only as an annotation", Fallback: "ignored",
			})
		}
	}
	if v, ok := m.Annotations[LabelKoordinatorQoSClass]; ok {
		*problems = append(*problems, &Problem{
			Key: LabelKoordinatorQoSClass, Value: v, Source: SourceAnnotation, Kind: ErrIgnored,
			Reason: "this key is read only as a label", Fallback: "ignored",
		})
	}
}

// quotedList formats namespaces for messages: "a", "b" or none.
func quotedList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
