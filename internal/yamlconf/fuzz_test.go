package yamlconf

import (
	"math/big"
	"strings"
	"testing"
)

// FuzzParseSize checks ParseSize against an independent oracle (big.Rat over the same
// grammar), and that FormatSize writes every accepted size back exactly.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{
		"0", "1048576", "512Mi", "1.5G", "1.5Gi", "2Ti", "8E", "1.", ".5", "-1", "1e3", "0x10", " 64Mi ",
		"9223372036854775807", "9223372036854775808", "8Ei", "1.0000000001K", "1Kib", "Mi", "", "1,5G",
	} {
		f.Add(s)
	}
	mults := map[string]int64{"Ki": Ki, "Mi": Mi, "Gi": Gi, "Ti": Ti, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if n != 0 || !strings.HasPrefix(err.Error(), "invalid size ") {
				t.Fatalf("ParseSize(%q) = %d, %v", s, n, err)
			}
		} else if n < 0 {
			t.Fatalf("ParseSize(%q) = %d: negative", s, n)
		}
		// The oracle: digits with at most one inner dot, then one optional suffix.
		want, ok := func() (int64, bool) {
			num, mult := strings.TrimSpace(s), int64(1)
			for _, suf := range []string{"Ki", "Mi", "Gi", "Ti", "K", "M", "G", "T"} {
				if strings.HasSuffix(num, suf) {
					num, mult = strings.TrimSuffix(num, suf), mults[suf]
					break
				}
			}
			intPart, frac, dot := strings.Cut(num, ".")
			if intPart == "" || (dot && frac == "") || strings.Trim(intPart+frac, "0123456789") != "" || len(num) > 40 {
				return 0, false
			}
			r, ok := new(big.Rat).SetString(num)
			if !ok {
				return 0, false
			}
			r.Mul(r, new(big.Rat).SetInt64(mult))
			if !r.IsInt() || !r.Num().IsInt64() {
				return 0, false
			}
			return r.Num().Int64(), true
		}()
		if ok != (err == nil) || (ok && want != n) {
			t.Fatalf("ParseSize(%q) = %d, %v; the oracle says %d, %v", s, n, err, want, ok)
		}
		if err == nil {
			back, err := ParseSize(FormatSize(n))
			if err != nil || back != n {
				t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), back, err)
			}
		}
	})
}
