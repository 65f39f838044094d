package standalone

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParentOf(t *testing.T) {
	if got := parentOf("/proc", os.Getpid()); got != os.Getppid() {
		t.Errorf("parentOf(self) = %d, want %d", got, os.Getppid())
	}
	dir := t.TempDir()
	_ = os.MkdirAll(filepath.Join(dir, "42"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "42", "stat"), []byte("42 (a b) c) S 7 42 42 0"), 0o644)
	if got := parentOf(dir, 42); got != 7 {
		t.Errorf("comm with spaces and parens: parent = %d, want 7", got)
	}
}
