// Package testutil holds what the integration suites (tests/integration, tests/kube,
// tests/cri) share: the tidal binary they run, the tools scripts build, and small helpers.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildTidal builds cmd/tidal into a temporary folder for a suite's TestMain; cleanup removes it.
// TIDAL_BIN names a binary to use instead (an A/B of two builds under the same tests).
func BuildTidal() (bin string, cleanup func(), err error) {
	if prebuilt := os.Getenv("TIDAL_BIN"); prebuilt != "" {
		if _, err := os.Stat(prebuilt); err != nil {
			return "", nil, fmt.Errorf("TIDAL_BIN: %w", err)
		}
		return prebuilt, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tidal-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "tidal")
	build := exec.Command("go", "build", "-o", bin, "github.com/tidalqos/tidal/cmd/tidal")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build tidal: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// RunSuite is a suite's TestMain: it builds the tidal binary into *bin, runs the tests and
// exits with their status.
func RunSuite(m *testing.M, bin *string) {
	path, cleanup, err := BuildTidal()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ToolsDir is where a tools script put its binaries: the folder named by env, else
// .cache/<name>/bin in the repository. It fails the test, naming the script, when one of
// the binaries is missing.
func ToolsDir(t testing.TB, env, name, script string, binaries ...string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			t.Fatalf("%v; set %s or run %s (make test does)", err, env, script)
		}
		dir = filepath.Join(root, ".cache", name, "bin")
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%s missing in %s: run %s (make test does)", b, dir, script)
		}
	}
	return dir
}

// RepoRoot walks up from the working directory (a package folder under go test) to the
// repository's root.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.HasPrefix(string(b), "module github.com/tidalqos/tidal\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod of github.com/tidalqos/tidal) not found")
		}
		dir = parent
	}
}

// StartDaemon starts a long-running process (an agent, an arbiter) with its output in log.
// When the test ends it gets SIGTERM, then SIGKILL after grace; on failure the last lines of
// its log are shown.
func StartDaemon(t testing.TB, name string, log *SyncBuffer, grace time.Duration, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, Tail(log.String(), 80))
		}
	})
	return cmd
}

// Eventually retries f every 50 ms until it returns nil, failing the test after timeout
// with f's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}

// SyncBuffer is an output buffer a test may read while a process still writes to it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is how many bytes were written.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// AppendFile appends text to the file at path, failing the test if it cannot.
func AppendFile(t testing.TB, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(text)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
