package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is one `tidal run ... -- tidal workload ...` process, in its own process group.
type child struct {
	name   string
	cmd    *exec.Cmd
	stderr *tailBuffer
	exited chan struct{} // closed once its output is read and it is reaped
	err    error         // how it ended; read only after exited is closed
}

func (c *child) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// describe says how an exited child ended, with the end of what it wrote to stderr.
func (c *child) describe() string {
	msg := "exited"
	if c.err != nil {
		msg = c.err.Error()
	}
	if tail := strings.TrimSpace(c.stderr.String()); tail != "" {
		msg += ": " + strings.ReplaceAll(tail, "\n", "; ")
	}
	return msg
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// startChild runs `tidal run --tier tier --name name -- tidal workload ARGS`. readStdout, when
// not nil, reads the workload's report lines until they end; otherwise stdout is discarded.
func startChild(self, socket, name, tier string, workloadArgs []string, readStdout func(io.Reader)) (*child, error) {
	args := append([]string{"run", "--socket", socket, "--tier", tier, "--name", name, "--", self, "workload"}, workloadArgs...)
	c := &child{name: name, cmd: exec.Command(self, args...), stderr: &tailBuffer{}, exited: make(chan struct{})}
	c.cmd.Stderr = c.stderr
	// Its own process group, so a Ctrl-C on the terminal reaches only the demo, which stops
	// the children in order. Pdeathsig stops them too if the demo itself is killed.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var stdout io.ReadCloser
	if readStdout != nil {
		var err error
		if stdout, err = c.cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		defer close(c.exited)
		if stdout != nil {
			readStdout(stdout)
			_, _ = io.Copy(io.Discard, stdout) // after a bad line, keep the pipe from filling
		}
		c.err = c.cmd.Wait()
	}()
	return c, nil
}

// stopChildren sends SIGTERM to each running child's process group (`tidal run` forwards it to
// its workload), waits up to stopGrace, then kills what is left, workloads included.
func stopChildren(cs []*child) error {
	for _, c := range cs {
		if c.running() {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(stopGrace)
	var errs []error
	for _, c := range cs {
		select {
		case <-c.exited:
			continue
		case <-time.After(time.Until(deadline)):
		}
		killTree(c.cmd.Process.Pid)
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit after SIGKILL", c.name, c.cmd.Process.Pid))
		}
	}
	return errors.Join(errs...)
}

// killTree kills the process group of pid and those of its children: `tidal run` puts its
// workload in a group of its own.
func killTree(pid int) {
	kids := childPIDs(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(-k, syscall.SIGKILL)
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// childPIDs lists the processes whose parent is pid, from /proc/*/stat.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if ppid, ok := parentFromStat(data); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// parentFromStat reads the parent pid from a /proc/PID/stat line: "pid (comm) state ppid ...".
func parentFromStat(data []byte) (int, bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
