package yamlconf

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Size multiples.
const (
	Ki int64 = 1 << 10
	Mi int64 = 1 << 20
	Gi int64 = 1 << 30
	Ti int64 = 1 << 40
)

// SizeSuffixes names the suffixes ParseSize accepts, for messages that say what a size may be.
const SizeSuffixes = "suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000)"

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// two-letter suffixes first, so that "Mi" is not read as "M"
	{"Ki", Ki}, {"Mi", Mi}, {"Gi", Gi}, {"Ti", Ti},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

// ParseSize parses a size in bytes: an integer ("1048576"), or a number with
// a suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000),
// such as "512Mi" or "1.5G". The result must be a whole, non-negative number
// of bytes that fits in an int64.
func ParseSize(s string) (int64, error) {
	n, reason := ParseSizeReason(s)
	if reason != "" {
		return 0, fmt.Errorf("invalid size %q: %s: want bytes as an integer, or a number with a %s, such as \"512Mi\"", s, reason, SizeSuffixes)
	}
	return n, nil
}

// ParseSizeReason is ParseSize with the reason for a failure ("negative", "unknown suffix
// \"GB\"") instead of an error, for callers that word the message themselves.
func ParseSizeReason(s string) (int64, string) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, "empty"
	}
	num, mult := t, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			num, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	if strings.HasPrefix(num, "-") {
		return 0, "negative"
	}
	digits, dot := 0, false
	for i := 0; i < len(num); i++ {
		switch ch := num[i]; {
		case ch >= '0' && ch <= '9':
			digits++
		case ch == '.' && !dot && digits > 0 && i+1 < len(num):
			dot = true
		default:
			if digits > 0 && (ch < '0' || ch > '9') && ch != '.' {
				return 0, fmt.Sprintf("unknown suffix %q", Clip(t[i:]))
			}
			return 0, "not a number"
		}
	}
	if digits == 0 {
		return 0, "not a number"
	}
	if len(num) > 40 {
		return 0, "too large"
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, "not a number"
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, "not a whole number of bytes"
	}
	if !r.Num().IsInt64() {
		return 0, "too large"
	}
	return r.Num().Int64(), ""
}

// FormatSize writes n bytes the shortest exact way ParseSize reads back:
// "1Gi", "1500K", "1000001".
func FormatSize(n int64) string {
	if n <= 0 {
		return strconv.FormatInt(n, 10)
	}
	for _, group := range [][]int{{3, 2, 1, 0}, {7, 6, 5, 4}} {
		for _, i := range group {
			if u := sizeUnits[i]; n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}
