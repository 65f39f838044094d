package yamlconf

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string // substring of the error; "" for success
	}{
		{"0", 0, ""},
		{"1", 1, ""},
		{"1048576", 1 << 20, ""},
		{"1Ki", 1024, ""},
		{"512Mi", 512 << 20, ""},
		{"1Gi", 1 << 30, ""},
		{"2Ti", 2 << 40, ""},
		{"1K", 1000, ""},
		{"5M", 5_000_000, ""},
		{"3G", 3_000_000_000, ""},
		{"1T", 1_000_000_000_000, ""},
		{"1.5Gi", 3 << 29, ""},
		{"1.5G", 1_500_000_000, ""},
		{"0.5Ki", 512, ""},
		{" 64Mi ", 64 << 20, ""},
		{"8388607Ti", 8388607 << 40, ""},
		{"9223372036854775807", 1<<63 - 1, ""},
		{"", 0, "empty"},
		{"Mi", 0, "not a number"},
		{"-1", 0, "negative"},
		{"-1Gi", 0, "negative"},
		{"1GB", 0, `unknown suffix "GB"`},
		{"512MiB", 0, `unknown suffix "MiB"`},
		{"1 Gi", 0, `unknown suffix " Gi"`},
		{"1k", 0, `unknown suffix "k"`},
		{"1e9", 0, `unknown suffix "e9"`},
		{"0x10", 0, `unknown suffix "x10"`},
		{"1.5", 0, "not a whole number of bytes"},
		{"0.1K", 100, ""},
		{"0.0001K", 0, "not a whole number of bytes"},
		{"1.", 0, "not a number"},
		{".5Ki", 0, "not a number"},
		{"1.2.3", 0, "not a number"},
		{"8388608Ti", 0, "too large"},
		{"9223372036854775808", 0, "too large"},
		{"99999999999999999999999999999999999999999999999", 0, "too large"},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.err)
		}
	}
	_, err := ParseSize("12X")
	if want := `invalid size "12X": unknown suffix "X": want bytes as an integer, or a number with a suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000), such as "512Mi"`; err == nil || err.Error() != want {
		t.Errorf("ParseSize(12X) error = %v\nwant %s", err, want)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 1: "1", 1023: "1023", 1024: "1Ki", 1536: "1536", 1 << 30: "1Gi", 3 << 40: "3Ti",
		1000: "1K", 1_500_000_000: "1500M", 1024000: "1000Ki", -5: "-5", 1<<63 - 1: "9223372036854775807",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if n >= 0 {
			if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
			}
		}
	}
}
