package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/internal/workload"
)

type session struct {
	opts        Options
	self        string
	socket      string
	client      *agent.Client
	out         io.Writer
	started     time.Time
	limitWindow time.Duration // 0 when the agent was already running (not known)
	children    []*child
}

// run starts the workloads, watches the schedule and prints the summary; it stops every child
// it started, also on errors and interruption.
func (s *session) run(ctx context.Context) (err error) {
	defer func() {
		if serr := s.stopAll(); serr != nil {
			err = errors.Join(nonInterrupt(err), fmt.Errorf("stopping workloads: %w", serr))
		}
	}()
	sched := demoSchedule(s.opts.duration, s.opts.lowRPS, s.opts.spikeRPS)
	s.printPlan(sched)

	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	web, err := s.start(ctx, "demo-web", "shared", []string{"server", "--addr", addr, "--work", s.opts.work.String()}, nil)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, web, "http://"+addr+"/healthz"); err != nil {
		return err
	}

	burnFeed := newLineFeed(func(l workload.BurnerLine) bool { return l.Final })
	burner, err := s.start(ctx, "demo-batch", "reclaimed",
		[]string{"burner", "--threads", strconv.Itoa(s.opts.burnerThreads)}, burnFeed.read)
	if err != nil {
		return err
	}

	lgFeed := newLineFeed(func(l workload.LoadGenLine) bool { return l.Final })
	cpu := newCPUMeter()
	lgStart := time.Now()
	lg, err := s.start(ctx, "demo-loadgen", "system",
		[]string{"loadgen", "--url", "http://" + addr + "/work", "--phases", phaseSpec(sched)}, lgFeed.read)
	if err != nil {
		return err
	}

	m := &monitor{
		out: s.out, client: s.client, sched: sched, start: lgStart, cpu: cpu,
		actions: &actionLog{last: s.started},
		lg:      lgFeed, burn: burnFeed, lgChild: lg, web: web, burner: burner,
	}
	final, err := m.run(ctx)
	if err != nil {
		return err
	}
	if err := s.stopAll(); err != nil {
		return fmt.Errorf("stopping workloads: %w", err)
	}
	if st, err := s.client.Status(); err == nil {
		m.actions.add(st.Actions)
	}
	burnFinal, _, _ := burnFeed.Final()
	s.printSummary(sched, final, burnFinal, m)
	return nil
}

func (s *session) printPlan(sched []demoPhase) {
	fmt.Fprintf(s.out, "online:   demo-web, shared tier, %s of CPU per request\n", s.opts.work)
	fmt.Fprintf(s.out, "offline:  demo-batch, reclaimed tier, a %d-thread CPU burner\n", s.opts.burnerThreads)
	parts := make([]string, len(sched))
	for i, p := range sched {
		parts[i] = fmt.Sprintf("%s %s @ %g rps", p.name, p.dur, p.rps)
	}
	fmt.Fprintf(s.out, "load:     demo-loadgen, system tier: %s\n\n", strings.Join(parts, ", "))
}

// start runs a workload and waits until the agent has admitted it.
func (s *session) start(ctx context.Context, name, tier string, args []string, readStdout func(io.Reader)) (*child, error) {
	c, err := startChild(s.self, s.socket, name, tier, args, readStdout)
	if err != nil {
		return nil, err
	}
	s.children = append(s.children, c)
	err = waitFor(ctx, c, admitTimeout, "the agent admitted it", func() bool {
		st, err := s.client.Status()
		if err != nil {
			return false
		}
		for _, w := range st.Workloads {
			if w.Name == name {
				return true
			}
		}
		return false
	})
	return c, err
}

// stopAll stops every child started so far; a second call has nothing left to do.
func (s *session) stopAll() error {
	err := stopChildren(s.children)
	s.children = nil
	return err
}

// waitFor polls ready until it holds, the child exits, ctx ends or timeout passes.
func waitFor(ctx context.Context, c *child, timeout time.Duration, what string, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: waited %s and still not %s", c.name, timeout, what)
		}
		select {
		case <-ctx.Done():
			return ErrInterrupted
		case <-c.exited:
			return fmt.Errorf("%s ended before %s: %s", c.name, what, c.describe())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func waitHealthy(ctx context.Context, web *child, url string) error {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	return waitFor(ctx, web, healthyTimeout, "it answered "+url, func() bool {
		resp, err := hc.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// freePort finds a free loopback TCP port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
