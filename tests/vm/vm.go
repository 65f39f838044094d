// Package vm boots a real cgroup v2 (unified hierarchy) Linux kernel under QEMU for tests
// that need one on a host that mounts cgroup v1. scripts/vm-tools.sh installs QEMU and
// busybox and prepares the kernel and base initramfs in .cache/vm; Boot copies a test's files
// (static binaries: see BuildStatic) into a folder the VM mounts on /mnt over virtio-9p, runs
// a script there as the child of the VM's PID 1 and returns its exit status, the console log
// (which carries the script's output) and the folder, with whatever the script wrote in it.
//
// Inside, /sys/fs/cgroup is cgroup2 (the kernel boots with cgroup_no_v1=all) with every
// controller enabled in the root's cgroup.subtree_control, as systemd does on a unified host.
package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidalqos/tidal/tests/testutil"
)

// Tools are the files scripts/vm-tools.sh prepared.
type Tools struct {
	QEMU      string
	Kernel    string // the uncompressed vmlinux (boots through PVH)
	Initramfs string
	// KernelPackage is the Debian package the kernel came from.
	KernelPackage string
}

// Find locates the tools in dir (normally .cache/vm of the repository).
func Find(dir string) (Tools, error) {
	t := Tools{Kernel: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, "initramfs.cpio")}
	q, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return t, errors.New("qemu-system-x86_64 is not installed")
	}
	t.QEMU = q
	for _, f := range []string{t.Kernel, t.Initramfs} {
		if _, err := os.Stat(f); err != nil {
			return t, fmt.Errorf("%s missing", f)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kernel-version")); err == nil {
		t.KernelPackage = strings.TrimSpace(string(b))
	}
	return t, nil
}

// Need returns the tools, or skips the test when it cannot boot a VM here (not root, tools
// missing: run scripts/vm-tools.sh, which make test does). With CI=true in the environment a
// missing piece fails the test instead: CI must run the v2 suite, not skip it.
func Need(t testing.TB) Tools {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: the cgroup v2 suite must run)", msg)
		}
		t.Skip(msg)
	}
	if testing.Short() {
		t.Skip("boots a VM")
	}
	if os.Geteuid() != 0 {
		skip("needs root (scripts/vm-tools.sh installs QEMU with apt-get)")
	}
	dir := os.Getenv("TIDAL_VM_DIR")
	if dir == "" {
		root, err := testutil.RepoRoot()
		if err != nil {
			skip("%v", err)
		}
		dir = filepath.Join(root, ".cache", "vm")
	}
	tools, err := Find(dir)
	if err != nil {
		skip("no VM tools: %v; run scripts/vm-tools.sh (make test does)", err)
	}
	return tools
}

// Spec is one VM run.
type Spec struct {
	// Files are copied into the shared folder before boot: name there (relative) -> host path.
	Files map[string]string
	// Script is the shell script (busybox sh) the VM runs in /mnt as PID 1's child; its exit
	// status is the run's.
	Script string
	// MemoryMiB and CPUs size the VM (defaults 1024 and 2).
	MemoryMiB int
	CPUs      int
	// DiskMiB, when set, adds an empty virtio-blk disk (/dev/vda) of that size.
	DiskMiB int
	// Timeout bounds the whole run (default 5 minutes).
	Timeout time.Duration
	// Stall, when set, stops a run whose console has not grown for this long: a guest that
	// has gone silent for longer than any step of its script takes is hung, and waiting out
	// Timeout only delays the failure.
	Stall time.Duration
	// RetryHung boots the VM once more (Boot only) when the first run hung (Stall or
	// Timeout) without a panic or an exit status; the hung run's console goes to the test's
	// log. For a suite whose guest hung once in many runs under TCG (2026-12-05) with no
	// message from the guest kernel.
	RetryHung bool
}

