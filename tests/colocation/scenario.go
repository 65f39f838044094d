package main

import (
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/plugins"
)

// scenario is one way of running the online service and the offline work on this machine.
type scenario struct {
	Name string
	// What runs: the online service (with its load generator) and/or the offline work.
	Online, Offline bool
	// Tidal: the agent places both, through `tidal run`. Otherwise the benchmark does, in
	// plain cgroups of its own, and offline sets the knobs of the offline work's parent cgroup.
	Tidal   bool
	offline func(all cpuset.CPUSet) plugins.Settings
	// online, when set, places the online service instead of all CPUs at default shares.
	online func(all cpuset.CPUSet) plugins.Settings
	// oracle, when set, moves the online service and the offline work at the start of each
	// phase of the day, which it knows ahead as no agent can: the settings of the run's
	// cgroups for that phase, written in order.
	oracle func(all cpuset.CPUSet, phase string) [][]plugins.Cgroup
	// About says in a few words what the scenario is, for the results.
	About string
	// agentBeside: the agent runs, with its -day-workloads, beside a no-agent scenario that
	// places the online service and the offline work itself: what the agent's own activity
	// costs them, apart from where it puts them.
	agentBeside bool
	// agentConfig is the agent YAML of a tidal variant (a CPU mechanism other than the default).
	agentConfig string
	// onlyOwnWorkloads: the agent manages only the run's own workloads, not -day-workloads.
	onlyOwnWorkloads bool
	// dayWorkloads: a no-agent scenario runs the -day-workloads light workloads too, in cgroups
	// of its own (a tidal scenario's agent manages them unless onlyOwnWorkloads).
	dayWorkloads bool
	// agentShares, when set, is the cpu.shares of the agent's own cgroup (1024 otherwise).
	agentShares uint64
	// stopAgent: when the agent is stopped (SIGSTOP), to be resumed only to end: its cgroups
	// stay as it left them, with nothing of it running (and nothing to answer a poll: a
	// stopped agent is not polled).
	stopAgent agentStop
	// unpolled: the benchmark does not poll the agent's status (twice a second otherwise,
	// for what it lends and its actions), so the instrument's own cost can be told apart.
	unpolled bool
	// sloProbe: the online service is started with an SLO probe (-probe-latency).
	sloProbe bool
	// sloMetric: the online service is started with its latency histogram as an SLO metric
	// (its p99 held to -probe-latency); only for servers that export one.
	sloMetric bool
	// baselineBuild: the agent and its `tidal run`s are the -tidal-baseline binary.
	baselineBuild bool
	// diagnostic: not run by default, only when -scenarios names it (it takes a tidal
	// scenario apart, and is not a way to colocate that tidal must beat).
	diagnostic bool
}

// Default cgroup v1 CPU shares, and the loadgen's: high enough that the measuring side never
// waits behind the measured one.
const (
	defaultShares = 1024
	loadgenShares = 10240
	// besteffortShares is what kubelet gives its BestEffort parent cgroup.
	besteffortShares = 2
)

// Pieces of agent YAML for the diagnostics that slow the agent's periodic work down: its fast
// path reading every 500 ms (windows and all), its slow loop and its interference meter
// stepping every 10 s (each line under loops:), its disk IO loop off.
const (
	slowTickLoops  = "  fastInterval: 500ms\n  fastWindow: 500ms\n  fastBurstWindow: 0s\n"
	slowPassLoops  = "  slowInterval: 10s\n  metricsStaleAfter: 30s\n"
	slowMeterAgent = "interference:\n  interval: 10s\n  baselineFor: 30s\n"
	noIOAgent      = "io:\n  enabled: false\n"
)

// agentStop is when a diagnostic scenario stops its agent.
type agentStop int

const (
	stopNever agentStop = iota
	// stopAfterAdmitting: once it has admitted its -day-workloads, before it places the
	// online service and the offline work (they then run as the scenario places them).
	stopAfterAdmitting
	// stopAtDay: as the day begins, once it has placed the online service and the offline
	// work and lent through the warm-up.
	stopAtDay
)

