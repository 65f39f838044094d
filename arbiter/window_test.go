package arbiter

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustWindow(t *testing.T, text, zone string) Window {
	t.Helper()
	w, err := ParseWindow(text, zone)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// at is a wall-clock time in loc (unambiguous times only).
func at(loc *time.Location, y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, loc)
}

func TestWindowAcrossMidnight(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	w := mustWindow(t, "22:00-08:00", "Europe/Berlin")
	day := func(d, h, m int) time.Time { return at(berlin, 2026, time.June, d, h, m) }
	for _, tc := range []struct {
		name   string
		now    time.Time
		inside bool
		next   time.Time
	}{
		{"21:59 is before the window", day(10, 21, 59), false, day(10, 22, 0)},
		{"22:00 opens it", day(10, 22, 0), true, day(11, 8, 0)},
		{"23:59 is inside", day(10, 23, 59), true, day(11, 8, 0)},
		{"00:00 is inside (across midnight)", day(11, 0, 0), true, day(11, 8, 0)},
		{"07:59 is inside", day(11, 7, 59), true, day(11, 8, 0)},
		{"08:00 closes it", day(11, 8, 0), false, day(11, 22, 0)},
		{"noon is outside", day(11, 12, 0), false, day(11, 22, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.Contains(tc.now); got != tc.inside {
				t.Errorf("Contains(%v) = %v, want %v", tc.now, got, tc.inside)
			}
			if got := w.NextChange(tc.now); !got.Equal(tc.next) {
				t.Errorf("NextChange(%v) = %v, want %v", tc.now, got, tc.next)
			}
		})
	}
	// The same instant seen from another zone is the same answer.
	if !w.Contains(day(10, 22, 30).UTC()) {
		t.Error("a UTC time inside the Berlin window is not inside")
	}
	// Seconds count: 21:59:59 is still outside.
	if w.Contains(day(10, 21, 59).Add(59 * time.Second)) {
		t.Error("21:59:59 is inside")
	}
}

func TestWindowSameDayAndAllDay(t *testing.T) {
	w := mustWindow(t, "09:30-17:00", "UTC")
	d := func(h, m int) time.Time { return at(time.UTC, 2026, time.January, 5, h, m) }
	if w.Contains(d(9, 29)) || !w.Contains(d(9, 30)) || !w.Contains(d(16, 59)) || w.Contains(d(17, 0)) {
		t.Error("09:30-17:00 boundaries are wrong")
	}
	if got := w.NextChange(d(17, 0)); !got.Equal(d(9, 30).AddDate(0, 0, 1)) {
		t.Errorf("next opening = %v", got)
	}
	all := mustWindow(t, "00:00-24:00", "Europe/Berlin")
	for h := range 24 {
		if !all.Contains(d(h, 0)) {
			t.Errorf("all-day window does not contain %02d:00", h)
		}
	}
	if !all.NextChange(d(3, 0)).IsZero() {
		t.Error("all-day window has a next change")
	}
}

// On the spring-forward day in Berlin (2026-03-29) the clock jumps from 02:00 CET to
// 03:00 CEST: a 02:00-03:00 window does not happen at all that day.
func TestWindowSpringForwardDoesNotExist(t *testing.T) {
	w := mustWindow(t, "02:00-03:00", "Europe/Berlin")
	start := time.Date(2026, time.March, 28, 22, 0, 0, 0, time.UTC) // 23:00 CET on the 28th
	for m := 0; m < 24*60; m++ {
		if now := start.Add(time.Duration(m) * time.Minute); w.Contains(now) {
			t.Fatalf("window contains %v on the spring-forward day", now.In(w.loc))
		}
	}
	// From the night before, the next opening is the day after, at 02:00 CEST.
	berlin := mustZone(t, "Europe/Berlin")
	got := w.NextChange(at(berlin, 2026, time.March, 28, 23, 0))
	if want := at(berlin, 2026, time.March, 30, 2, 0); !got.Equal(want) {
		t.Errorf("next opening = %v, want %v", got.In(berlin), want)
	}
	// The day before and the day after, it lasts one hour as usual.
	if !w.Contains(at(berlin, 2026, time.March, 28, 2, 30)) || !w.Contains(at(berlin, 2026, time.March, 30, 2, 30)) {
		t.Error("window missing on the days around the change")
	}
}

// On the fall-back day (2026-10-25) the clock goes from 03:00 CEST back to 02:00 CET: the hour
// 02:00-03:00 happens twice and the window spans both, two hours in all.
func TestWindowFallBackSpansBothOccurrences(t *testing.T) {
	w := mustWindow(t, "02:00-03:00", "Europe/Berlin")
	utc := func(h, m int) time.Time { return time.Date(2026, time.October, 25, h, m, 0, 0, time.UTC) }
	// 02:00 CEST is 00:00 UTC; 03:00 CET is 02:00 UTC.
	for _, tc := range []struct {
		now    time.Time
		inside bool
	}{
		{utc(23, 59).AddDate(0, 0, -1), false}, // 01:59 CEST
		{utc(0, 0), true},                      // 02:00 CEST
		{utc(0, 59), true},                     // 02:59 CEST
		{utc(1, 0), true},                      // 02:00 CET, the second time
		{utc(1, 59), true},                     // 02:59 CET
		{utc(2, 0), false},                     // 03:00 CET
	} {
		if got := w.Contains(tc.now); got != tc.inside {
			t.Errorf("Contains(%v) = %v, want %v", tc.now.In(w.loc), got, tc.inside)
		}
	}
	if got := w.NextChange(utc(0, 30)); !got.Equal(utc(2, 0)) {
		t.Errorf("from 02:30 CEST the window ends at %v, want 03:00 CET (02:00 UTC)", got.UTC())
	}
	if got := w.NextChange(utc(0, 0)); got.Sub(utc(0, 0)) != 2*time.Hour {
		t.Errorf("the window lasts %v, want 2h", got.Sub(utc(0, 0)))
	}
}

