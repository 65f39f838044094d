package translate

import (
	"math"
	"math/big"
	"testing"
)

// FuzzMilliCPU: the CPU a runtime hook reads from a CRI or NRI request (CFS quota and period,
// or shares, all set by the caller) becomes millicores that are never negative and match
// exact arithmetic, saturating instead of wrapping around.
func FuzzMilliCPU(f *testing.F) {
	f.Add(int64(150000), int64(100000), int64(0))
	f.Add(int64(0), int64(0), int64(1024))
	f.Add(int64(-1), int64(100000), int64(2))
	f.Add(int64(math.MaxInt64), int64(1), int64(0))
	f.Add(int64(0), int64(0), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, quota, period, shares int64) {
		got := MilliCPU(quota, period, shares)
		var want *big.Int
		switch {
		case quota > 0 && period > 0:
			want = new(big.Int).Quo(new(big.Int).Mul(big.NewInt(quota), big.NewInt(1000)), big.NewInt(period))
		case shares > 2:
			want = new(big.Int).Quo(new(big.Int).Mul(big.NewInt(shares), big.NewInt(1000)), big.NewInt(1024))
		default:
			want = new(big.Int)
		}
		if !want.IsInt64() {
			want = big.NewInt(math.MaxInt64)
		}
		if got != want.Int64() {
			t.Fatalf("MilliCPU(%d, %d, %d) = %d, want %d", quota, period, shares, got, want)
		}
	})
}
