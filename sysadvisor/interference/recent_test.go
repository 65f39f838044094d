package interference

import "testing"

func TestRecentJudgesTheMedianOfTheLastPasses(t *testing.T) {
	r := NewRecent(3)
	steps := []struct {
		name  string
		value float64
		want  float64
	}{
		{"web", 0.2, 0.2}, // one reading: itself
		{"web", 0.9, 0.9}, // two: the higher of the middle two (the stricter)
		{"web", 0.2, 0.2}, // a lone slow reading among three does not count
		{"web", 0.8, 0.8}, // two slow of the last three do (0.9, 0.2, 0.8)
		{"web", 0.3, 0.3}, // 0.2, 0.8, 0.3: the 0.9 has aged out
	}
	for i, s := range steps {
		r.Next()
		if got, _ := r.Add(s.name, s.value); got != s.want {
			t.Fatalf("pass %d: Add(%s, %v) = %v, want %v", i+1, s.name, s.value, got, s.want)
		}
	}
}

func TestRecentForgetsReadingsOlderThanItsPasses(t *testing.T) {
	r := NewRecent(3)
	r.Next()
	r.Add("db", 5)
	r.Next()
	r.Add("db", 5)
	// Two passes without a reading (the workload idled): the fives are three and four passes
	// old at the next one and no longer count.
	r.Next()
	r.Next()
	r.Next()
	if got, _ := r.Add("db", 0.1); got != 0.1 {
		t.Fatalf("after idling, Add = %v, want the new reading alone (0.1)", got)
	}
}

func TestRecentOfOnePassIsEachReadingAlone(t *testing.T) {
	for _, passes := range []int{1, 0, -2} { // below 1 counts as 1
		r := NewRecent(passes)
		for _, v := range []float64{0.1, 0.9, 0.2} {
			r.Next()
			if got, settled := r.Add("web", v); got != v || !settled {
				t.Fatalf("NewRecent(%d): Add(%v) = %v (settled %v), want it alone, judged", passes, v, got, settled)
			}
		}
	}
}

func TestRecentKeepsWorkloadsApartAndForgetsTheGone(t *testing.T) {
	r := NewRecent(3)
	r.Next()
	r.Add("web", 0.9)
	r.Add("db", 0.1)
	r.Next()
	r.Keep(map[string]bool{"db": true})
	if got, _ := r.Add("web", 0.1); got != 0.1 {
		t.Fatalf("a forgotten workload's old reading still counted: Add = %v, want 0.1", got)
	}
	if got, _ := r.Add("db", 0.3); got != 0.3 {
		t.Fatalf("db: Add = %v, want 0.3 (the higher of 0.1 and 0.3)", got)
	}
}

func TestRecentTakesOneReadingAPass(t *testing.T) {
	r := NewRecent(3)
	r.Next()
	r.Add("web", 0.9)
	// A second reading in the same pass replaces the first rather than outvoting others.
	if got, _ := r.Add("web", 0.1); got != 0.1 {
		t.Fatalf("Add again in one pass = %v, want 0.1", got)
	}
}

func TestRecentStartsAfreshAfterACutAndSettlesBeforeItIsJudged(t *testing.T) {
	r := NewRecent(3)
	for _, v := range []float64{0.9, 0.9, 0.9} {
		r.Next()
		if _, settled := r.Add("web", v); !settled {
			t.Fatalf("judged from its first reading, before any cut: settled false")
		}
	}
	r.Restart("web") // lending was cut on those readings
	steps := []struct {
		value   float64
		median  float64
		settled bool
	}{
		{0.1, 0.1, false}, // the 0.9s before the cut no longer count
		{0.2, 0.2, false},
		{0.9, 0.2, true}, // three passes since the cut: 0.1, 0.2, 0.9
	}
	for i, s := range steps {
		r.Next()
		if got, settled := r.Add("web", s.value); got != s.median || settled != s.settled {
			t.Fatalf("pass %d after the cut: Add(%v) = %v, settled %v; want %v, %v", i+1, s.value, got, settled, s.median, s.settled)
		}
	}
}

func TestRecentOfOnePassIsJudgedTheNextPassAfterACut(t *testing.T) {
	r := NewRecent(1)
	r.Next()
	r.Add("web", 0.9)
	r.Restart("web")
	r.Next()
	if got, settled := r.Add("web", 0.5); got != 0.5 || !settled {
		t.Fatalf("Add after a cut = %v, settled %v; want 0.5 judged (each reading alone, as before the median)", got, settled)
	}
}

// The meter adds a reading per online workload every pass: once a workload's readings fill
// their passes, adding one allocates nothing.
func TestRecentAddsWithoutAllocatingOnceWarm(t *testing.T) {
	r := NewRecent(4)
	for i := range 8 {
		r.Next()
		r.Add("web", float64(i))
		r.Add("db", float64(i))
	}
	allocs := testing.AllocsPerRun(100, func() {
		r.Next()
		r.Add("web", 0.5)
		r.Add("db", 0.7)
	})
	if allocs != 0 {
		t.Errorf("%v allocations a pass, want none", allocs)
	}
}
