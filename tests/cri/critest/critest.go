// Package critest runs real container runtimes for integration tests and drives them over CRI:
// Debian's containerd 1.6 and the containerd v2 that scripts/cri-tools.sh builds. Each Runtime
// is a child process of the test with its own config, root, state and sockets under a short
// temporary folder (unix socket paths are limited to about 100 characters), uses the cgroupfs
// driver and a local pause image (there is no registry here), and is stopped with everything
// it left (pods, shims, mounts, folders) when the test ends.
//
// Pods get a kubelet-style cgroup_parent under the test's own cgroup root (CgroupRoot), so
// tests can read the real cgroup files runc writes: a container lands at
// cgroup_parent/<container id> in every v1 hierarchy.
package critest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tidalqos/tidal/isolation/isolationtest"
	"github.com/tidalqos/tidal/tests/testutil"
)

const (
	// PauseImage is the sandbox image every Runtime is configured with; Start builds it from
	// ./pause and imports it, since nothing can be pulled here.
	PauseImage = "tidal.test/critest/pause:1"
	// PausePackage is the Go main package of PauseImage.
	PausePackage = "github.com/tidalqos/tidal/tests/cri/critest/pause"
	// BurnerPackage is a CPU burner main for BuildStatic and ImportImage (args: --threads N):
	// cmd/tidal's burner, which cannot be built static because of its cgo NVML binding.
	BurnerPackage = "github.com/tidalqos/tidal/tests/cri/critest/burner"

	// readyTimeout bounds the daemon's start until CRI answers (about 40 ms when idle, seconds
	// on a busy 2-CPU machine).
	readyTimeout = 60 * time.Second
	// stopTimeout is how long the daemon gets after SIGTERM before SIGKILL.
	stopTimeout = 15 * time.Second
	// callTimeout bounds one CRI call: starting a sandbox on a loaded machine takes seconds.
	callTimeout = 2 * time.Minute
	// logTailLines is how much of the daemon's log a failure shows.
	logTailLines = 60
	// maxShimSocketDir is containerd v2's limit on the shim socket_dir length.
	maxShimSocketDir = 38
)

// Runtime is one running containerd serving CRI on a unix socket. Its methods may be called
// from several goroutines.
type Runtime struct {
	// Name says which runtime this is, for messages: "containerd 1.6.20~ds1", "containerd v2.4.2".
	Name string
	// NRISocket is where containerd v2 listens for NRI v2 plugins; empty for containerd 1.6.
	NRISocket string

	dir         string // short temporary folder: config, root, state, sockets, log
	socket      string // CRI/containerd gRPC socket
	ctr         string // the ctr matching this containerd
	snapshotter string
	logPath     string
	runShims    bool   // shim sockets go to /run/containerd/s (containerd 1.6)
	bin, config string // what start ran, for Restart
	cmd         *exec.Cmd
	done        chan struct{} // closed when the daemon exited
	waitErr     error         // the daemon's exit; read after done is closed

	mu   sync.Mutex
	conn *grpc.ClientConn
}

// Signal sends the containerd daemon a signal: fault injection (SIGSTOP makes it hang
// mid-call, SIGCONT lets it go on). After SIGSTOP it returns once every thread of the daemon
// is stopped: a call made at once could otherwise still be answered by a thread the stop had
// not reached yet (seen once in make test).
func (r *Runtime) Signal(sig syscall.Signal) error {
	if err := r.cmd.Process.Signal(sig); err != nil || sig != syscall.SIGSTOP {
		return err
	}
	pid := r.cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); !allStopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd (pid %d) not stopped 5 s after SIGSTOP", pid)
		}
	}
	return nil
}

