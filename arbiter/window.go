package arbiter

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // the arbiter reads IANA zones even on hosts without /usr/share/zoneinfo

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Window is a daily time window such as "22:00-08:00" in a time zone.
//
// It is defined on the wall clock: an instant is inside when the zone's local clock reads a
// time in [start, end). When end <= start the window crosses midnight (22:00-08:00 is
// 22:00..24:00 and 00:00..08:00). "00:00-24:00" is the whole day.
//
// DST follows from that definition. When clocks spring forward over the window (02:00-03:00
// in Europe/Berlin on the last Sunday of March) no instant is inside it that day. When they
// fall back, the repeated hour is inside twice: 02:00-03:00 then lasts two hours. A window
// crossing a change is an hour shorter or longer in real time (22:00-08:00 lasts 9 or 11 h).
type Window struct {
	start, end int // seconds since local midnight; end may be 86400 (24:00)
	loc        *time.Location
	text       string // as written, "22:00-08:00"
}

// ParseWindow parses "HH:MM-HH:MM" (end may be "24:00") in the IANA time zone zone, such as
// "Europe/Berlin" or "UTC". "Local" is refused: a policy must not depend on the arbiter host's
// zone.
func ParseWindow(text, zone string) (Window, error) {
	w, err := parseWindowText(text)
	if err != nil {
		return Window{}, err
	}
	loc, err := loadZone(zone)
	if err != nil {
		return Window{}, err
	}
	w.loc = loc
	return w, nil
}

func parseWindowText(text string) (Window, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(text), "-")
	if !ok {
		return Window{}, fmt.Errorf("%q is not a window: want \"HH:MM-HH:MM\" such as \"22:00-08:00\"", yamlconf.Clip(text))
	}
	start, err := parseClock(a, false)
	if err != nil {
		return Window{}, fmt.Errorf("%q: start %v", yamlconf.Clip(text), err)
	}
	end, err := parseClock(b, true)
	if err != nil {
		return Window{}, fmt.Errorf("%q: end %v", yamlconf.Clip(text), err)
	}
	if start == end {
		return Window{}, fmt.Errorf("%q starts and ends at the same time: want a window such as \"22:00-08:00\" (\"00:00-24:00\" for all day)", yamlconf.Clip(text))
	}
	return Window{start: start, end: end, text: strings.TrimSpace(text)}, nil
}

// parseClock parses "HH:MM" into seconds since midnight; "24:00" only when allowEnd.
func parseClock(s string, allowEnd bool) (int, error) {
	s = strings.TrimSpace(s)
	var h, m int
	if len(s) != 5 || s[2] != ':' || !digits(s[:2]) || !digits(s[3:]) {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	h = int(s[0]-'0')*10 + int(s[1]-'0')
	m = int(s[3]-'0')*10 + int(s[4]-'0')
	if allowEnd && h == 24 && m == 0 {
		return 24 * 3600, nil
	}
	if h > 23 || m > 59 {
		return 0, fmt.Errorf("%q is not a time of day: want 00:00..23:59", s)
	}
	return h*3600 + m*60, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func loadZone(zone string) (*time.Location, error) {
	switch zone {
	case "", "Local", "localtime", "posixrules", "Factory":
		// The host's own zone (Local; zoneinfo's localtime links to /etc/localtime), the zone
		// rules for POSIX TZ strings and a placeholder zone: none names a place, and a policy
		// must mean the same hours on every arbiter host.
		return nil, fmt.Errorf("%q is not allowed: want an IANA time zone such as \"Europe/Berlin\" or \"UTC\"", zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known time zone: want an IANA name such as \"Europe/Berlin\" or \"UTC\"", yamlconf.Clip(zone))
	}
	return loc, nil
}

// String returns the window as written.
func (w Window) String() string { return w.text }

// Zone returns the window's time zone name.
func (w Window) Zone() string {
	if w.loc == nil {
		return "UTC"
	}
	return w.loc.String()
}

func (w Window) allDay() bool { return w.start == 0 && w.end == 24*3600 }

// Contains reports whether t is inside the window.
func (w Window) Contains(t time.Time) bool {
	return w.containsSec(clockSeconds(t.In(w.location())))
}

func (w Window) containsSec(s int) bool {
	if w.start < w.end {
		return s >= w.start && s < w.end
	}
	return s >= w.start || s < w.end
}

func (w Window) location() *time.Location {
	if w.loc == nil {
		return time.UTC
	}
	return w.loc
}

// clockSeconds is the local wall-clock time of t in whole seconds since local midnight.
func clockSeconds(t time.Time) int {
	h, m, s := t.Clock()
	return h*3600 + m*60 + s
}

// NextChange returns the first instant after t at which Contains changes: the window's end
// when t is inside it, its next start when t is outside. An all-day window never changes: it
// returns the zero time.
//
// Within one zone period (constant UTC offset) the wall clock advances with real time, so the
// next change is where the clock reaches the boundary — unless the offset changes first; then
// the search restarts at that instant (where the clock may jump into or out of the window).
func (w Window) NextChange(t time.Time) time.Time {
	if w.allDay() {
		return time.Time{}
	}
	loc := w.location()
	inside := w.Contains(t)
	target := w.start
	if inside {
		target = w.end % (24 * 3600)
	}
	// A handful of offset changes at most can fall within two days; the bound only guards
	// against a pathological zone table.
	for range 16 {
		local := t.In(loc)
		now := time.Duration(clockSeconds(local))*time.Second + time.Duration(local.Nanosecond())
		delta := (time.Duration(target)*time.Second - now) % (24 * time.Hour)
		if delta <= 0 {
			delta += 24 * time.Hour
		}
		next := t.Add(delta)
		_, zoneEnd := local.ZoneBounds()
		if zoneEnd.IsZero() || next.Before(zoneEnd) {
			return next
		}
		// The offset changes before (or as) the clock reaches the boundary: what counts is the
		// wall clock just after the change.
		if w.Contains(zoneEnd) != inside {
			return zoneEnd
		}
		t = zoneEnd
	}
	return t.Add(24 * time.Hour)
}
