package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/internal/yamlconf"
	"github.com/tidalqos/tidal/reporter"
)

// childCommand is the hidden first stage of `tidal run`: a child that waits until the agent has
// moved it into its cgroup, then execs the command, so the command's first instruction already
// runs confined.
const childCommand = "__run-child"

func runRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	tier := fs.String("tier", "", "system, dedicated, shared or reclaimed (required)")
	name := fs.String("name", "", "workload name (default: the command's name and tidal run's process ID)")
	priority := fs.Int("reclaim-priority", 0, "order among reclaimed work: lower is evicted first")
	cpus := fs.Int("cpus", 0, "dedicated: whole CPUs of its own; shared/reclaimed: a cap of N whole CPUs")
	numa := fs.Bool("numa-binding", false, "dedicated: all CPUs and memory on one NUMA node")
	memory := fs.String("memory", "", "memory limit, e.g. 512Mi or 2Gi")
	queue := fs.String("queue", "", "reclaimed: the tenant queue it runs for (it runs while the node's lease grants that queue)")
	burst := fs.Int("cpu-burst-percent", 0, "shared/system with --cpus: CPU burst as a percentage (0..100) of the cap, 0 none (default: the tier's)")
	gpus := fs.Int("gpus", 0, "reclaimed: GPUs lent to it; dedicated: GPUs of its own (the command sees only these)")
	sloProbe := fs.String("slo-probe", "", "shared/dedicated: what the agent asks for the workload's latency, an http:// URL it GETs or a redis://HOST:PORT/COMMAND/ARG… whose command it sends; it cuts lending when the answer is slower than --slo-latency")
	sloMetric := fs.String("slo-metric", "", "shared/dedicated, instead of --slo-probe: a latency histogram the workload exports, http://HOST:PORT/PATH#NAME or #NAME{label=\"value\"}; it cuts lending when the --slo-quantile of the requests served since the last read is slower than --slo-latency")
	sloQuantile := fs.String("slo-quantile", "", "the quantile of --slo-metric's histogram held to --slo-latency (default 0.99)")
	sloLatency := fs.String("slo-latency", "", "the latency --slo-probe or --slo-metric must stay under, e.g. 20ms")
	socket := fs.String("socket", config.Default().SocketPath, "the agent's API socket")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: tidal run --tier TIER [flags] -- CMD [ARGS...]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	cmdArgs := fs.Args()
	switch {
	case *tier == "":
		return usageError{errors.New("--tier is required: one of system, dedicated, shared, reclaimed (usage: tidal run --tier TIER [flags] -- CMD [ARGS...])")}
	case len(cmdArgs) == 0:
		return usageError{errors.New("no command to run (usage: tidal run --tier TIER [flags] -- CMD [ARGS...])")}
	}
	var memBytes int64
	if *memory != "" {
		var err error
		if memBytes, err = yamlconf.ParseSize(*memory); err != nil {
			return fmt.Errorf("--memory %q: %v", *memory, err)
		}
	}
	if *name == "" {
		*name = defaultName(cmdArgs[0])
	}
	if _, err := exec.LookPath(cmdArgs[0]); err != nil {
		return err
	}

	// Stage one: a child that blocks on a pipe before exec.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return err
	}
	child := exec.Command(self, append([]string{childCommand, "--"}, cmdArgs...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.ExtraFiles = []*os.File{goR}
	// On a terminal the command stays in our process group, in the foreground: it reads the
	// terminal and gets Ctrl-C and Ctrl-\ itself, so those are not forwarded again. Otherwise
	// it gets a process group of its own and every signal is forwarded to that whole group.
	interactive := isTerminal(os.Stdin)
	if !interactive {
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded()...)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		return err
	}
	goR.Close()

	req := agent.AdmitRequest{Name: *name, Tier: *tier, CPUs: *cpus, NUMABinding: *numa, MemoryBytes: memBytes,
		GPUs: *gpus, Queue: *queue, SLOProbe: *sloProbe, SLOMetric: *sloMetric, SLOQuantile: *sloQuantile, SLOLatency: *sloLatency, PID: child.Process.Pid, Command: cmdArgs}
	if isSet(fs, "reclaim-priority") {
		p := int32(*priority)
		req.ReclaimPriority = &p
	}
	if isSet(fs, "cpu-burst-percent") {
		b := int32(*burst)
		req.CPUBurstPercent = &b
	}
	client := agent.NewClient(*socket)
	admitted, held, err := admit(client, req, sigs)
	if err != nil {
		goW.Close() // the child sees EOF and exits without running the command
		_ = child.Wait()
		var interrupted interruptedError
		if errors.As(err, &interrupted) && interrupted.admitted {
			// Admitted meanwhile: its cgroup is empty now that the child is gone.
			release, stop := context.WithTimeout(context.Background(), 2*time.Second)
			_ = client.WithContext(release).Release(req.Name)
			stop()
		}
		return err
	}
	// The go-ahead carries the environment the agent wants the command to have (the GPUs it
	// may see).
	if err := json.NewEncoder(goW).Encode(gate{Env: admitted.Env}); err != nil {
		return err
	}
	goW.Close()

	forward := func(sig syscall.Signal) {
		switch {
		case interactive && (sig == syscall.SIGINT || sig == syscall.SIGQUIT):
			// The terminal sent it to the command already.
		case interactive:
			_ = syscall.Kill(child.Process.Pid, sig)
		default:
			_ = syscall.Kill(-child.Process.Pid, sig)
		}
	}
	for _, sig := range held { // came while the agent was admitting it
		forward(sig)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	var waitErr error
wait:
	for {
		select {
		case s := <-sigs:
			forward(s.(syscall.Signal))
		case waitErr = <-done:
			break wait
		}
	}
	var refused *agent.RefusedError
	switch err := client.Release(*name); {
	case err == nil, errors.Is(err, agent.ErrNoAgent):
	case errors.As(err, &refused) && refused.Status == http.StatusConflict:
		// The command left processes behind (a daemon it forked): they stay managed.
		fmt.Fprintf(os.Stderr, "tidal run: %s\n", refused.Msg)
	default:
		fmt.Fprintf(os.Stderr, "tidal run: %v\n", err)
	}
	return exitStatus(waitErr)
}

// interruptedError: a signal that ends the command came while the agent was admitting it.
type interruptedError struct {
	sig      syscall.Signal
	admitted bool // the agent admitted it all the same: the caller releases it
}

func (e interruptedError) Error() string {
	return fmt.Sprintf("interrupted by %v before the command ran", e.sig)
}
func (e interruptedError) exitCode() int { return 128 + int(e.sig) }
func (e interruptedError) Unwrap() error { return exitError{e.exitCode()} }

// admit asks the agent to manage the command. A signal that would end the command (Ctrl-C,
// SIGTERM, SIGHUP) ends the wait for a slow or hung agent too: then the command never runs
// (interruptedError). Other signals that come meanwhile are held, for the caller to forward
// once the command runs.
func admit(client *agent.Client, req agent.AdmitRequest, sigs <-chan os.Signal) (reporter.Workload, []syscall.Signal, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		w   reporter.Workload
		err error
	}
	done := make(chan result, 1)
	go func() {
		w, err := client.WithContext(ctx).Admit(req)
		done <- result{w, err}
	}()
	var held []syscall.Signal
	for {
		select {
		case r := <-done:
			return r.w, held, r.err
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if sig != syscall.SIGINT && sig != syscall.SIGTERM && sig != syscall.SIGHUP {
				held = append(held, sig)
				continue
			}
			cancel()
			r := <-done
			return reporter.Workload{}, nil, interruptedError{sig: sig, admitted: r.err == nil}
		}
	}
}

