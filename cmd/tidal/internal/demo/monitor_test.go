package demo

import (
	"strings"
	"testing"
	"time"
)

func TestSampleLineFitsTerminal(t *testing.T) {
	s := sample{elapsed: 74 * time.Second, phase: "spike", rps: 9999, p99: 12345.6, haveOnline: true, cpuPct: 100, haveCPU: true,
		lentCores: 1.25, offline: 123456789, haveOff: true, action: "throttle " + strings.Repeat("numa 0: online spike ", 10)}
	for _, line := range []string{sampleHeader(), formatSample(s), formatSample(sample{})} {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("%d columns: %q", n, line)
		}
	}
	if got := formatSample(sample{elapsed: 3 * time.Second, phase: "low", lentCores: 0.1}); got != "  3 low      -      -    -  0.10         -  -" {
		t.Errorf("empty sample line %q", got)
	}
	if !strings.HasSuffix(formatSample(s), "...") {
		t.Errorf("long action not truncated: %q", formatSample(s))
	}
}

func TestTruncateAndWrap(t *testing.T) {
	if got := truncate("abcdef", 6); got != "abcdef" {
		t.Errorf("%q", got)
	}
	if got := truncate("abcdefg", 6); got != "abc..." {
		t.Errorf("%q", got)
	}
	text := strings.Repeat("word ", 50) + strings.Repeat("x", 30)
	for _, line := range strings.Split(wrap(text, 20), "\n") {
		if len(line) > 30 || (len(line) > 20 && strings.Contains(line, " ")) {
			t.Errorf("line %q", line)
		}
	}
	if got := wrap("a b  c", 80); got != "a b c" {
		t.Errorf("%q", got)
	}
}
