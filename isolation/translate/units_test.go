package translate

import (
	"testing"

	"github.com/tidalqos/tidal/plugins"
)

func TestFloorsAndUnits(t *testing.T) {
	for milli, want := range map[int64]int64{0: 0, plugins.Unlimited: -1, -5: -1, 1: MinQuotaMicros, 10: 1000, 1500: 150000} {
		if got := QuotaMicros(milli); got != want {
			t.Errorf("QuotaMicros(%d) = %d, want %d", milli, got, want)
		}
	}
	for shares, want := range map[uint64]uint64{0: 0, 1: 2, 2: 2, 1024: 1024, 1 << 20: MaxShares} {
		if got := ToCgroup(plugins.Settings{CPUShares: shares}).Shares; got != want {
			t.Errorf("shares %d written as %d, want %d", shares, got, want)
		}
	}
	// runc's conversion: the kernel's bounds map to cpu.weight's, 1024 (one CPU) to 39.
	for shares, want := range map[uint64]uint64{0: 0, 1: 1, 2: 1, 1024: 39, MaxShares: 10000} {
		if got := Weight(shares); got != want {
			t.Errorf("Weight(%d) = %d, want %d", shares, got, want)
		}
	}
	if got := ToCgroup(plugins.Settings{MemoryLimit: -7}).Memory; got != -1 {
		t.Errorf("negative memory limit written as %d, want -1", got)
	}
	for _, c := range []struct{ quota, period, shares, want int64 }{
		{150000, 100000, 0, 1500}, {0, 0, 2048, 2000}, {0, 0, 2, 0}, {-1, 100000, 0, 0},
	} {
		if got := MilliCPU(c.quota, c.period, c.shares); got != c.want {
			t.Errorf("MilliCPU(%d, %d, %d) = %d, want %d", c.quota, c.period, c.shares, got, c.want)
		}
	}
}
