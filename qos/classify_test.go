package qos

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kv builds a map from key, value pairs; kv() is nil, like a pod without annotations.
func kv(pairs ...string) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// want is one expected Problem: its key and kind.
type want struct {
	key  string
	kind error
}

const (
	srcTidal    = `annotation "tidalqos.io/qos-level"`
	srcKatalyst = `annotation "katalyst.kubewharf.io/qos_level"`
	srcKoord    = `label "koordinator.sh/qosClass"`
	srcCPU      = `request "tidalqos.io/reclaimed-millicpu"`
)

func TestClassify(t *testing.T) {
	restricted := Policy{
		Restricted:          true,
		SystemNamespaces:    []string{"kube-system"},
		DedicatedNamespaces: []string{"trading", "search"},
	}

	tests := []struct {
		name      string
		m         Metadata
		p         Policy
		tier      Tier
		requested Tier // "" means same as tier
		source    string
		numa      bool
		prio      int32
		problems  []want
	}{
		// Rule 4: the default, including nil maps and no requests.
		{name: "empty metadata is shared", tier: Shared, source: "default"},
		{name: "empty maps are shared", m: Metadata{Annotations: map[string]string{}, Labels: map[string]string{}, Requests: []string{}},
			tier: Shared, source: "default"},
		{name: "ordinary requests are shared", m: Metadata{Requests: []string{"cpu", "memory", "nvidia.com/gpu"}},
			tier: Shared, source: "default"},
		{name: "unrelated annotations are shared", m: Metadata{Annotations: kv("example.com/qos-level", "dedicated")},
			tier: Shared, source: "default"},

		// Rule 1: every tidal value.
		{name: "tidal system", m: Metadata{Annotations: kv(AnnotationQoSLevel, "system")}, tier: System, source: srcTidal},
		{name: "tidal dedicated", m: Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated")}, tier: Dedicated, source: srcTidal},
		{name: "tidal shared", m: Metadata{Annotations: kv(AnnotationQoSLevel, "shared")}, tier: Shared, source: srcTidal},
		{name: "tidal reclaimed", m: Metadata{Annotations: kv(AnnotationQoSLevel, "reclaimed")}, tier: Reclaimed, source: srcTidal},

		// Rule 2: every Katalyst value.
		{name: "katalyst system_cores", m: Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "system_cores")}, tier: System, source: srcKatalyst},
		{name: "katalyst dedicated_cores", m: Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "dedicated_cores")}, tier: Dedicated, source: srcKatalyst},
		{name: "katalyst shared_cores", m: Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "shared_cores")}, tier: Shared, source: srcKatalyst},
		{name: "katalyst reclaimed_cores", m: Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "reclaimed_cores")}, tier: Reclaimed, source: srcKatalyst},

		// Rule 2: every Koordinator value.
		{name: "koordinator SYSTEM", m: Metadata{Labels: kv(LabelKoordinatorQoSClass, "SYSTEM")}, tier: System, source: srcKoord},
		{name: "koordinator LSE", m: Metadata{Labels: kv(LabelKoordinatorQoSClass, "LSE")}, tier: Dedicated, source: srcKoord},
		{name: "koordinator LSR", m: Metadata{Labels: kv(LabelKoordinatorQoSClass, "LSR")}, tier: Dedicated, source: srcKoord},
		{name: "koordinator LS", m: Metadata{Labels: kv(LabelKoordinatorQoSClass, "LS")}, tier: Shared, source: srcKoord},
		{name: "koordinator BE", m: Metadata{Labels: kv(LabelKoordinatorQoSClass, "BE")}, tier: Reclaimed, source: srcKoord},

		// Rule 3: reclaimed requests.
		{name: "reclaimed millicpu request", m: Metadata{Requests: []string{"cpu", "tidalqos.io/reclaimed-millicpu"}},
			tier: Reclaimed, source: srcCPU},
		{name: "reclaimed gpu request", m: Metadata{Requests: []string{"tidalqos.io/reclaimed-gpu"}},
			tier: Reclaimed, source: `request "tidalqos.io/reclaimed-gpu"`},
		{name: "several reclaimed requests: smallest name is the source",
			m:    Metadata{Requests: []string{"tidalqos.io/reclaimed-memory", "tidalqos.io/reclaimed-millicpu", "tidalqos.io/reclaimed-gpu"}},
			tier: Reclaimed, source: `request "tidalqos.io/reclaimed-gpu"`},
		{name: "near-miss resource names are not reclaimed",
			m:    Metadata{Requests: []string{"tidalqos.io/reclaimed", "tidalqos.io/reclaimedcpu", "example.com/tidalqos.io/reclaimed-cpu"}},
			tier: Shared, source: "default"},

		// Precedence: first match wins.
		{name: "tidal beats katalyst, koordinator and requests",
			m: Metadata{
				Annotations: kv(AnnotationQoSLevel, "shared", AnnotationKatalystQoSLevel, "dedicated_cores"),
				Labels:      kv(LabelKoordinatorQoSClass, "LSE"),
			},
			tier: Shared, source: srcTidal},
		{name: "katalyst beats koordinator",
			m:    Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "reclaimed_cores"), Labels: kv(LabelKoordinatorQoSClass, "LSE")},
			tier: Reclaimed, source: srcKatalyst},
		{name: "koordinator beats requests",
			m:    Metadata{Labels: kv(LabelKoordinatorQoSClass, "BE"), Requests: []string{"tidalqos.io/reclaimed-millicpu"}},
			tier: Reclaimed, source: srcKoord},
		{name: "declared online tier beats reclaimed requests, and says so",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated"), Requests: []string{"tidalqos.io/reclaimed-millicpu"}},
			tier: Dedicated, source: srcTidal,
			problems: []want{{"tidalqos.io/reclaimed-millicpu", ErrIgnored}}},
		{name: "declared reclaimed with reclaimed requests is consistent",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "reclaimed"), Requests: []string{"tidalqos.io/reclaimed-millicpu"}},
			tier: Reclaimed, source: srcTidal},

		// Malformed tier values: reported, skipped, the next rule decides.
		{name: "tidal unknown value falls to default",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "gold")},
			tier: Shared, source: "default", problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "tidal upper case is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "Dedicated")},
			tier: Shared, source: "default", problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "tidal surrounding space is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, " reclaimed ")},
			tier: Shared, source: "default", problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "tidal empty value is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "")},
			tier: Shared, source: "default", problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "tidal malformed falls to reclaimed request",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "batch"), Requests: []string{"tidalqos.io/reclaimed-millicpu"}},
			tier: Reclaimed, source: srcCPU, problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		// The tidal annotation is malformed but a valid alias exists: the alias wins.
		{name: "tidal malformed, valid katalyst alias wins",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "gold", AnnotationKatalystQoSLevel, "dedicated_cores")},
			tier: Dedicated, source: srcKatalyst, problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "tidal malformed, valid koordinator alias wins",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "gold"), Labels: kv(LabelKoordinatorQoSClass, "BE")},
			tier: Reclaimed, source: srcKoord, problems: []want{{AnnotationQoSLevel, ErrMalformed}}},
		{name: "katalyst malformed, koordinator wins",
			m:    Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "dedicated"), Labels: kv(LabelKoordinatorQoSClass, "LSR")},
			tier: Dedicated, source: srcKoord, problems: []want{{AnnotationKatalystQoSLevel, ErrMalformed}}},
		// Later keys are checked even when an earlier rule decided.
		{name: "valid katalyst wins, shadowed malformed koordinator still reported",
			m:    Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "dedicated_cores"), Labels: kv(LabelKoordinatorQoSClass, "0")},
			tier: Dedicated, source: srcKatalyst, problems: []want{{LabelKoordinatorQoSClass, ErrMalformed}}},
		{name: "valid tidal wins, shadowed malformed katalyst still reported",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "reclaimed", AnnotationKatalystQoSLevel, "best_effort")},
			tier: Reclaimed, source: srcTidal, problems: []want{{AnnotationKatalystQoSLevel, ErrMalformed}}},
		{name: "koordinator lower case is malformed",
			m:    Metadata{Labels: kv(LabelKoordinatorQoSClass, "be")},
			tier: Shared, source: "default", problems: []want{{LabelKoordinatorQoSClass, ErrMalformed}}},
		{name: "koordinator NONE is not an accepted alias",
			m:    Metadata{Labels: kv(LabelKoordinatorQoSClass, "NONE")},
			tier: Shared, source: "default", problems: []want{{LabelKoordinatorQoSClass, ErrMalformed}}},
		{name: "all three malformed, reported in rule order, request decides",
			m: Metadata{
				Annotations: kv(AnnotationQoSLevel, "x", AnnotationKatalystQoSLevel, "y"),
				Labels:      kv(LabelKoordinatorQoSClass, "z"),
				Requests:    []string{"tidalqos.io/reclaimed-millicpu"},
			},
			tier: Reclaimed, source: srcCPU,
			problems: []want{{AnnotationQoSLevel, ErrMalformed}, {AnnotationKatalystQoSLevel, ErrMalformed}, {LabelKoordinatorQoSClass, ErrMalformed}}},

		// Policy.
		{name: "zero policy allows system anywhere",
			m:    Metadata{Namespace: "default", Annotations: kv(AnnotationQoSLevel, "system")},
			tier: System, source: srcTidal},
		{name: "restricted: dedicated allowed in listed namespace",
			m: Metadata{Namespace: "trading", Annotations: kv(AnnotationQoSLevel, "dedicated")}, p: restricted,
			tier: Dedicated, source: srcTidal},
		{name: "restricted: dedicated downgraded elsewhere",
			m: Metadata{Namespace: "team-a", Annotations: kv(AnnotationQoSLevel, "dedicated")}, p: restricted,
			tier: Shared, requested: Dedicated, source: srcTidal, problems: []want{{AnnotationQoSLevel, ErrNotAllowed}}},
		{name: "restricted: system allowed in system namespace",
			m: Metadata{Namespace: "kube-system", Labels: kv(LabelKoordinatorQoSClass, "SYSTEM")}, p: restricted,
			tier: System, source: srcKoord},
		{name: "restricted: system needs a system namespace, a dedicated one is not enough",
			m: Metadata{Namespace: "trading", Annotations: kv(AnnotationKatalystQoSLevel, "system_cores")}, p: restricted,
			tier: Shared, requested: System, source: srcKatalyst, problems: []want{{AnnotationKatalystQoSLevel, ErrNotAllowed}}},
		{name: "restricted: dedicated needs a dedicated namespace, a system one is not enough",
			m: Metadata{Namespace: "kube-system", Labels: kv(LabelKoordinatorQoSClass, "LSE")}, p: restricted,
			tier: Shared, requested: Dedicated, source: srcKoord, problems: []want{{LabelKoordinatorQoSClass, ErrNotAllowed}}},
		{name: "restricted with empty lists downgrades every claim",
			m: Metadata{Namespace: "kube-system", Annotations: kv(AnnotationQoSLevel, "system")}, p: Policy{Restricted: true},
			tier: Shared, requested: System, source: srcTidal, problems: []want{{AnnotationQoSLevel, ErrNotAllowed}}},
		{name: "restricted: shared and reclaimed are open to everyone",
			m: Metadata{Namespace: "team-a", Annotations: kv(AnnotationQoSLevel, "reclaimed")}, p: restricted,
			tier: Reclaimed, source: srcTidal},
		{name: "restricted: standalone namespace is not special",
			m: Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated")}, p: restricted,
			tier: Shared, requested: Dedicated, source: srcTidal, problems: []want{{AnnotationQoSLevel, ErrNotAllowed}}},

		// NUMA binding.
		{name: "numa true on dedicated",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "true")},
			tier: Dedicated, source: srcTidal, numa: true},
		{name: "numa false on dedicated",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "false")},
			tier: Dedicated, source: srcTidal},
		{name: "numa True is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "True")},
			tier: Dedicated, source: srcTidal, problems: []want{{AnnotationNUMABinding, ErrMalformed}}},
		{name: "numa 1 is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "1")},
			tier: Dedicated, source: srcTidal, problems: []want{{AnnotationNUMABinding, ErrMalformed}}},
		{name: "numa empty is malformed",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "")},
			tier: Dedicated, source: srcTidal, problems: []want{{AnnotationNUMABinding, ErrMalformed}}},
		{name: "numa true on shared is ignored",
			m:    Metadata{Annotations: kv(AnnotationNUMABinding, "true")},
			tier: Shared, source: "default", problems: []want{{AnnotationNUMABinding, ErrIgnored}}},
		{name: "numa true on system is ignored",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "system", AnnotationNUMABinding, "true")},
			tier: System, source: srcTidal, problems: []want{{AnnotationNUMABinding, ErrIgnored}}},
		{name: "numa true on reclaimed is ignored",
			m:    Metadata{Labels: kv(LabelKoordinatorQoSClass, "BE"), Annotations: kv(AnnotationNUMABinding, "true")},
			tier: Reclaimed, source: srcKoord, problems: []want{{AnnotationNUMABinding, ErrIgnored}}},
		{name: "numa false on shared asks for nothing and is not reported",
			m:    Metadata{Annotations: kv(AnnotationNUMABinding, "false")},
			tier: Shared, source: "default"},
		{name: "numa malformed on shared is reported once, as malformed",
			m:    Metadata{Annotations: kv(AnnotationNUMABinding, "yes")},
			tier: Shared, source: "default", problems: []want{{AnnotationNUMABinding, ErrMalformed}}},
		{name: "numa true on a downgraded dedicated claim is ignored too",
			m:    Metadata{Namespace: "team-a", Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "true")},
			p:    restricted,
			tier: Shared, requested: Dedicated, source: srcTidal,
			problems: []want{{AnnotationQoSLevel, ErrNotAllowed}, {AnnotationNUMABinding, ErrIgnored}}},

		// Reclaim priority.
		{name: "priority defaults to pod priority",
			m:    Metadata{Priority: 1000},
			tier: Shared, source: "default", prio: 1000},
		{name: "priority annotation overrides",
			m:    Metadata{Priority: 1000, Annotations: kv(AnnotationQoSLevel, "reclaimed", AnnotationReclaimPriority, "7")},
			tier: Reclaimed, source: srcTidal, prio: 7},
		{name: "priority negative",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "reclaimed", AnnotationReclaimPriority, "-5")},
			tier: Reclaimed, source: srcTidal, prio: -5},
		{name: "priority int32 bounds",
			m:    Metadata{Annotations: kv(AnnotationQoSLevel, "reclaimed", AnnotationReclaimPriority, "-2147483648")},
			tier: Reclaimed, source: srcTidal, prio: -2147483648},
		// It orders only reclaimed work: elsewhere it is said to do nothing.
		{name: "priority on online work is ignored",
			m:    Metadata{Priority: 1000, Annotations: kv(AnnotationReclaimPriority, "7")},
			tier: Shared, source: "default", prio: 1000, problems: []want{{AnnotationReclaimPriority, ErrIgnored}}},
		{name: "priority above int32 falls back",
			m:    Metadata{Priority: 3, Annotations: kv(AnnotationReclaimPriority, "2147483648")},
			tier: Shared, source: "default", prio: 3, problems: []want{{AnnotationReclaimPriority, ErrMalformed}}},
		{name: "priority not a number falls back",
			m:    Metadata{Priority: 3, Annotations: kv(AnnotationReclaimPriority, "high")},
			tier: Shared, source: "default", prio: 3, problems: []want{{AnnotationReclaimPriority, ErrMalformed}}},
		{name: "priority with space falls back",
			m:    Metadata{Priority: 3, Annotations: kv(AnnotationReclaimPriority, " 5")},
			tier: Shared, source: "default", prio: 3, problems: []want{{AnnotationReclaimPriority, ErrMalformed}}},
		{name: "priority hex falls back",
			m:    Metadata{Priority: 3, Annotations: kv(AnnotationReclaimPriority, "0x10")},
			tier: Shared, source: "default", prio: 3, problems: []want{{AnnotationReclaimPriority, ErrMalformed}}},
		{name: "priority empty falls back",
			m:    Metadata{Priority: 3, Annotations: kv(AnnotationReclaimPriority, "")},
			tier: Shared, source: "default", prio: 3, problems: []want{{AnnotationReclaimPriority, ErrMalformed}}},

		// Keys in the wrong place.
		{name: "tidal qos-level as a label is ignored and reported",
			m:    Metadata{Labels: kv(AnnotationQoSLevel, "dedicated")},
			tier: Shared, source: "default", problems: []want{{AnnotationQoSLevel, ErrIgnored}}},
		{name: "koordinator qosClass as an annotation is ignored and reported",
			m:    Metadata{Annotations: kv(LabelKoordinatorQoSClass, "BE")},
			tier: Shared, source: "default", problems: []want{{LabelKoordinatorQoSClass, ErrIgnored}}},

		// Everything wrong at once: one problem per key, never a panic.
		{name: "every key malformed",
			m: Metadata{
				Priority: 9,
				Annotations: kv(AnnotationQoSLevel, "GOLD", AnnotationKatalystQoSLevel, "cores",
					AnnotationNUMABinding, "maybe", AnnotationReclaimPriority, "1e3"),
				Labels: kv(LabelKoordinatorQoSClass, "LSX"),
			},
			tier: Shared, source: "default", prio: 9,
			problems: []want{{AnnotationQoSLevel, ErrMalformed}, {AnnotationKatalystQoSLevel, ErrMalformed},
				{LabelKoordinatorQoSClass, ErrMalformed}, {AnnotationNUMABinding, ErrMalformed}, {AnnotationReclaimPriority, ErrMalformed}}},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Classify(tc.m, tc.p)
			requested := tc.requested
			if requested == "" {
				requested = tc.tier
			}
			if d.Tier != tc.tier || d.Requested != requested || d.Source != tc.source {
				t.Errorf("got tier %q requested %q source %s; want %q %q %s",
					d.Tier, d.Requested, d.Source, tc.tier, requested, tc.source)
			}
			if d.NUMABinding != tc.numa {
				t.Errorf("NUMABinding = %v, want %v", d.NUMABinding, tc.numa)
			}
			if d.ReclaimPriority != tc.prio {
				t.Errorf("ReclaimPriority = %d, want %d", d.ReclaimPriority, tc.prio)
			}
			checkProblems(t, d.Problems, tc.problems)
		})
	}
}