// Result is what a VM run left.
type Result struct {
	// ExitCode is the script's exit status.
	ExitCode int
	// Console is the serial console log: the kernel's messages, /init's and the script's
	// output.
	Console string
	// Dir is the shared folder (the VM's /mnt), with what the script wrote.
	Dir string
	// Elapsed is how long the VM ran, from QEMU's start to its exit.
	Elapsed time.Duration
}

// ReadFile reads a file the script left in the shared folder.
func (r *Result) ReadFile(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir, name))
	return string(b), err
}

// VMError is a VM that did not run the script to its end (no exit status came back: a kernel
// panic, a hang past the timeout, QEMU failing); it carries the console log.
type VMError struct {
	Reason  string
	Console string
	// Hung: stopped by Timeout or Stall, not ended by the guest or QEMU.
	Hung bool
}

func (e *VMError) Error() string {
	return fmt.Sprintf("VM failed: %s\n--- VM console ---\n%s", e.Reason, testutil.Tail(e.Console, 120))
}

// Run boots the VM with spec in a fresh shared folder under dir. It returns a *VMError when
// the VM failed; a script that ran and exited non-zero is not an error (see ExitCode).
func Run(ctx context.Context, tools Tools, dir string, spec Spec) (*Result, error) {
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 1024
	}
	if spec.CPUs == 0 {
		spec.CPUs = 2
	}
	if spec.Timeout == 0 {
		spec.Timeout = 5 * time.Minute
	}
	share := filepath.Join(dir, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		return nil, err
	}
	for name, src := range spec.Files {
		if err := copyFile(src, filepath.Join(share, name)); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(share, "run.sh"), []byte(spec.Script), 0o755); err != nil {
		return nil, err
	}
	console := filepath.Join(dir, "console.log")
	args := []string{
		"-accel", accel(), "-cpu", "max", "-m", strconv.Itoa(spec.MemoryMiB), "-smp", strconv.Itoa(spec.CPUs),
		"-display", "none", "-monitor", "none", "-serial", "file:" + console, "-no-reboot", "-nic", "none",
		"-kernel", tools.Kernel, "-initrd", tools.Initramfs,
		"-append", "console=ttyS0 panic=-1 quiet cgroup_no_v1=all",
		"-virtfs", "local,path=" + share + ",mount_tag=share,security_model=none",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
	}
	if spec.DiskMiB > 0 {
		disk := filepath.Join(dir, "disk.img")
		if err := os.WriteFile(disk, nil, 0o644); err != nil {
			return nil, err
		}
		if err := os.Truncate(disk, int64(spec.DiskMiB)<<20); err != nil {
			return nil, err
		}
		args = append(args, "-drive", "file="+disk+",if=virtio,format=raw,cache=unsafe")
	}
	ctx, cancel := context.WithTimeoutCause(ctx, spec.Timeout, fmt.Errorf("timed out after %s", spec.Timeout))
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cmd := exec.CommandContext(ctx, tools.QEMU, args...)
	// Stdin from /dev/null and no terminal on the serial port: QEMU's main thread would spin
	// on a closed stdin with -nographic.
	var qemuOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &qemuOut, &qemuOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return &Result{Dir: share, ExitCode: -1}, &VMError{Reason: fmt.Sprintf("qemu did not start: %v", err)}
	}
	var watcher sync.WaitGroup
	if spec.Stall > 0 {
		watcher.Go(func() { watchStall(ctx, console, spec.Stall, stop) })
	}
	runErr := cmd.Wait()
	stop(nil) // ends the watcher
	watcher.Wait()
	res := &Result{Dir: share, Elapsed: time.Since(start), ExitCode: -1}
	log, _ := os.ReadFile(console)
	res.Console = string(log)
	if q := strings.TrimSpace(qemuOut.String()); q != "" {
		res.Console += "\n--- qemu ---\n" + q
	}
	status, err := os.ReadFile(filepath.Join(share, "exit-status"))
	if err != nil {
		reason, hung := "the script left no exit status", false
		switch cause := context.Cause(ctx); {
		case cause != nil && !errors.Is(cause, context.Canceled):
			reason, hung = cause.Error(), true
		case runErr != nil:
			reason += fmt.Sprintf(" (qemu: %v)", runErr)
		}
		return res, &VMError{Reason: reason, Console: res.Console, Hung: hung}
	}
	res.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(status)))
	if err != nil {
		return res, &VMError{Reason: fmt.Sprintf("exit status %q", status), Console: res.Console}
	}
	return res, nil
}