// scenarios in the order they run each round.
var scenarios = []scenario{
	{Name: "online-alone", Online: true, About: "the online service alone (latency baseline)"},
	{Name: "offline-alone", Offline: true, offline: plain, About: "the offline work alone (throughput baseline)"},
	{Name: "naive", Online: true, Offline: true, offline: plain, About: "offline in plain cgroups, default shares, no limits"},
	{Name: "besteffort", Online: true, Offline: true, About: "offline under a parent with cpu.shares 2 (Kubernetes BestEffort)",
		offline: besteffortOffline},
	{Name: "idle", Online: true, Offline: true, About: "offline under a parent with cpu.idle 1 (the kernel's idle class), no agent",
		offline: idleOffline},
	{Name: "besteffort-beside-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true,
		About:   "besteffort, with the agent running beside it managing its -day-workloads idle workloads only: what the agent's own activity costs online work, apart from where the agent places it",
		offline: besteffortOffline},
	{Name: "besteffort-beside-slow-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true,
		agentConfig: "loops:\n" + slowPassLoops + slowMeterAgent,
		About:       "besteffort-beside-agent whose slow loop and interference meter step every 10 s (1 s and 500 ms by default): whether their periodic work is what the agent's activity costs online work",
		offline:     besteffortOffline},
	{Name: "besteffort-beside-slow-tick-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true,
		agentConfig: "loops:\n" + slowTickLoops,
		About:       "besteffort-beside-agent whose fast path reads online work's counters every 500 ms (10 ms by default): whether its tick is what the agent's activity costs online work",
		offline:     besteffortOffline},
	{Name: "besteffort-beside-agent-without-io", Online: true, Offline: true, diagnostic: true, agentBeside: true,
		agentConfig: noIOAgent,
		About:       "besteffort-beside-agent with its disk IO loop off (every 500 ms by default): whether that loop is what the agent's activity costs online work",
		offline:     besteffortOffline},
	{Name: "besteffort-beside-quiet-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true, unpolled: true,
		agentConfig: "loops:\n" + slowTickLoops + slowPassLoops + slowMeterAgent + noIOAgent,
		About:       "besteffort-beside-agent with all its periodic work slowed or off (fast path every 500 ms, slow loop and meter every 10 s, no IO loop, not polled): whether what is left of it (the Go runtime, its memory) costs online work",
		offline:     besteffortOffline},
	{Name: "besteffort-beside-agent-unpolled", Online: true, Offline: true, diagnostic: true, agentBeside: true, unpolled: true,
		About:   "besteffort-beside-agent that the benchmark does not poll (its status twice a second otherwise): whether the instrument is what the agent's presence costs online work",
		offline: besteffortOffline},
	{Name: "besteffort-beside-low-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true, agentShares: 16,
		About:   "besteffort-beside-agent with the agent's own cgroup at cpu.shares 16 (1024 otherwise): whether online work waits behind the agent's CPU bursts",
		offline: besteffortOffline},
	{Name: "besteffort-beside-stopped-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true, stopAgent: stopAfterAdmitting,
		About:   "besteffort-beside-agent with the agent stopped (SIGSTOP) once its workloads are admitted: its cgroups and processes there, nothing of it running; whether its activity or its tree is what costs online work",
		offline: besteffortOffline},
	{Name: "besteffort-beside-bare-agent", Online: true, Offline: true, diagnostic: true, agentBeside: true, onlyOwnWorkloads: true,
		About:   "besteffort-beside-agent with no workloads for the agent to manage (not its -day-workloads): whether their number is what the agent's activity costs online work",
		offline: besteffortOffline},
	{Name: "besteffort-day-workloads", Online: true, Offline: true, diagnostic: true, dayWorkloads: true,
		About:   "besteffort beside the -day-workloads light workloads a tidal run's agent manages, each in a cgroup of its own (half beside the online service, half under the offline parent), no agent: what their presence costs, apart from the agent",
		offline: besteffortOffline},
	{Name: "idle-day-workloads", Online: true, Offline: true, diagnostic: true, dayWorkloads: true,
		About:   "idle beside the -day-workloads light workloads, placed as besteffort-day-workloads places them, no agent",
		offline: idleOffline},
	{Name: "static", Online: true, Offline: true, About: "offline pinned to a fixed half of the CPUs (online unpinned)",
		offline: upperHalfOffline},
	{Name: "static-idle", Online: true, Offline: true, diagnostic: true,
		About: "offline under cpu.idle 1, pinned to the upper half of the CPUs, no agent: tidal's reclaimed pool while it lends under a CPU, without its quota",
		offline: func(all cpuset.CPUSet) plugins.Settings {
			return plugins.Settings{CPUs: upperHalf(all), CPUIdle: plugins.On}
		}},
	{Name: "static-idle-quota", Online: true, Offline: true, diagnostic: true,
		About: "as static-idle with a fixed CFS quota of 400m, no agent: tidal's quota mechanism lending 400m, without the agent",
		offline: func(all cpuset.CPUSet) plugins.Settings {
			return plugins.Settings{CPUs: upperHalf(all), CPUIdle: plugins.On, CPUQuota: 400}
		}},
	{Name: "online-alone-lower", Online: true, diagnostic: true,
		About:  "the online service alone, pinned to the lower half of the CPUs: split's latency baseline",
		online: lowerHalfOnline},
	{Name: "split", Online: true, Offline: true, diagnostic: true,
		About:  "online pinned to the lower half of the CPUs, offline (default shares) to the upper half, no agent: separate cores, sharing only what lies beyond them",
		online: lowerHalfOnline, offline: upperHalfOffline},
	{Name: "split-idle", Online: true, Offline: true, diagnostic: true,
		About:  "as split with the offline work under cpu.idle 1: tidal's cores mechanism lending one core, without the agent",
		online: lowerHalfOnline, offline: func(all cpuset.CPUSet) plugins.Settings {
			return plugins.Settings{CPUs: upperHalf(all), CPUIdle: plugins.On}
		}},
	{Name: "split-oracle", Online: true, Offline: true, diagnostic: true,
		About:  "split in the valleys; from the ramp through the spike the online service on every CPU and the offline work held to 10m, switched on the day's own schedule, no agent: lending only cores online work does not run on, with foresight",
		online: lowerHalfOnline, offline: func(all cpuset.CPUSet) plugins.Settings {
			s := upperHalfOffline(all)
			s.CPUQuota = plugins.Unlimited // the oracle sets and lifts it
			return s
		},
		oracle: splitOracle},
	{Name: "tidal", Online: true, Offline: true, Tidal: true, About: "tidal agent with its defaults: online shared tier, offline reclaimed tier"},
	{Name: "tidal-absolute", Online: true, Offline: true, Tidal: true,
		agentConfig: "interference:\n  shared:\n    runQueueWaitOverBaseline: 0\n",
		About:       "tidal with absolute run-queue wait targets only (no baseline of the online service's own wait)"},
	{Name: "tidal-auto", Online: true, Offline: true, Tidal: true,
		agentConfig: "cpu:\n  mechanism: auto\n  autoMechanism:\n    trial: 5s\n    rounds: 2\n",
		About:       "tidal with cpu.mechanism auto, 5 s trials of its default candidates (cores, quota-on-cut, cores, quota-on-cut), then the choice for the rest of the day"},
	{Name: "tidal-peak-limits", Online: true, Offline: true, Tidal: true, agentConfig: "cpu:\n  limitWindow: 30s\n",
		About: "tidal whose limits follow online peak over the 30 s cpu.peakWindow, as before cpu.limitWindow (5 s)"},
	{Name: "tidal-no-burst", Online: true, Offline: true, Tidal: true, agentConfig: "loops:\n  fastBurstWindow: 0s\n",
		About: "tidal without the fast path's burst window (loops.fastBurstWindow 0): spikes seen over the 30 ms window only"},
	{Name: "tidal-low-agent", Online: true, Offline: true, Tidal: true, diagnostic: true, agentShares: 51,
		About: "tidal with the agent's own cgroup at cpu.shares 51, as the DaemonSet's 50m CPU request gives it in Kubernetes (1024 otherwise, as a service of its own under systemd): whether online work waits behind the agent's slow pass"},
	{Name: "tidal-stopped-agent", Online: true, Offline: true, Tidal: true, diagnostic: true, stopAgent: stopAtDay,
		About: "tidal with the agent stopped (SIGSTOP) when the day begins: online and offline work in its tiers as it left them after the warm-up, nothing of it running; whether its layout or its activity is what costs online work"},
	{Name: "tidal-baseline-build", Online: true, Offline: true, Tidal: true, diagnostic: true, baselineBuild: true,
		About: "tidal with its defaults, run by the -tidal-baseline binary: a change to the agent against the build before it, in one interleaved run"},
	{Name: "tidal-own-only", Online: true, Offline: true, Tidal: true, onlyOwnWorkloads: true,
		About: "tidal managing only the run's own workloads (not the -day-workloads idle ones)"},
	{Name: "tidal-idle", Online: true, Offline: true, Tidal: true, agentConfig: "cpu:\n  mechanism: idle\n",
		About: "tidal with cpu.mechanism idle: the idle class on the reclaimed pool's CPUs, no CFS quota"},
	{Name: "tidal-quota", Online: true, Offline: true, Tidal: true, agentConfig: "cpu:\n  mechanism: quota\n",
		About: "tidal with cpu.mechanism quota: the idle class and a CFS quota of what is lent at all times (the default before quota-on-cut)"},
	{Name: "tidal-shares", Online: true, Offline: true, Tidal: true, agentConfig: "cpu:\n  mechanism: shares\n",
		About: "tidal with cpu.mechanism shares: cpu.shares 2 instead of the idle class"},
	{Name: "tidal-cores", Online: true, Offline: true, Tidal: true, agentConfig: "cpu:\n  mechanism: cores\n  minReclaimedMilliCPU: 10\n",
		About: "tidal with cpu.mechanism cores and cpu.minReclaimedMilliCPU 10, as docs/config.md advises: whole cores taken out of online work's cpusets, handed back on a cut (split-oracle without the foresight)"},
	{Name: "tidal-grow-500", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  growStepMilliCPU: 500\n",
		About:       "tidal growing lending by up to 500m a step (cpu.growStepMilliCPU; 250m by default)"},
	{Name: "tidal-limit-2s", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  limitWindow: 2s\n",
		About:       "tidal whose limits follow online peak over 2 s (cpu.limitWindow; 5 s by default)"},
	{Name: "tidal-quota-on-cut-5s", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  quotaAfterCut: 5s\n",
		About:       "tidal whose quota-on-cut mechanism keeps the quota for 5 s after each cut (cpu.quotaAfterCut; 1 s by default)"},
	{Name: "tidal-no-wait-target", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: noWaitTarget,
		About:       "tidal without the shared tier's run-queue wait target: lending follows online usage alone, the fast path still cuts on spikes"},
	{Name: "tidal-long-hold", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "interference:\n  holdAfterFirstCut: 10s\n",
		About:       "tidal whose every interference cut holds lending for 10 s (interference.holdAfterFirstCut = holdAfterCut), the default before 2.5 s"},
	{Name: "tidal-pool-hold", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  poolShrinkAfter: 10s\n",
		About:       "tidal whose reclaimed pool keeps its CPUs for 10 s after lending fell within fewer (cpu.poolShrinkAfter); the quota takes the time back at once"},
	{Name: "tidal-slo", Online: true, Offline: true, Tidal: true, diagnostic: true, sloProbe: true,
		About: "tidal with an SLO probe on the online service: the agent asks what the load asks (a GET of its page, or its Redis command) every interference.interval and cuts lending while the median of its last 5 answers is over -probe-latency"},
	{Name: "tidal-auto-slo", Online: true, Offline: true, Tidal: true, diagnostic: true, sloProbe: true,
		agentConfig: "cpu:\n  mechanism: auto\n  autoMechanism:\n    trial: 5s\n    rounds: 2\n",
		About:       "tidal-auto with the SLO probe of tidal-slo, which auto weighs instead of the run-queue wait"},
	{Name: "tidal-slo-no-wait", Online: true, Offline: true, Tidal: true, diagnostic: true, sloProbe: true,
		agentConfig: noWaitTarget,
		About:       "tidal-slo without the shared tier's run-queue wait target: the SLO probe, not the wait, judges online work"},
	{Name: "tidal-slo-metric", Online: true, Offline: true, Tidal: true, diagnostic: true, sloMetric: true,
		About: "tidal with the online service's own latency histogram as its SLO signal: the agent reads its /metrics every interference.interval and cuts lending while the median of the last 5 reads' p99 (of every request served between two reads) is over -probe-latency (go server only)"},
	{Name: "tidal-slo-metric-no-wait", Online: true, Offline: true, Tidal: true, diagnostic: true, sloMetric: true,
		agentConfig: noWaitTarget,
		About:       "tidal-slo-metric without the shared tier's run-queue wait target: the service's tail, not the wait, judges online work"},
	{Name: "tidal-auto-shares", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  mechanism: auto\n  autoMechanism:\n    candidates: cores,quota-on-cut,shares\n    trial: 8s\n    rounds: 2\n",
		About:       "tidal-auto with shares among its candidates (cores, quota-on-cut, shares: two 8 s trials each, interleaved; run it with a -day of 2m or more), then the choice for the rest of the day"},
	{Name: "tidal-wait-1", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "interference:\n  waitReadings: 1\n",
		About:       "tidal judging each run-queue wait reading alone (interference.waitReadings 1, the behaviour before 2026-12-07; 3 by default: the median of the last three)"},
	{Name: "tidal-on-online", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  reclaimedCPUs: online\n",
		About:       "tidal with reclaimed work on every CPU online work runs on (cpu.reclaimedCPUs online, what the default auto chooses where each core has one thread): the idle class, and the quota after a cut, hold it to what is lent"},
	{Name: "tidal-pool", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  reclaimedCPUs: pool\n",
		About:       "tidal with reclaimed work on the reclaimed pool, the ceil(lent) shared CPUs farthest from system ones (cpu.reclaimedCPUs pool, what the default auto chooses where cores have SMT siblings, and the default before 2026-12-07)"},
	{Name: "tidal-shares-on-online", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: sharesOnOnline,
		About:       "tidal-on-online under cpu.mechanism shares: reclaimed work at cpu.shares 2 on every online CPU, as besteffort places it, with nothing but eviction to take CPU back: what the agent costs where it places work as Kubernetes does"},
	{Name: "tidal-shares-on-online-slow-meter", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: sharesOnOnline + slowMeterAgent,
		About:       "tidal-shares-on-online whose interference meter reads online work's threads every 10 s (500 ms by default): whether reading the online service's schedstat is what the agent placing it costs"},
	{Name: "tidal-shares-on-online-slow-tick", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: sharesOnOnline + "loops:\n" + slowTickLoops,
		About:       "tidal-shares-on-online whose fast path reads the online tier's CPU time every 500 ms (10 ms by default): whether the tick over a tier holding the online service is what the agent placing it costs"},
	{Name: "tidal-shares-no-wait", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  mechanism: shares\n" + noWaitTarget,
		About:       "tidal-shares without the shared tier's run-queue wait target: cpu.shares 2 on what online usage leaves, cut only by the fast path"},
	{Name: "tidal-slow-tick-no-wait", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "loops:\n  fastInterval: 50ms\n  fastWindow: 150ms\n  fastBurstWindow: 50ms\n" + noWaitTarget,
		About:       "tidal-no-wait-target whose fast path samples every 50 ms over 150 ms (loops.fastInterval 10 ms over 30 ms by default): does the agent's own 100 Hz tick cost online work?"},
	{Name: "tidal-pool-hold-3s", Online: true, Offline: true, Tidal: true, diagnostic: true,
		agentConfig: "cpu:\n  poolShrinkAfter: 3s\n",
		About:       "as tidal-pool-hold with a 3 s hold"},
}

