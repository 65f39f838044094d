package demo

import (
	"testing"
	"time"
)

func TestParseDemoFlags(t *testing.T) {
	o, err := ParseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.duration != 75*time.Second || o.lowRPS != 150 || o.spikeRPS != 600 || o.work != 1500*time.Microsecond || o.burnerThreads != 2 || o.socket == "" {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range [][]string{{"--duration", "1s"}, {"--low-rps", "0"}, {"--spike-rps", "-5"}, {"--work", "0s"}, {"--burner-threads", "0"}, {"extra"}} {
		if _, err := ParseFlags(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
