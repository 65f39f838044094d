package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
	"github.com/tidalqos/tidal/reporter"
	"github.com/tidalqos/tidal/sysadvisor/cgroupfs"
	"github.com/tidalqos/tidal/sysadvisor/ioadvisor"
	"github.com/tidalqos/tidal/sysadvisor/metrics"
)

// ioDisk is a disk IO isolation manages.
type ioDisk struct {
	ioadvisor.Disk
	scheduler string
}

// resolveIODisks lists the disks to manage: the node's whole disks (io.nodeDisks) and the
// configured ones, a configured capacity applying to either. A configured disk that cannot be
// found is an error: the operator named it.
func resolveIODisks(cfg config.IO, sysRoot string) ([]ioDisk, error) {
	var out []ioDisk
	index := map[string]int{}
	if cfg.NodeDisks {
		disks, err := metrics.WholeDisks(sysRoot)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, config.KeyErrorf("io.nodeDisks", "%v", err)
		}
		for _, d := range disks {
			index[d.Device] = len(out)
			out = append(out, ioDisk{Disk: ioadvisor.Disk{Device: d.Device, Name: d.Name}, scheduler: d.Scheduler})
		}
	}
	for _, c := range cfg.Devices {
		dev, err := config.DeviceNumber(c.Device)
		if err != nil {
			return nil, config.KeyErrorf("io.devices", "%v", err)
		}
		d, err := metrics.DiskByDevice(sysRoot, dev)
		if err != nil {
			return nil, config.KeyErrorf("io.devices", "%s: %v (name a whole disk, not a partition)", c.Device, err)
		}
		i, ok := index[dev]
		if !ok {
			i = len(out)
			index[dev] = i
			out = append(out, ioDisk{Disk: ioadvisor.Disk{Device: dev, Name: d.Name}, scheduler: d.Scheduler})
		}
		out[i].Capacity = ioadvisor.Rates{uint64(c.ReadBps), uint64(c.WriteBps), uint64(c.ReadIOPS), uint64(c.WriteIOPS)}
	}
	return out, nil
}

// ioWeightWorks says whether a low IO weight means something on one of the disks: bfq
// honours cgroup weights; on v2 so does io.cost where the operator enabled it on the disk
// (tidal never enables io.cost itself).
func ioWeightWorks(layout *cgroupfs.Layout, disks []ioDisk) bool {
	var qos string
	if layout.Version == cgroupfs.V2 {
		data, _ := os.ReadFile(filepath.Join(layout.Unified, "io.cost.qos"))
		qos = string(data)
	}
	for _, d := range disks {
		if d.scheduler == "bfq" || strings.Contains(qos, d.Device+" enable=1") {
			return true
		}
	}
	return false
}

// setupIO starts IO isolation: every disk at its floor until figures say more can be lent.
func (a *Agent) setupIO() error {
	if !a.cfg.IO.Enabled {
		a.ioClear = ioController(a.layout)
		return nil
	}
	disks, err := resolveIODisks(a.cfg.IO, a.sysDir)
	if err != nil {
		return err
	}
	if len(disks) == 0 {
		a.log.Info("IO isolation on, but there is no disk to manage")
		a.ioClear = ioController(a.layout)
		return nil
	}
	if !ioController(a.layout) {
		a.log.Warn("IO isolation on, but the IO controller is not available (v1: blkio not mounted; v2: io not enabled in the root's cgroup.subtree_control): reclaimed work's IO is not throttled")
		return nil
	}
	var adv []ioadvisor.Disk
	for _, d := range disks {
		adv = append(adv, d.Disk)
	}
	c := a.cfg.IO
	a.ioDisks = disks
	a.ioAdvisor = ioadvisor.New(ioadvisor.Config{
		FloorBps: uint64(c.FloorBps), FloorIOPS: uint64(c.FloorIOPS), MarginRatio: c.MarginRatio, GrowStepRatio: c.GrowStepRatio,
		PeakWindow: c.PeakWindow, PressureThreshold: c.PressureThreshold, LatencyThreshold: c.LatencyThreshold, Hold: c.HoldAfterCut,
	}, adv)
	a.ioWeight = ioWeightWorks(a.layout, disks)
	a.ioLent, a.ioView = ioLimits(a.ioAdvisor.Lent()), a.ioViewOf(a.ioAdvisor.Lent(), ioFigures{}, 0)
	names := make([]string, len(disks))
	for i, d := range disks {
		names[i] = d.Name + "=" + d.Device + "(" + d.scheduler + ")"
	}
	a.log.Info("IO isolation on", "disks", strings.Join(names, " "), "weight", a.ioWeight, "pressure", a.ioPressureSource())
	return nil
}

