package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the benchmark (a workload, the agent, `tidal run`). Its stdout,
// one JSON report per line, is read as it comes and each line is stamped with its arrival
// time; its stderr goes to a log file in the temporary folder, whose tail explains failures.
//
// Two goroutines belong to a proc: one reads stdout until EOF, one waits for the process to
// exit. stop ends the process; the reader ends once every holder of the pipe has exited,
// which removing the run's cgroups guarantees for grandchildren (`tidal run`'s command).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time

	mu    sync.Mutex
	lines []timedLine

	readDone chan struct{} // stdout reached EOF
	exited   chan struct{} // the process exited; waitErr is set
	waitErr  error
}

// timedLine is one line of a process's stdout and when it arrived.
type timedLine struct {
	At   time.Time
	Data []byte
}

// startProc starts argv with its stdout read line by line and its stderr in logDir/name.log,
// in a process group of its own (so a Ctrl-C in the terminal reaches only the benchmark, which
// stops everything in order) and killed if the benchmark dies. attach, when not nil, moves it
// into its cgroup right after the start.
func startProc(name, logDir string, argv []string, attach func(pid int) error) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var gate io.WriteCloser
	if attach != nil {
		// Held at a gate until it sits in its cgroup: a server that forks workers (nginx)
		// would otherwise leave them behind, in the benchmark's own cgroup.
		cmd = exec.Command("sh", append([]string{"-c", `read -r go && exec "$@"`, "sh"}, argv...)...)
		if gate, err = cmd.StdinPipe(); err != nil {
			w.Close()
			r.Close()
			return nil, err
		}
	}
	cmd.Stdout, cmd.Stderr = w, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, started: started, readDone: make(chan struct{}), exited: make(chan struct{})}
	go p.read(r)
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if attach != nil {
		if err := attach(cmd.Process.Pid); err != nil {
			gate.Close()
			p.stop(0)
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		_, _ = io.WriteString(gate, "go\n")
		gate.Close()
	}
	return p, nil
}

func (p *proc) read(r *os.File) {
	defer close(p.readDone)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // the load generator's final line holds its histogram
	for sc.Scan() {
		line := timedLine{At: time.Now(), Data: append([]byte(nil), sc.Bytes()...)}
		p.mu.Lock()
		p.lines = append(p.lines, line)
		p.mu.Unlock()
	}
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// output returns the lines read so far.
func (p *proc) output() []timedLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]timedLine(nil), p.lines...)
}

// running says whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM (the workloads then print their final report; `tidal run` forwards it to
// its command), waits up to grace, then kills the process group. It returns once the process
// has exited and its output is read (or 2 more seconds passed).
func (p *proc) stop(grace time.Duration) {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exited
	}
	select {
	case <-p.readDone:
	case <-time.After(2 * time.Second):
	}
}

// wait waits up to timeout for the process to exit by itself.
func (p *proc) wait(timeout time.Duration, cancel <-chan struct{}) error {
	select {
	case <-p.exited:
	case <-cancel:
		return fmt.Errorf("%s: interrupted", p.name)
	case <-time.After(timeout):
		return fmt.Errorf("%s: still running after %s", p.name, timeout)
	}
	select {
	case <-p.readDone:
	case <-time.After(2 * time.Second):
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s: %v; last lines of its log:\n%s", p.name, p.waitErr, p.logTail(10))
	}
	return nil
}

// logTail returns the last n lines of the process's stderr log, indented.
func (p *proc) logTail(n int) string {
	data, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "    " + strings.Join(lines, "\n    ")
}
