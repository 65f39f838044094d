package cgroupfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("0123456789\n", 1000) // more than one read and the first buffer
	for _, want := range []string{"", "42\n", long} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(got), err, len(want))
		}
		got, err = ReadFileInto(p, make([]byte, 3, 4))
		if err != nil || string(got) != want {
			t.Fatalf("ReadFileInto = %d bytes, %v; want %d bytes", len(got), err, len(want))
		}
	}
	_, err := ReadFile(filepath.Join(dir, "missing"))
	var pe *os.PathError
	if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &pe) {
		t.Fatalf("missing file: %v", err)
	}
	// A /proc file reports size 0 but has content.
	if got, err := ReadFile("/proc/self/stat"); err != nil || len(got) == 0 {
		t.Fatalf("/proc/self/stat: %q, %v", got, err)
	}
}