// ioController says whether cgroups can be IO-throttled: on v1 the blkio hierarchy is mounted,
// on v2 the root (the host's, never written by tidal) hands the io controller down.
func ioController(layout *cgroupfs.Layout) bool {
	if layout.Version != cgroupfs.V2 {
		return layout.Has("blkio")
	}
	data, err := os.ReadFile(filepath.Join(layout.Unified, "cgroup.subtree_control"))
	return err == nil && slices.Contains(strings.Fields(string(data)), "io")
}

func ioLimits(lent []ioadvisor.Lent) []plugins.IOLimit {
	out := make([]plugins.IOLimit, len(lent))
	for i, l := range lent {
		out[i] = plugins.IOLimit{Device: l.Disk.Device, ReadBps: l.Rates[0], WriteBps: l.Rates[1], ReadIOPS: l.Rates[2], WriteIOPS: l.Rates[3]}
	}
	return out
}

func ioRates(r ioadvisor.Rates) reporter.IORates {
	return reporter.IORates{ReadBps: r[0], WriteBps: r[1], ReadIOPS: r[2], WriteIOPS: r[3]}
}

// ioReading is what the IO loop keeps between two readings.
type ioReading struct {
	at        time.Time
	disks     map[string]metrics.DiskStat
	reclaimed map[string]cgroupfs.IOCounters
}

// ioFigures is one interval's figures per disk: online and reclaimed rates and latency.
type ioFigures struct {
	samples   map[string]ioadvisor.Sample
	reclaimed map[string]ioadvisor.Rates
}

// perSecond is (b - a) / dt, 0 when the counter went back (a device re-created).
func perSecond(a, b uint64, dt time.Duration) uint64 {
	if b < a || dt <= 0 {
		return 0
	}
	return uint64(float64(b-a) / dt.Seconds())
}

// ioFiguresBetween turns two readings into per-disk rates: online is the disk's IO less
// reclaimed work's own (v1 counts reclaimed work's buffered writeback as the root's, so it
// shows up as online use: lending errs on the safe side).
func ioFiguresBetween(prev, cur ioReading, disks []ioDisk) ioFigures {
	f := ioFigures{samples: map[string]ioadvisor.Sample{}, reclaimed: map[string]ioadvisor.Rates{}}
	dt := cur.at.Sub(prev.at)
	for _, d := range disks {
		p, ok1 := prev.disks[d.Device]
		c, ok2 := cur.disks[d.Device]
		if !ok1 || !ok2 {
			continue
		}
		rp, rc := prev.reclaimed[d.Device], cur.reclaimed[d.Device]
		rec := ioadvisor.Rates{perSecond(rp.ReadBytes, rc.ReadBytes, dt), perSecond(rp.WriteBytes, rc.WriteBytes, dt),
			perSecond(rp.Reads, rc.Reads, dt), perSecond(rp.Writes, rc.Writes, dt)}
		all := ioadvisor.Rates{perSecond(p.ReadBytes, c.ReadBytes, dt), perSecond(p.WriteBytes, c.WriteBytes, dt),
			perSecond(p.Reads, c.Reads, dt), perSecond(p.Writes, c.Writes, dt)}
		var s ioadvisor.Sample
		for i := range all {
			s.Online[i] = all[i] - min(all[i], rec[i])
		}
		if ios := (c.Reads + c.Writes) - min(p.Reads+p.Writes, c.Reads+c.Writes); ios > 0 && c.ReadTicks+c.WriteTicks >= p.ReadTicks+p.WriteTicks {
			s.Latency = time.Duration(float64(c.ReadTicks+c.WriteTicks-p.ReadTicks-p.WriteTicks) / float64(ios) * float64(time.Millisecond))
		}
		f.samples[d.Device] = s
		f.reclaimed[d.Device] = rec
	}
	return f
}

func (a *Agent) ioPressureSource() string {
	if a.layout.Version == cgroupfs.V2 {
		return "online tiers' io.pressure some"
	}
	return "none on cgroup v1"
}

// errNoIOPressure: cgroup v1 has no per-cgroup IO pressure, and the node's /proc/pressure/io
// counts reclaimed work waiting on its own throttle (a throttled writer on an idle node reads
// as 50-100% "some" and "full"), which would hold lending at the floor for ever. On v1 the
// disks' latency is the cut signal.
var errNoIOPressure = errors.New("no online IO pressure on cgroup v1")