// sharesOnOnline places reclaimed work as besteffort does: cpu.shares 2 on every online CPU.
const sharesOnOnline = "cpu:\n  mechanism: shares\n  reclaimedCPUs: online\n"

// noWaitTarget turns off the shared tier's run-queue wait target.
const noWaitTarget = "interference:\n  shared:\n    runQueueWait: 0\n    runQueueWaitOverBaseline: 0\n"

// noAgentBaselines are the no-agent ways to colocate that tidal must beat.
var noAgentBaselines = []string{"besteffort", "idle", "static"}

func plain(all cpuset.CPUSet) plugins.Settings {
	return plugins.Settings{CPUs: all, CPUShares: defaultShares}
}

// upperHalf is the upper half of the CPUs (CPU 1 of 0-1); all of them if there is only one.
func upperHalf(all cpuset.CPUSet) cpuset.CPUSet {
	l := all.List()
	return cpuset.New(l[len(l)/2:]...)
}

// scenarioNames are the names of the scenarios keep accepts, in the order they run.
func scenarioNames(keep func(scenario) bool) []string {
	var names []string
	for _, s := range scenarios {
		if keep(s) {
			names = append(names, s.Name)
		}
	}
	return names
}

// Filters for scenarioNames.
func runByDefault(s scenario) bool { return !s.diagnostic }
func diagnostic(s scenario) bool   { return s.diagnostic }
func anyScenario(scenario) bool    { return true }

