package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// localAgent is an agent the demo runs in its own process, with its state, socket and log in
// a temporary folder, and its own cgroup tree that it removes at the end.
type localAgent struct {
	dir     string
	logPath string
	logFile *os.File
	cfg     config.Config
	agent   *agent.Agent
	cancel  context.CancelFunc
	done    chan error // Run's result
}

func startLocalAgent(cgroupRoot string) (l *localAgent, err error) {
	dir, err := os.MkdirTemp("", "tidal-demo-")
	if err != nil {
		return nil, err
	}
	l = &localAgent{dir: dir, logPath: filepath.Join(dir, "agent.log")}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.stop())
		}
	}()
	l.cfg = config.Default()
	l.cfg.Cgroup.Root = cgroupRoot
	l.cfg.StateDir = filepath.Join(dir, "state")
	l.cfg.SocketPath = filepath.Join(dir, "tidal.sock")
	l.cfg.MetricsAddress = ""
	l.cfg.CPU.PeakWindow = demoPeakWindow
	if l.logFile, err = os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return l, err
	}
	log := slog.New(slog.NewTextHandler(l.logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if l.agent, err = agent.New(l.cfg, log); err != nil {
		return l, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan error, 1)
	go func() { l.done <- l.agent.Run(ctx) }()
	return l, l.waitServing()
}

// waitServing waits until the agent answers on its socket.
func (l *localAgent) waitServing() error {
	client := agent.NewClient(l.cfg.SocketPath)
	deadline := time.Now().Add(agentTimeout)
	for {
		_, err := client.Status()
		if err == nil {
			return nil
		}
		select {
		case runErr := <-l.done:
			l.done <- runErr // stop reads it again
			return fmt.Errorf("agent stopped at start: %v", runErr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent did not answer on %s within %s: %v", l.cfg.SocketPath, agentTimeout, err)
		}
	}
}

// stop ends the agent, removes its cgroup tree and its temporary folder, and checks that no
// cgroup is left behind.
func (l *localAgent) stop() error {
	var errs []error
	if l.cancel != nil {
		l.cancel()
		if err := <-l.done; err != nil {
			errs = append(errs, fmt.Errorf("agent: %w", err))
		}
	}
	if l.agent != nil {
		if err := l.agent.Teardown(); err != nil {
			errs = append(errs, fmt.Errorf("removing cgroups: %w", err))
		}
		if left := cgroupsLeft(l.cfg.Cgroup.MountPoint, l.cfg.Cgroup.Root); len(left) > 0 {
			errs = append(errs, fmt.Errorf("cgroups left behind: %s", strings.Join(left, ", ")))
		}
	}
	if l.logFile != nil {
		l.logFile.Close()
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// printLogTail shows the end of the agent's log, which is about to be removed.
func (l *localAgent) printLogTail(w io.Writer, n int) {
	data, err := os.ReadFile(l.logPath)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Fprintf(w, "last lines of the agent's log:\n  %s\n", strings.Join(lines, "\n  "))
}

// cgroupsLeft lists the folders of tidal's tree named root, and of the reclaimed tier beside
// it, still present under mount, in any cgroup v1 hierarchy or the v2 tree.
func cgroupsLeft(mount, root string) []string {
	var left []string
	for _, top := range []string{root, plugins.TierPath(root, qos.Reclaimed)} {
		found, _ := filepath.Glob(filepath.Join(mount, "*", top))
		left = append(left, found...)
		if _, err := os.Stat(filepath.Join(mount, top)); err == nil {
			left = append(left, filepath.Join(mount, top))
		}
	}
	return left
}

// cgroupsInUse lists the cgroups of tidal's tree named root, under mount, that hold processes.
func cgroupsInUse(mount, root string) []string {
	var busy []string
	for _, top := range cgroupsLeft(mount, root) {
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil && len(bytes.TrimSpace(data)) > 0 {
				busy = append(busy, filepath.Dir(p))
			}
			return nil
		})
	}
	return busy
}