// QuietDump is a shell snippet for Spec.Script: it starts a watcher in the guest's background,
// its PID in $quiet_dump, that once file has not grown for quiet dumps the kernel's blocked
// tasks and every CPU's stack to the console (sysrq w and l), once per silence. A step that
// hangs for good then leaves the guest kernel's view of the hang in the console before the
// host's Spec.Stall stops the VM (give Stall room beyond quiet: the dump is console output
// too). Kill $quiet_dump when the watched step ends.
func QuietDump(file string, quiet time.Duration) string {
	secs := max(int(quiet/time.Second), 1)
	poll := max(secs/8, 1)
	return fmt.Sprintf(`(last=-1; still=0; dumped=0
while sleep %[3]d; do
	size=$(stat -c %%s %[1]s 2>/dev/null || echo 0)
	if [ "$size" != "$last" ]; then last=$size; still=0; dumped=0; continue; fi
	still=$((still + %[3]d))
	if [ $still -ge %[2]d ] && [ $dumped = 0 ]; then
		echo "vm: no output in %[1]s for ${still}s: the guest kernel's blocked tasks and CPU stacks follow"
		dmesg -n 7
		echo 1 >/proc/sys/kernel/sysrq
		echo w >/proc/sysrq-trigger
		echo l >/proc/sysrq-trigger
		dumped=1
	fi
done) &
quiet_dump=$!
`, file, secs, poll)
}

// watchStall stops the run (through stop) once the console file has not grown for stall.
func watchStall(ctx context.Context, console string, stall time.Duration, stop context.CancelCauseFunc) {
	tick := time.NewTicker(max(min(stall/10, 5*time.Second), 10*time.Millisecond))
	defer tick.Stop()
	var size int64
	grew := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if fi, err := os.Stat(console); err == nil && fi.Size() != size {
				size, grew = fi.Size(), now
			}
			if now.Sub(grew) >= stall {
				stop(fmt.Errorf("hung: no console output for %s", stall))
				return
			}
		}
	}
}

// Boot runs spec in a VM, failing the test with the console log when the VM fails.
func Boot(t testing.TB, tools Tools, spec Spec) *Result {
	t.Helper()
	res, err := Run(context.Background(), tools, t.TempDir(), spec)
	var vmErr *VMError
	if spec.RetryHung && errors.As(err, &vmErr) && vmErr.Hung {
		t.Logf("the VM hung (%s); booting it once more. Its console:\n%s", vmErr.Reason, testutil.Tail(vmErr.Console, 60))
		res, err = Run(context.Background(), tools, t.TempDir(), spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// accel is TCG unless TIDAL_VM_ACCEL says otherwise: /dev/kvm on these machines is not
// hardware virtualization, and stock kernels do not boot with it.
func accel() string {
	if a := os.Getenv("TIDAL_VM_ACCEL"); a != "" {
		return a
	}
	return "tcg,thread=multi"
}

// BuildStatic builds a statically linked binary of pkg (a test binary, with go test -c, when
// test is set) into dst, for the VM, which has no C library. go-nvml needs cgo, so this is a
// cgo build linked statically (its dlopen of libnvidia-ml then fails in the VM: "no GPUs", as
// on any machine without the driver); without the race detector, which cannot link static.
func BuildStatic(pkg, dst string, test bool) error {
	args := []string{"build"}
	if test {
		args = []string{"test", "-c"}
	}
	args = append(args, "-o", dst, "-ldflags", `-linkmode external -extldflags "-static"`, pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm()|0o400)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