// exitStatus maps the command's end to ours: its exit code, or 128+signal like a shell.
func exitStatus(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitError{128 + int(ws.Signal())}
	}
	return exitError{ee.ExitCode()}
}

// forwarded are the signals tidal run passes on to the command. Job-control stops are not
// among them: the shell's job control acts on the process group as usual.
func forwarded() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// gate is the go-ahead `tidal run` sends its child once the agent admitted it.
type gate struct {
	Env map[string]string `json:"env,omitempty"`
}

// runChild waits for the go-ahead on fd 3, then becomes the command.
func runChild(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	f := os.NewFile(3, "gate")
	var g gate
	if err := json.NewDecoder(f).Decode(&g); err != nil {
		return exitError{126} // not admitted: tidal run already said why
	}
	f.Close()
	path, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	env := os.Environ()
	for k, v := range g.Env {
		env = append(env, k+"="+v)
	}
	return syscall.Exec(path, args, env)
}

func defaultName(cmd string) string {
	base := strings.ToLower(filepath.Base(cmd))
	var b strings.Builder
	for _, r := range base {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '.' || r == '_' {
			b.WriteRune(r)
		}
	}
	s := strings.Trim(b.String(), "-._")
	if s == "" {
		s = "job"
	}
	if len(s) > 40 {
		s = s[:40]
	}
	return fmt.Sprintf("%s-%d", s, os.Getpid())
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