// allStopped says whether every thread of pid is stopped: state T in /proc/PID/task/*/stat.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		// "tid (comm) S ...": the state follows the last ')', as comm may hold one.
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Restart kills the daemon with SIGKILL (fault injection: every connection to it, CRI and
// NRI, is cut mid-call; its shims and containers keep running, as they do by design) and
// starts it again with the same config, folders and sockets. Clients from CRI before the
// restart are closed: call CRI again.
func (r *Runtime) Restart(t testing.TB) {
	t.Helper()
	_ = r.cmd.Process.Kill()
	<-r.done
	r.mu.Lock()
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
	r.mu.Unlock()
	r.start(t, r.bin, r.config)
}

// Socket is the unix socket containerd serves gRPC (CRI and its own API) on.
func (r *Runtime) Socket() string { return r.socket }

// Dir is the runtime's temporary folder (removed when the test ends).
func (r *Runtime) Dir() string { return r.dir }

// Snapshotter is the snapshotter the runtime and its image imports use: overlayfs, or native
// where overlay cannot be mounted.
func (r *Runtime) Snapshotter() string { return r.snapshotter }

// CRI returns CRI clients over the runtime's socket; the connection is shared and closed when
// the runtime stops.
func (r *Runtime) CRI(t testing.TB) (runtimeapi.RuntimeServiceClient, runtimeapi.ImageServiceClient) {
	t.Helper()
	conn, err := r.dial()
	if err != nil {
		t.Fatalf("critest: %s: %v", r.Name, err)
	}
	return runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
}

func (r *Runtime) dial() (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		return r.conn, nil
	}
	// NewClient connects lazily: the first call shows whether the socket answers.
	conn, err := grpc.NewClient("unix://"+r.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", r.socket, err)
	}
	r.conn = conn
	return conn, nil
}

// StartContainerd16 starts Debian's containerd 1.6 (scripts/cri-tools.sh installs it) with the
// CRI plugin, the cgroupfs driver and PauseImage as sandbox image, and stops it when the test
// ends. It skips under -short and when not root.
func StartContainerd16(t testing.TB) *Runtime {
	t.Helper()
	skipUnlessRoot(t)
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("critest: containerd 1.6 not installed: run scripts/cri-tools.sh (make test does)")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.Contains(string(out), " 1.6.") {
		t.Fatalf("critest: %s is not containerd 1.6 (%q, %v): run scripts/cri-tools.sh", bin, strings.TrimSpace(string(out)), err)
	}
	version := "1.6"
	if f := strings.Fields(string(out)); len(f) >= 3 {
		version = f[2]
	}
	needRunc(t)
	r := newRuntime(t, "containerd "+version)
	r.runShims = true
	// Debian's ctr, beside its containerd: its client matches the daemon's API.
	r.ctr = filepath.Join(filepath.Dir(bin), "ctr")
	cfg := fmt.Sprintf(config16, r.dir, r.socket, PauseImage, r.snapshotter, disabledPlugins)
	r.start(t, bin, cfg)
	return r
}

// StartContainerd2 starts the containerd v2 that scripts/cri-tools.sh builds, with its own
// shim, NRI v2 enabled and listening on nriSocket (a socket under the runtime's folder when
// empty; see NRISocket), the cgroupfs driver and PauseImage as sandbox image, and stops it when
// the test ends. It skips under -short and when not root.
func StartContainerd2(t testing.TB, nriSocket string) *Runtime {
	t.Helper()
	skipUnlessRoot(t)
	bin := Containerd2Binaries(t)
	needRunc(t)
	r := newRuntime(t, "containerd "+containerd2Version(bin))
	r.ctr = filepath.Join(bin, "ctr")
	if nriSocket == "" {
		nriSocket = filepath.Join(r.dir, "nri.sock")
	}
	r.NRISocket = nriSocket
	// The shim's socket folder: containerd v2 refuses one longer than 38 characters, and the
	// default (/run/containerd/s) would mix with any other containerd on the machine.
	shimDir := filepath.Join(r.dir, "s")
	if len(shimDir) > maxShimSocketDir {
		t.Fatalf("critest: shim socket folder %s is longer than %d characters: set TMPDIR shorter", shimDir, maxShimSocketDir)
	}
	cfg := fmt.Sprintf(config3, r.dir, r.socket, shimDir, nriSocket, r.snapshotter, PauseImage,
		filepath.Join(bin, "containerd-shim-runc-v2"), disabledPlugins, "linux/"+runtime.GOARCH)
	r.start(t, filepath.Join(bin, "containerd"), cfg)
	return r
}