// ioPressure is the pressure signal: the worst online tier's io.pressure (cgroup v2).
func (a *Agent) ioPressure() (float64, error) {
	if a.layout.Version == cgroupfs.V2 {
		worst := 0.0
		for _, t := range []qos.Tier{qos.System, qos.Dedicated, qos.Shared} {
			p, err := a.layout.IOPressure(plugins.TierPath(a.cfg.Cgroup.Root, t))
			if err != nil {
				return 0, err
			}
			worst = max(worst, p)
		}
		return worst, nil
	}
	return 0, errNoIOPressure
}

// ioLoop reads the disks every io.interval: it cuts lending at once (and writes the cgroups
// at once) when online IO pressure or a disk's latency crosses its threshold, and grows it by
// a step at most once per slow-loop interval. Unreadable figures for longer than
// loops.metricsStaleAfter lend the floor.
func (a *Agent) ioLoop(ctx context.Context) {
	if a.ioAdvisor == nil {
		return
	}
	t := time.NewTicker(a.cfg.IO.Interval)
	defer t.Stop()
	reclaimedTier := plugins.TierPath(a.cfg.Cgroup.Root, qos.Reclaimed)
	var prev ioReading
	lastOK, lastGrow := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		disks, err := metrics.ReadDiskStats(a.procDir)
		var reclaimed map[string]cgroupfs.IOCounters
		if err == nil {
			reclaimed, err = a.layout.IOStat(reclaimedTier)
		}
		pressure, perr := a.ioPressure()
		changed := false
		var figures ioFigures
		switch {
		case err != nil:
			if now.Sub(lastOK) > a.cfg.Loops.MetricsStaleAfter {
				changed = a.ioAdvisor.Stale(err.Error())
			}
			prev = ioReading{}
		default:
			lastOK = now
			cur := ioReading{at: now, disks: disks, reclaimed: reclaimed}
			if prev.disks != nil {
				figures = ioFiguresBetween(prev, cur, a.ioDisks)
				grow := now.Sub(lastGrow) >= a.cfg.Loops.SlowInterval
				if grow {
					lastGrow = now
				}
				changed = a.ioAdvisor.Observe(now, figures.samples, grow)
			}
			prev = cur
		}
		if perr == nil {
			changed = a.ioAdvisor.Pressure(now, pressure) || changed
		}
		lent := a.ioAdvisor.Lent()
		limits := ioLimits(lent)
		a.mu.Lock()
		shrunk := ioShrunk(a.ioLent, limits)
		if changed {
			kind := "grow"
			if shrunk {
				kind = "shrink"
			}
			a.actionLocked(kind, "io", ioChangeReason(lent))
		}
		a.ioLent = limits
		a.ioView = a.ioViewOf(lent, figures, pressure)
		a.mu.Unlock()
		if shrunk {
			// Not waiting for the slow loop: online work is hurting now.
			if err := a.reconcile(); err != nil {
				a.log.Error("cgroup settings failed", "err", err)
			}
		}
	}
}

// ioShrunk says some rate of next is below the same rate of prev.
func ioShrunk(prev, next []plugins.IOLimit) bool {
	for i := range next {
		if i >= len(prev) || prev[i].Device != next[i].Device {
			return true
		}
		p, n := prev[i], next[i]
		if n.ReadBps < p.ReadBps || n.WriteBps < p.WriteBps || n.ReadIOPS < p.ReadIOPS || n.WriteIOPS < p.WriteIOPS {
			return true
		}
	}
	return false
}

func ioChangeReason(lent []ioadvisor.Lent) string {
	parts := make([]string, len(lent))
	for i, l := range lent {
		parts[i] = fmt.Sprintf("disk %s lends %s (%s)", l.Disk.Name, ioRates(l.Rates), l.Rule)
	}
	return strings.Join(parts, "; ")
}

// ioViewOf is the IO dimension's state for status and metrics.
func (a *Agent) ioViewOf(lent []ioadvisor.Lent, f ioFigures, pressure float64) reporter.IO {
	v := reporter.IO{Pressure: pressure, PressureSource: a.ioPressureSource(), Disks: []reporter.IODisk{}}
	if a.ioWeight {
		v.Weight = "reclaimed 10, online 100"
	}
	for i, l := range lent {
		d := reporter.IODisk{Device: l.Disk.Device, Name: l.Disk.Name, Lent: ioRates(l.Rates), Capacity: ioRates(l.Disk.Capacity),
			Online: ioRates(l.Online), Reclaimed: ioRates(f.reclaimed[l.Disk.Device]), Rule: l.Rule,
			LatencyMs: float64(f.samples[l.Disk.Device].Latency) / float64(time.Millisecond)}
		if i < len(a.ioDisks) {
			d.Scheduler = a.ioDisks[i].scheduler
		}
		v.Disks = append(v.Disks, d)
	}
	return v
}