func scenarioByName(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// besteffortOffline places the offline work as a Kubernetes BestEffort pod: every CPU, at
// cpu.shares 2.
func besteffortOffline(all cpuset.CPUSet) plugins.Settings {
	return plugins.Settings{CPUs: all, CPUShares: besteffortShares}
}

// idleOffline places the offline work in the kernel's idle class, on every CPU.
func idleOffline(all cpuset.CPUSet) plugins.Settings {
	return plugins.Settings{CPUs: all, CPUIdle: plugins.On}
}

// upperHalfOffline places the offline work on the upper half of the CPUs at default shares.
func upperHalfOffline(all cpuset.CPUSet) plugins.Settings {
	return plugins.Settings{CPUs: upperHalf(all), CPUShares: defaultShares}
}

// lowerHalfOnline places the online service on the CPUs upperHalf leaves out (all of them if
// there is only one), at default shares.
func lowerHalfOnline(all cpuset.CPUSet) plugins.Settings {
	cpus := all.Difference(upperHalf(all))
	if cpus.IsEmpty() {
		cpus = all
	}
	return plugins.Settings{CPUs: cpus, CPUShares: defaultShares}
}

// oracleHeldMilliCPU is what split-oracle leaves the offline work while online work has every
// CPU: the least CFS quota the kernel takes (1 ms a 100 ms period).
const oracleHeldMilliCPU = 10

// splitOracle is split-oracle's schedule: in the valleys the online service on the lower half
// of the CPUs and the offline work unlimited on the upper half; otherwise the offline work held
// first, then the online service widened to every CPU (and back the other way round).
func splitOracle(all cpuset.CPUSet, phase string) [][]plugins.Cgroup {
	online := func(cpus cpuset.CPUSet) []plugins.Cgroup {
		return []plugins.Cgroup{{Path: "online", Settings: plugins.Settings{CPUs: cpus}}}
	}
	offline := func(quota int64) []plugins.Cgroup {
		return []plugins.Cgroup{{Path: "offline", Settings: plugins.Settings{CPUQuota: quota}}}
	}
	if phase == "valley" || phase == "valley2" {
		return [][]plugins.Cgroup{online(lowerHalfOnline(all).CPUs), offline(plugins.Unlimited)}
	}
	return [][]plugins.Cgroup{offline(oracleHeldMilliCPU), online(all)}
}