// Containerd2Binaries returns the folder holding containerd v2's containerd,
// containerd-shim-runc-v2 and ctr: $TIDAL_CRI_TOOLS, or .cache/cri-tools/bin in the repository.
// It fails the test when one is missing.
func Containerd2Binaries(t testing.TB) string {
	t.Helper()
	return testutil.ToolsDir(t, "TIDAL_CRI_TOOLS", "cri-tools", "scripts/cri-tools.sh", "containerd", "containerd-shim-runc-v2", "ctr")
}

func containerd2Version(bin string) string {
	out, err := exec.Command(filepath.Join(bin, "containerd"), "--version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) >= 3 {
		return f[2]
	}
	return "v2"
}

func skipUnlessRoot(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real containerd")
	}
	isolationtest.RequireRoot(t, "to run containers")
}

func needRunc(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Fatalf("critest: runc not installed: run scripts/cri-tools.sh (make test does)")
	}
}

// newRuntime makes the runtime's folder and registers its teardown. The folder is short
// (under /tmp, not t.TempDir's long test-named path) because sockets live in it.
func newRuntime(t testing.TB, name string) *Runtime {
	t.Helper()
	base := os.TempDir()
	if len(base) > 16 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "crt")
	if err != nil {
		t.Fatalf("critest: %v", err)
	}
	r := &Runtime{Name: name, dir: dir, socket: filepath.Join(dir, "containerd.sock"),
		logPath: filepath.Join(dir, "containerd.log"), snapshotter: snapshotterFor(dir)}
	t.Cleanup(func() { r.teardown(t) })
	return r
}

