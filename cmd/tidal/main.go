// Command tidal is the node-level colocation QoS agent and its tools, in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/internal/asynclog"
	"github.com/tidalqos/tidal/reporter"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

const usage = `tidal: a node-level colocation QoS agent

Usage:
  tidal agent [--config FILE]           run the node daemon (--node-name, --kubeconfig)
  tidal run --tier TIER [flags] -- CMD  run CMD as a workload managed by the agent
  tidal status [--json]                 what the agent is doing and why
  tidal arbiter [--config FILE]         the central arbiter: node reports, queues, leases (--kubeconfig)
  tidal demo [--duration 75s]           a live colocation demo on this host (root)
  tidal version

Run "tidal COMMAND -h" for a command's flags.
`

// exitError carries a process exit status out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command called wrongly: said, and the exit status is 2, as for a bad flag.
type usageError struct{ error }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if os.Args[1] == childCommand {
		// Before any signal handling: the command it becomes must get signals as they come.
		exitOn(runChild(os.Args[2:]), childCommand)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "agent":
		err = runAgent(ctx, args)
	case "run":
		stop() // tidal run forwards signals itself
		err = runRun(args)
	case "status":
		err = runStatus(ctx, args, os.Stdout)
	case "arbiter":
		err = runArbiter(ctx, args)
	case "demo":
		err = runDemo(ctx, args)
	case "version", "--version":
		fmt.Println(versionString())
	case "workload":
		err = runWorkload(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "tidal: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	stop()
	exitOn(err, cmd)
}

// parseFlags parses a command's flags and takes no other arguments (but where rest allows
// them). A bad flag ends the command with status 2: the flag package has already said what
// is wrong, with the usage, so it is not said again.
func parseFlags(fs *flag.FlagSet, args []string, rest bool) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError{2}
	}
	if !rest && fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q (tidal %s takes flags only)", fs.Args(), fs.Name())}
	}
	return nil
}

// exitOn ends the process with the status err stands for.
func exitOn(err error, cmd string) {
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.code)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "tidal %s: %v\n", cmd, err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintf(os.Stderr, "tidal %s: %v\n", cmd, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func versionString() string {
	v := version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return "tidal " + v
}

func runAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML config file (see docs/config.md); defaults apply without one")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name, over the config's nodeName (default $NODE_NAME, as a DaemonSet sets it)")
	kubeconfig := fs.String("kubeconfig", "", "kubernetes mode: a kubeconfig file, over the config's kubernetes.kubeconfig")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	cfg := config.Default()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			return err
		}
	}
	if *nodeName != "" {
		cfg.NodeName = *nodeName
	}
	if *kubeconfig != "" {
		cfg.Kubernetes.Kubeconfig = *kubeconfig
	}
	if err := cfg.Validate(); err != nil { // the flags' values too
		return err
	}
	log, closeLog := newLogger(cfg.LogLevel, os.Stderr)
	defer closeLog()
	a, err := agent.New(cfg, log)
	if err != nil {
		if *configPath != "" { // point a problem only the host shows at its line
			err = config.PlaceInFile(err, *configPath)
		}
		return err
	}
	return a.Run(ctx)
}

// logQueue is how many log records a daemon keeps while its log's reader is slow; more are
// dropped and counted rather than wait.
const logQueue = 4096

// newLogger is a daemon's log: written from a goroutine of its own, so a reader that stalls
// (a full pipe, a stuck log shipper) never holds the locks the daemon logs under, such as
// the agent's, which its fast path needs. closeLog writes what is queued (waiting at most 2 s
// for the reader) and stops that goroutine.
func newLogger(level string, w io.Writer) (log *slog.Logger, closeLog func()) {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	q := asynclog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}), logQueue)
	return q.Logger(), func() { q.Close(2 * time.Second) }
}

func runStatus(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the status document (schema "+reporter.StatusSchemaVersion+", docs/status.md)")
	socket := fs.String("socket", config.Default().SocketPath, "the agent's API socket")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	s, err := agent.NewClient(*socket).WithContext(ctx).Status()
	if err != nil {
		return err
	}
	if *asJSON {
		return writeIndentedJSON(out, s)
	}
	return reporter.WriteText(out, s)
}
