package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"syscall"
	"time"

	"github.com/tidalqos/tidal/agent"
	"github.com/tidalqos/tidal/plugins"
)

// overheadResult is the agent's own cost while it manages many light workloads.
type overheadResult struct {
	Workloads         int     `json:"workloads"`
	Listed            int     `json:"listed"` // workloads the agent's status listed at the end
	DurationSeconds   float64 `json:"durationSeconds"`
	AgentCPUPercent   float64 `json:"agentCPUPercent"` // of one core, over the measurement
	AgentPeakRSSBytes int64   `json:"agentPeakRSSBytes"`
	AgentRSSBytes     int64   `json:"agentRSSBytes"` // at the end
	// AgentAnonBytes is the anonymous part of AgentRSSBytes (RssAnon): the rest is the
	// binary's own pages, file-backed, shared and reclaimable.
	AgentAnonBytes int64 `json:"agentAnonBytes"`
}

// overheadSettle is the wait after the last admission before measuring, so the cost of
// admitting (a cgroup tree write per workload) stays out of the steady-state figure.
const overheadSettle = 3 * time.Second

// measureOverhead starts an agent with its defaults, admits light workloads (sleep processes,
// alternately shared and reclaimed), lets it run, and reads its CPU time and peak memory from
// /proc. Nothing else polls the agent meanwhile.
func (b *bench) measureOverhead(ctx context.Context) (res overheadResult, err error) {
	o := b.opts
	fmt.Fprintf(b.log, "agent overhead: %d workloads for %s ... ", o.overheadWorkloads, o.overheadDuration)
	rel := path.Join(b.root, "overhead")
	if err := b.writer.Apply([]plugins.Cgroup{{Path: rel, Settings: b.everywhere()}, {Path: path.Join(rel, "agent"), Settings: b.everywhere()}}); err != nil {
		return res, err
	}
	var sleepers []*exec.Cmd
	var a *agentProc
	defer func() {
		for _, c := range sleepers {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if a != nil {
			a.stop(stopGrace)
		}
		err = errors.Join(err, removeTree(b.layout, rel))
	}()
	if a, err = b.startAgent(ctx, b.tidal, "overhead-agent", path.Join(rel, "tidal"), path.Join(rel, "agent"), ""); err != nil {
		return res, err
	}
	for i := 0; i < o.overheadWorkloads; i++ {
		c, err := b.admitSleeper(a.client, i)
		if c != nil {
			sleepers = append(sleepers, c)
		}
		if err != nil {
			return res, err
		}
	}
	if !sleepCtx(ctx, overheadSettle) {
		return res, ctx.Err()
	}
	before, err := readCPUUsage(a.pid())
	if err != nil {
		return res, err
	}
	if !sleepCtx(ctx, o.overheadDuration) {
		return res, ctx.Err()
	}
	after, err := readCPUUsage(a.pid())
	if err != nil {
		return res, err
	}
	res = overheadResult{Workloads: o.overheadWorkloads, DurationSeconds: after.at.Sub(before.at).Seconds(),
		AgentCPUPercent: after.percentSince(before)}
	if res.AgentPeakRSSBytes, err = memoryStatus(a.pid(), "VmHWM"); err != nil {
		return res, err
	}
	if res.AgentRSSBytes, err = memoryStatus(a.pid(), "VmRSS"); err != nil {
		return res, err
	}
	if res.AgentAnonBytes, err = memoryStatus(a.pid(), "RssAnon"); err != nil {
		return res, err
	}
	if s, err := a.client.Status(); err == nil {
		res.Listed = len(s.Workloads)
	}
	fmt.Fprintf(b.log, "CPU %.2f%% of one core, peak RSS %.1f MiB, %d workloads listed\n",
		res.AgentCPUPercent, float64(res.AgentPeakRSSBytes)/(1<<20), res.Listed)
	return res, nil
}

// admitSleeper starts a light workload and has the agent manage it (the agent accepts a
// process only from its parent or itself): every other one online (shared), the rest
// reclaimed.
func (b *bench) admitSleeper(client *agent.Client, i int) (*exec.Cmd, error) {
	c, err := startSleeper()
	if err != nil {
		return nil, err
	}
	tier := "shared"
	if i%2 == 1 {
		tier = "reclaimed"
	}
	_, err = client.Admit(agent.AdmitRequest{Name: sleeperName(i), Tier: tier, PID: c.Process.Pid, Command: c.Args})
	return c, err
}

// startSleeper starts a light workload: a `sleep` process, killed with the benchmark.
func startSleeper() (*exec.Cmd, error) {
	c := exec.Command("sleep", "3600")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return c, c.Start()
}

func sleeperName(i int) string { return fmt.Sprintf("light-%03d", i) }