// snapshotterFor says whether overlayfs can be mounted in dir (not on every file system, e.g.
// an overlay root): overlayfs if so, else the slower native snapshotter. $TIDAL_CRI_SNAPSHOTTER
// forces one.
func snapshotterFor(dir string) string {
	if s := os.Getenv("TIDAL_CRI_SNAPSHOTTER"); s != "" {
		return s
	}
	probe := filepath.Join(dir, "overlay-probe")
	defer os.RemoveAll(probe)
	var sub [4]string
	for i, n := range []string{"lower", "upper", "work", "merged"} {
		sub[i] = filepath.Join(probe, n)
		if err := os.MkdirAll(sub[i], 0o700); err != nil {
			return "native"
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", sub[0], sub[1], sub[2])
	if err := unix.Mount("overlay", sub[3], "overlay", 0, opts); err != nil {
		return "native"
	}
	_ = unix.Unmount(sub[3], unix.MNT_DETACH)
	return "overlayfs"
}

// start writes the config, starts the daemon, waits until CRI answers and imports PauseImage.
func (r *Runtime) start(t testing.TB, bin, config string) {
	t.Helper()
	cfgPath := filepath.Join(r.dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatalf("critest: %v", err)
	}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("critest: %v", err)
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Dies with the test binary if that is killed before cleanup runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("critest: start %s: %v", bin, err)
	}
	r.cmd, r.bin, r.config = cmd, bin, config
	r.done = make(chan struct{})
	go func() { // owned: ends when the daemon exits, which teardown ensures
		r.waitErr = cmd.Wait()
		close(r.done)
	}()
	if err := r.waitReady(); err != nil {
		t.Fatalf("critest: %s: %v\n%s", r.Name, err, r.logTail())
	}
	t.Logf("critest: %s ready on %s (snapshotter %s)", r.Name, r.socket, r.snapshotter)
	r.ImportImage(t, PauseImage, BuildStatic(t, PausePackage))
}

// waitReady polls CRI's Version until it answers: the socket appears before the CRI plugin is
// serving.
func (r *Runtime) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	conn, err := r.dial()
	if err != nil {
		return err
	}
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	for {
		select {
		case <-r.done:
			return fmt.Errorf("exited while starting: %v", r.waitErr)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := rs.Version(ctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRI not ready after %v: %v", readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// teardown removes every pod, stops the daemon and its shims, unmounts what it left mounted
// and removes its folder. On failure it logs the daemon's log tail first.
func (r *Runtime) teardown(t testing.TB) {
	t.Helper()
	if r.cmd != nil {
		alive := true
		select {
		case <-r.done:
			alive = false
		default:
		}
		if alive {
			rs, _ := r.CRI(t)
			Cleanup(t, rs)
		}
		if t.Failed() {
			t.Logf("critest: %s log (%s):\n%s", r.Name, r.logPath, r.logTail())
		}
		r.mu.Lock()
		if r.conn != nil {
			_ = r.conn.Close()
			r.conn = nil
		}
		r.mu.Unlock()
		if alive {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(stopTimeout):
				t.Errorf("critest: %s did not stop in %v after SIGTERM: killing it", r.Name, stopTimeout)
				_ = r.cmd.Process.Kill()
				<-r.done
			}
		}
	}
	r.killShims(t)
	unmountUnder(t, r.dir)
	if err := os.RemoveAll(r.dir); err != nil {
		t.Errorf("critest: remove %s: %v", r.dir, err)
	}
	if r.runShims {
		// containerd 1.6's shims always put their sockets in /run/containerd/s and create the
		// folder when they need it (MkdirAll): remove it, and /run/containerd, when empty.
		// Not only when this runtime created them: test runtimes in parallel packages see each
		// other's. A real containerd's /run/containerd is never empty (its socket).
		_ = os.Remove("/run/containerd/s")
		_ = os.Remove("/run/containerd")
	}
}

// killShims kills the shims this daemon started (they outlive it by design) when a test
// failed before its pods were removed. They are found by this daemon's unique socket path in
// their command line (-address). A killed shim leaves its socket file behind: containerd 1.6
// puts it in /run/containerd/s, outside the runtime's folder, so those are removed too.
func (r *Runtime) killShims(t testing.TB) {
	t.Helper()
	var sockets []string
	defer func() {
		for _, s := range sockets {
			if st, err := os.Lstat(s); err == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(s)
			}
		}
	}()
	for try := 0; try < 100; try++ {
		pids := processesWith(r.socket)
		if len(pids) == 0 {
			return
		}
		if try == 0 {
			t.Logf("critest: %s: killing %d leftover shim(s)", r.Name, len(pids))
		}
		for _, pid := range pids {
			sockets = append(sockets, shimSockets(pid)...)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("critest: %s: shims still running: %v", r.Name, processesWith(r.socket))
}

// shimSockets lists the unix socket files under /run/containerd/s that process pid holds
// open (a shim's listening sockets), from its fds' inodes and /proc/<pid>/net/unix.
func shimSockets(pid int) []string {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path
		f := strings.Fields(line)
		if len(f) == 8 && inodes[f[6]] && strings.HasPrefix(f[7], "/run/containerd/s/") {
			out = append(out, f[7])
		}
	}
	return out
}

// processesWith lists processes whose command line contains arg (zombies have none).
func processesWith(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// unmountUnder detaches every mount under dir, deepest first: snapshots, shm and rootfs mounts
// a killed daemon or shim left behind.
func unmountUnder(t testing.TB, dir string) {
	t.Helper()
	for _, m := range mountsUnder(dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			t.Errorf("critest: unmount %s: %v", m, err)
		}
	}
}

// mountsUnder lists the mount points at or under dir, deepest (latest) first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space and so on).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// logTail returns the last lines of the daemon's log.
func (r *Runtime) logTail() string {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
