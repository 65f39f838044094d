package qos

import (
	"errors"
	"math/big"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzClassify feeds random values for every key Classify reads. present is
// a bit set choosing which keys are set; bits 5 and 6 also put tidal's key
// in the labels and Koordinator's in the annotations.
func FuzzClassify(f *testing.F) {
	// The oracle spells out the allowed values again, independently of the
	// code under test, so a bug in a parser cannot hide itself.
	tidalValues := []string{"system", "dedicated", "shared", "reclaimed"}
	katalystValues := []string{"system_cores", "dedicated_cores", "shared_cores", "reclaimed_cores"}
	koordValues := []string{"SYSTEM", "LSE", "LSR", "LS", "BE"}
	decimal := regexp.MustCompile(`^[+-]?[0-9]+$`)
	isInt32 := func(s string) bool {
		if !decimal.MatchString(s) {
			return false
		}
		// Leading zeros are fine; more than 10 digits after them never fit.
		// (Checking the length first keeps big.Int off megabyte inputs.)
		digits := strings.TrimLeft(strings.TrimLeft(s, "+-"), "0")
		if len(digits) > 10 {
			return false
		}
		n, ok := new(big.Int).SetString(s, 10)
		return ok && n.IsInt64() && n.Int64() >= -1<<31 && n.Int64() <= 1<<31-1
	}

	f.Add(uint8(0), "", "", "", "", "", "", "", false, int32(0))
	f.Add(uint8(1), "dedicated", "", "", "true", "", "cpu", "trading", true, int32(100))
	f.Add(uint8(1|8|16), "gold", "", "", "yes", "high", "tidalqos.io/reclaimed-millicpu", "", false, int32(-1))
	f.Add(uint8(2|4), "", "dedicated_cores", "LSE", "", "", "", "team-a", true, int32(0))
	f.Add(uint8(1|2|4|8|16), " Shared", "Reclaimed_Cores", "be", "True", "2147483648", "tidalqos.io/reclaimed-", "kube-system", true, int32(5))
	f.Add(uint8(4|16), "", "", "SYSTEM", "", "-2147483648", "memory", "kube-system", true, int32(7))
	f.Add(uint8(0x7f), "system", "system_cores", "SYSTEM", "false", "+12", "tidalqos.io/reclaimed-gpu", "", true, int32(0))

	f.Fuzz(func(t *testing.T, present uint8, qos, katalyst, koord, numa, prio, request, namespace string, restricted bool, priority int32) {
		m := Metadata{
			Name:        "fuzz",
			Namespace:   namespace,
			Annotations: map[string]string{},
			Labels:      map[string]string{},
			Requests:    []string{"cpu", request},
			Priority:    priority,
		}
		if present == 0 {
			m.Annotations, m.Labels = nil, nil // also exercise nil maps
		}
		malformed := false
		set := func(bit uint8, dst map[string]string, key, value string, ok bool) {
			if present&bit != 0 {
				dst[key] = value
				malformed = malformed || !ok
			}
		}
		set(1, m.Annotations, AnnotationQoSLevel, qos, slices.Contains(tidalValues, qos))
		set(2, m.Annotations, AnnotationKatalystQoSLevel, katalyst, slices.Contains(katalystValues, katalyst))
		set(4, m.Labels, LabelKoordinatorQoSClass, koord, slices.Contains(koordValues, koord))
		set(8, m.Annotations, AnnotationNUMABinding, numa, numa == "true" || numa == "false")
		set(16, m.Annotations, AnnotationReclaimPriority, prio, isInt32(prio))
		set(32, m.Labels, AnnotationQoSLevel, qos, true)
		set(64, m.Annotations, LabelKoordinatorQoSClass, koord, true)

		// The namespace may or may not be allowed; either way the rules hold.
		p := Policy{Restricted: restricted, SystemNamespaces: []string{"kube-system"}, DedicatedNamespaces: []string{"trading"}}
		d := Classify(m, p)

		if !d.Tier.Valid() || !d.Requested.Valid() {
			t.Fatalf("invalid tier %q / requested %q", d.Tier, d.Requested)
		}
		if d.Source == "" {
			t.Fatal("empty Source")
		}
		if malformed && len(d.Problems) == 0 {
			t.Fatalf("malformed input gave no problem: %+v", m)
		}
		if d.NUMABinding && d.Tier != Dedicated {
			t.Fatalf("NUMABinding on tier %q", d.Tier)
		}
		if !p.Allows(namespace, d.Tier) {
			t.Fatalf("tier %q not allowed for namespace %q but granted", d.Tier, namespace)
		}
		if present&16 == 0 && d.ReclaimPriority != priority {
			t.Fatalf("ReclaimPriority = %d without annotation, want pod priority %d", d.ReclaimPriority, priority)
		}

		downgraded := false
		for _, err := range d.Problems {
			var pr *Problem
			if !errors.As(err, &pr) {
				t.Fatalf("problem %v is %T, want *Problem", err, err)
			}
			msg := err.Error()
			if msg == "" || pr.Reason == "" {
				t.Fatalf("empty message or reason: %#v", pr)
			}
			if pr.Key == "" || !strings.Contains(msg, strconv.Quote(pr.Key)) {
				t.Fatalf("message %q does not name key %q", msg, pr.Key)
			}
			if !knownKey(pr.Key) {
				t.Fatalf("problem about unknown key %q", pr.Key)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotAllowed) && !errors.Is(err, ErrIgnored) {
				t.Fatalf("problem %q has kind %v", msg, pr.Kind)
			}
			downgraded = downgraded || errors.Is(err, ErrNotAllowed)
		}
		if (d.Tier != d.Requested) != downgraded {
			t.Fatalf("tier %q, requested %q, but downgrade reported = %v", d.Tier, d.Requested, downgraded)
		}

		// Same input, same answer: sources that retry must agree.
		if again := Classify(m, p); !reflect.DeepEqual(again, d) {
			t.Fatalf("not deterministic:\n%+v\n%+v", d, again)
		}
	})
}

func knownKey(k string) bool {
	switch k {
	case AnnotationQoSLevel, AnnotationKatalystQoSLevel, LabelKoordinatorQoSClass, AnnotationNUMABinding, AnnotationReclaimPriority:
		return true
	}
	return strings.HasPrefix(k, ResourcePrefixReclaimed)
}