// A night window across a DST change is an hour shorter (spring) or longer (autumn) in real
// time, and its end is still 08:00 on the wall clock.
func TestWindowNightAcrossDST(t *testing.T) {
	for _, tc := range []struct {
		zone      string
		eve, morn time.Time // the evening before the change and the morning after, wall clock
		hours     time.Duration
	}{
		{"Europe/Berlin", time.Date(2026, 3, 28, 22, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 8, 0, 0, 0, time.UTC), 9},
		{"Europe/Berlin", time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 8, 0, 0, 0, time.UTC), 11},
		{"America/New_York", time.Date(2026, 3, 7, 22, 0, 0, 0, time.UTC), time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC), 9},
		{"America/New_York", time.Date(2026, 10, 31, 22, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC), 11},
	} {
		t.Run(tc.zone+" "+tc.eve.Format("01-02"), func(t *testing.T) {
			loc := mustZone(t, tc.zone)
			w := mustWindow(t, "22:00-08:00", tc.zone)
			open := time.Date(tc.eve.Year(), tc.eve.Month(), tc.eve.Day(), 22, 0, 0, 0, loc)
			closeAt := time.Date(tc.morn.Year(), tc.morn.Month(), tc.morn.Day(), 8, 0, 0, 0, loc)
			if !w.Contains(open) || w.Contains(open.Add(-time.Second)) {
				t.Errorf("does not open at %v", open)
			}
			for _, now := range []time.Time{open, open.Add(time.Hour), open.Add(5 * time.Hour), closeAt.Add(-time.Minute)} {
				if got := w.NextChange(now); !got.Equal(closeAt) {
					t.Errorf("NextChange(%v) = %v, want %v", now, got.In(loc), closeAt)
				}
			}
			if got := closeAt.Sub(open); got != tc.hours*time.Hour {
				t.Errorf("the night lasts %v, want %dh", got, tc.hours)
			}
		})
	}
}

// A window that ends inside the repeated hour is left, then entered again, on fall-back day.
func TestWindowEndingInRepeatedHour(t *testing.T) {
	w := mustWindow(t, "01:00-02:30", "Europe/Berlin")
	utc := func(h, m int) time.Time { return time.Date(2026, time.October, 25, h, m, 0, 0, time.UTC) }
	// 01:00 CEST = 23:00 UTC the day before; 02:30 CEST = 00:30 UTC; 02:00 CET = 01:00 UTC;
	// 02:30 CET = 01:30 UTC.
	steps := []time.Time{utc(23, 0).AddDate(0, 0, -1), utc(0, 30), utc(1, 0), utc(1, 30)}
	now := utc(22, 0).AddDate(0, 0, -1)
	for i, want := range steps {
		got := w.NextChange(now)
		if !got.Equal(want) {
			t.Fatalf("change %d: got %v, want %v", i, got.UTC(), want)
		}
		now = got
	}
}

// NextChange agrees with Contains minute by minute around DST changes in several zones.
func TestWindowNextChangeMatchesContains(t *testing.T) {
	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"}
	days := []time.Time{
		time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC), time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 4, 4, 12, 0, 0, 0, time.UTC), // Lord Howe: half-hour change
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		start := rng.IntN(48) * 30
		end := rng.IntN(48) * 30
		if start == end {
			continue
		}
		text := clockText(start) + "-" + clockText(end)
		for _, zone := range zones {
			w := mustWindow(t, text, zone)
			for _, day := range days {
				now := day
				for range 6 {
					next := w.NextChange(now)
					if next.IsZero() || !next.After(now) || next.Sub(now) > 26*time.Hour {
						t.Fatalf("%s %s: NextChange(%v) = %v", text, zone, now, next)
					}
					inside := w.Contains(now)
					for x := now.Truncate(time.Minute).Add(time.Minute); x.Before(next); x = x.Add(time.Minute) {
						if w.Contains(x) != inside {
							t.Fatalf("%s %s: Contains changes at %v, before NextChange(%v) = %v", text, zone, x.In(w.loc), now.In(w.loc), next.In(w.loc))
						}
					}
					if w.Contains(next) == inside {
						t.Fatalf("%s %s: Contains does not change at NextChange(%v) = %v", text, zone, now.In(w.loc), next.In(w.loc))
					}
					now = next
				}
			}
		}
	}
}

func clockText(minutes int) string {
	return time.Date(2000, 1, 1, minutes/60, minutes%60, 0, 0, time.UTC).Format("15:04")
}

func TestParseWindowErrors(t *testing.T) {
	for _, tc := range []struct{ text, zone, want string }{
		{"22:00", "UTC", "is not a window"},
		{"25:00-08:00", "UTC", "start \"25:00\" is not a time of day"},
		{"22:00-08:60", "UTC", "end \"08:60\" is not a time of day"},
		{"2200-0800", "UTC", "is not HH:MM"},
		{"22:00-22:00", "UTC", "starts and ends at the same time"},
		{"24:00-08:00", "UTC", "start \"24:00\" is not a time of day"},
		{"22:00-08:00", "Local", "is not allowed"},
		{"22:00-08:00", "localtime", "is not allowed"}, // the host's zone, where zoneinfo has the link
		{"22:00-08:00", "Factory", "is not allowed"},
		{"22:00-08:00", "", "is not allowed"},
		{"22:00-08:00", "Mars/Olympus_Mons", "is not a known time zone"},
	} {
		_, err := ParseWindow(tc.text, tc.zone)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseWindow(%q, %q) = %v, want an error with %q", tc.text, tc.zone, err, tc.want)
		}
	}
}