// checkProblems compares problems with wants in order, and checks that each
// message names its key and value.
func checkProblems(t *testing.T, got []error, wants []want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("got %d problems %v, want %d %v", len(got), got, len(wants), wants)
	}
	for i, err := range got {
		var p *Problem
		if !errors.As(err, &p) {
			t.Fatalf("problem %d is %T, want *Problem", i, err)
		}
		if p.Key != wants[i].key || !errors.Is(err, wants[i].kind) {
			t.Errorf("problem %d = {key %q, kind %v}, want {key %q, kind %v}: %v", i, p.Key, p.Kind, wants[i].key, wants[i].kind, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, strconv.Quote(p.Key)) {
			t.Errorf("problem %d message %q does not name key %q", i, msg, p.Key)
		}
		if p.Source != SourceRequest && !strings.Contains(msg, strconv.Quote(p.Value)) {
			t.Errorf("problem %d message %q does not name value %q", i, msg, p.Value)
		}
		if p.Source != SourceAnnotation && p.Source != SourceLabel && p.Source != SourceRequest {
			t.Errorf("problem %d has source %q", i, p.Source)
		}
	}
}

// Messages must tell a user what is allowed and, for a near miss, the fix.
func TestProblemMessages(t *testing.T) {
	tests := []struct {
		name string
		m    Metadata
		p    Policy
		want []string // substrings of the first problem's message
	}{
		{"tidal lists allowed values and suggests the fix",
			Metadata{Annotations: kv(AnnotationQoSLevel, " Dedicated")}, Policy{},
			[]string{`annotation "tidalqos.io/qos-level"=" Dedicated"`, "system, dedicated, shared, reclaimed", `did you mean "dedicated"?`}},
		{"no suggestion when nothing is close",
			Metadata{Annotations: kv(AnnotationQoSLevel, "gold")}, Policy{},
			[]string{`"gold"`, "allowed, exactly: system, dedicated, shared, reclaimed", "next rule"}},
		{"shadowed malformed value names the key that decided",
			Metadata{Annotations: kv(AnnotationQoSLevel, "shared"), Labels: kv(LabelKoordinatorQoSClass, "gold")}, Policy{},
			[]string{`label "koordinator.sh/qosClass"="gold"`, `ignored, annotation "tidalqos.io/qos-level" decides the tier`}},
		{"katalyst lists its values",
			Metadata{Annotations: kv(AnnotationKatalystQoSLevel, "Shared_Cores")}, Policy{},
			[]string{"system_cores, dedicated_cores, shared_cores, reclaimed_cores", `did you mean "shared_cores"?`}},
		{"koordinator lists its values",
			Metadata{Labels: kv(LabelKoordinatorQoSClass, "lse")}, Policy{},
			[]string{`label "koordinator.sh/qosClass"="lse"`, "SYSTEM, LSE, LSR, LS, BE", `did you mean "LSE"?`}},
		{"policy names namespace, tier and allowed namespaces",
			Metadata{Namespace: "team-a", Annotations: kv(AnnotationQoSLevel, "dedicated")},
			Policy{Restricted: true, DedicatedNamespaces: []string{"trading", "search"}},
			[]string{`namespace "team-a" may not claim tier dedicated`, `"trading", "search"`, "downgraded to shared"}},
		{"policy with no allowed namespaces says none",
			Metadata{Namespace: "team-a", Annotations: kv(AnnotationQoSLevel, "system")}, Policy{Restricted: true},
			[]string{"allowed namespaces: none"}},
		{"numa lists allowed values",
			Metadata{Annotations: kv(AnnotationNUMABinding, "yes")}, Policy{},
			[]string{`"true", "false"`}},
		{"numa ignored names the tier",
			Metadata{Annotations: kv(AnnotationNUMABinding, "true")}, Policy{},
			[]string{"only to tier dedicated", "is shared", "ignored"}},
		{"priority names range and fallback",
			Metadata{Priority: 42, Annotations: kv(AnnotationReclaimPriority, "9999999999")}, Policy{},
			[]string{"-2147483648 to 2147483647", "pod priority 42"}},
		{"request conflict names the declaration",
			Metadata{Annotations: kv(AnnotationQoSLevel, "shared"), Requests: []string{"tidalqos.io/reclaimed-memory"}}, Policy{},
			[]string{`request "tidalqos.io/reclaimed-memory"`, `annotation "tidalqos.io/qos-level"="shared"`, "runs as shared"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Classify(tc.m, tc.p)
			if len(d.Problems) == 0 {
				t.Fatal("no problems")
			}
			msg := d.Problems[0].Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestProblemLongValueIsTruncated(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes of two-byte runes
	d := Classify(Metadata{Annotations: kv(AnnotationQoSLevel, long)}, Policy{})
	if len(d.Problems) != 1 {
		t.Fatalf("problems = %v", d.Problems)
	}
	msg := d.Problems[0].Error()
	if len(msg) > 400 {
		t.Errorf("message is %d bytes, want it short: %q", len(msg), msg)
	}
	if !strings.Contains(msg, "of 400 bytes") || !strings.Contains(msg, AnnotationQoSLevel) {
		t.Errorf("message %q does not say it was truncated or lacks the key", msg)
	}
	if strings.Contains(msg, `\x`) {
		t.Errorf("message %q cut a rune in half", msg)
	}
	var p *Problem
	if errors.As(d.Problems[0], &p); p.Value != long {
		t.Error("Problem.Value must keep the full value")
	}
}

// Requests often come from a map; the decision must not depend on order.
func TestClassifyRequestOrderIsStable(t *testing.T) {
	reqs := []string{"cpu", "tidalqos.io/reclaimed-millicpu", "tidalqos.io/reclaimed-memory", "memory"}
	want := Classify(Metadata{Requests: reqs}, Policy{})
	slices.Reverse(reqs)
	if got := Classify(Metadata{Requests: reqs}, Policy{}); got.Source != want.Source {
		t.Errorf("source depends on request order: %s vs %s", got.Source, want.Source)
	}
}

func TestParseTier(t *testing.T) {
	for _, tier := range AllTiers() {
		got, err := ParseTier(string(tier))
		if err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %q, %v", tier, got, err)
		}
	}
	for _, bad := range []string{"", "gold", "Shared", "SHARED", " shared", "shared ", "system_cores", "BE"} {
		got, err := ParseTier(bad)
		if err == nil {
			t.Errorf("ParseTier(%q) = %q, want an error", bad, got)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(bad)) || !strings.Contains(err.Error(), "system, dedicated, shared, reclaimed") {
			t.Errorf("ParseTier(%q) error %q should name the value and the allowed tiers", bad, err)
		}
	}
}

func TestTierPredicates(t *testing.T) {
	tests := []struct {
		tier          Tier
		valid, online bool
	}{
		{System, true, true},
		{Dedicated, true, true},
		{Shared, true, true},
		{Reclaimed, true, false},
		{"", false, false},
		{"gold", false, false},
	}
	for _, tc := range tests {
		if tc.tier.Valid() != tc.valid || tc.tier.Online() != tc.online {
			t.Errorf("%q: Valid %v Online %v, want %v %v", tc.tier, tc.tier.Valid(), tc.tier.Online(), tc.valid, tc.online)
		}
	}
}

func TestAllTiers(t *testing.T) {
	want := []Tier{System, Dedicated, Shared, Reclaimed}
	got := AllTiers()
	if !slices.Equal(got, want) {
		t.Fatalf("AllTiers() = %v, want %v (most to least protected)", got, want)
	}
	names := make([]string, len(got))
	for i, tier := range got {
		names[i] = string(tier)
	}
	if strings.Join(names, ", ") != tierList {
		t.Errorf("tierList %q does not match AllTiers %v", tierList, got)
	}
	got[0] = "changed"
	if AllTiers()[0] != System {
		t.Error("AllTiers must return a fresh slice")
	}
}

func TestPolicyAllows(t *testing.T) {
	p := Policy{Restricted: true, SystemNamespaces: []string{"kube-system"}, DedicatedNamespaces: []string{"trading"}}
	tests := []struct {
		p    Policy
		ns   string
		tier Tier
		want bool
	}{
		{Policy{}, "any", System, true},
		{Policy{}, "any", Dedicated, true},
		{Policy{}, "any", "gold", false},
		{p, "kube-system", System, true},
		{p, "trading", System, false},
		{p, "trading", Dedicated, true},
		{p, "kube-system", Dedicated, false},
		{p, "team-a", Shared, true},
		{p, "team-a", Reclaimed, true},
		{p, "team-a", "gold", false},
	}
	for _, tc := range tests {
		if got := tc.p.Allows(tc.ns, tc.tier); got != tc.want {
			t.Errorf("%+v.Allows(%q, %q) = %v, want %v", tc.p, tc.ns, tc.tier, got, tc.want)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	p := Policy{Restricted: true, SystemNamespaces: []string{"kube-system"}, DedicatedNamespaces: []string{"trading", "search"}}
	cases := []struct {
		name string
		m    Metadata
	}{
		{"default", Metadata{Name: "web", Namespace: "team-a", Requests: []string{"cpu", "memory"}}},
		{"dedicated", Metadata{Name: "matcher", Namespace: "trading", Priority: 1000,
			Annotations: kv(AnnotationQoSLevel, "dedicated", AnnotationNUMABinding, "true"),
			Labels:      kv("app", "matcher"), Requests: []string{"cpu", "memory"}}},
		{"reclaimed", Metadata{Name: "train", Namespace: "ml", Priority: 0,
			Annotations: kv(AnnotationReclaimPriority, "10"),
			Requests:    []string{"tidalqos.io/reclaimed-millicpu", "tidalqos.io/reclaimed-memory", "tidalqos.io/reclaimed-gpu"}}},
		{"malformed", Metadata{Name: "odd", Namespace: "team-a",
			Annotations: kv(AnnotationQoSLevel, "gold", AnnotationNUMABinding, "yes"), Labels: kv(LabelKoordinatorQoSClass, "LSE")}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Classify(c.m, p)
			}
		})
	}
}

// tidalqos.io/cpu-burst-percent: a percentage 0..100 for online work ("0" asks for none);
// malformed values and any burst on reclaimed work are reported and fall back to the tier's.
func TestCPUBurstPercent(t *testing.T) {
	cases := []struct {
		tier, value string
		want        int32
		problem     error
	}{
		{"shared", "50", 50, nil},
		{"system", "100", 100, nil},
		{"dedicated", "0", NoCPUBurst, nil},
		{"shared", "101", 0, ErrMalformed},
		{"shared", "-5", 0, ErrMalformed},
		{"shared", "50%", 0, ErrMalformed},
		{"shared", " 50", 0, ErrMalformed},
		{"reclaimed", "50", 0, ErrIgnored},
		{"reclaimed", "0", 0, nil},
	}
	for _, c := range cases {
		d := Classify(Metadata{Annotations: map[string]string{AnnotationQoSLevel: c.tier, AnnotationCPUBurstPercent: c.value}}, Policy{})
		if d.CPUBurstPercent != c.want {
			t.Errorf("%s %q: burst %d, want %d", c.tier, c.value, d.CPUBurstPercent, c.want)
		}
		switch {
		case c.problem == nil && len(d.Problems) > 0:
			t.Errorf("%s %q: unexpected problems %v", c.tier, c.value, d.Problems)
		case c.problem != nil && (len(d.Problems) != 1 || !errors.Is(d.Problems[0], c.problem)):
			t.Errorf("%s %q: problems %v, want one %v", c.tier, c.value, d.Problems, c.problem)
		case c.problem != nil && !strings.Contains(d.Problems[0].Error(), AnnotationCPUBurstPercent):
			t.Errorf("%s %q: the message does not name the key: %v", c.tier, c.value, d.Problems[0])
		}
	}
}
