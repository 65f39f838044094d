package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/plugins/cpu"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
	"github.com/tidalqos/tidal/sysadvisor/mechanism"
)

// mechanism is how reclaimed work is held to what is lent now. Callers hold a.mu. It runs
// on every pass and every runtime hook's decision, so it resolves without saying why.
func (a *Agent) mechanism() plugins.CPUMechanism {
	m, _ := a.resolveMechanismLocked(time.Now())
	return m
}

// mechanismStatusLocked is the mechanism in effect at now and why, for status.
func (a *Agent) mechanismStatusLocked(now time.Time) (mechanism, why string) {
	m, rule := a.resolveMechanismLocked(now)
	if m == plugins.MechanismCores {
		return string(m), a.mechChoice + "; " + coresStatus(a.pools)
	}
	if rule.kind == ruleNone {
		return string(m), a.mechChoice
	}
	return string(m), a.mechChoice + "; " + config.MechanismQuotaOnCut + ": " + rule.String()
}

// coresStatus says, per NUMA node, how the cores mechanism holds reclaimed work now.
func coresStatus(pools plugins.Pools) string {
	var parts []string
	for _, np := range pools {
		if np.Exclusive {
			parts = append(parts, fmt.Sprintf("numa %d: cores %s of their own, online work on %s", np.Node, np.Reclaimed, np.OnlineCPUs()))
		} else {
			parts = append(parts, fmt.Sprintf("numa %d: less than a core lent, held by the quota on %s beside online work", np.Node, np.Reclaimed))
		}
	}
	return strings.Join(parts, "; ")
}

// ruleKind names the rule of quota-on-cut that decided the mechanism.
type ruleKind int

const (
	ruleNone    ruleKind = iota // the mechanism is not quota-on-cut
	ruleMinimum                 // a NUMA node lends its minimum
	ruleLease                   // the arbiter's lease grants less than the plan
	ruleCut                     // a cut within cpu.quotaAfterCut
	ruleIdle                    // none of these: the idle class alone
)

// mechanismRule is the rule that held and its figures. It is a value, formatted only when
// status asks, so that resolving on the hot paths allocates nothing.
type mechanismRule struct {
	kind             ruleKind
	node             int
	granted, planned int64
	cut              time.Time
	hold             time.Duration
}

func (r mechanismRule) String() string {
	switch r.kind {
	case ruleMinimum:
		return fmt.Sprintf("quota: numa %d lends its minimum", r.node)
	case ruleLease:
		return fmt.Sprintf("quota: the arbiter's lease grants %dm, under the %dm planned", r.granted, r.planned)
	case ruleCut:
		return fmt.Sprintf("quota until %s, %s after the last cut (%s)",
			r.cut.Add(r.hold).Format("15:04:05.000"), r.hold, r.cut.Format("15:04:05.000"))
	case ruleIdle:
		return fmt.Sprintf("the idle class alone: no cut for %s", r.hold)
	}
	return ""
}

// resolveMechanismLocked turns cpu.mechanism quota-on-cut into the policy's mechanism at now:
// the quota while online work has just needed CPU back (a cut within cpu.quotaAfterCut),
// while lending is at its minimum on a NUMA node, or while the arbiter's lease holds lending
// under the plan; the idle class otherwise. rule says which rule held. Any other mechanism is
// itself, with rule ruleNone.
func (a *Agent) resolveMechanismLocked(now time.Time) (plugins.CPUMechanism, mechanismRule) {
	if a.mech != config.MechanismQuotaOnCut {
		return plugins.CPUMechanism(a.mech), mechanismRule{kind: ruleNone}
	}
	for _, np := range a.pools {
		if a.advisor.LendsMinimum(np.Node) {
			return plugins.MechanismQuota, mechanismRule{kind: ruleMinimum, node: np.Node}
		}
	}
	// A lease is a promise to the arbiter: the idle class would let reclaimed work use its
	// whole cpuset (ceil(lent) CPUs), more than the grant.
	if a.lease != nil {
		if granted, planned := a.lease.granted(now).MilliCPU, a.advisor.PlannedMilliCPU(); granted < planned {
			return plugins.MechanismQuota, mechanismRule{kind: ruleLease, granted: granted, planned: planned}
		}
	}
	hold := a.cfg.CPU.QuotaAfterCut
	if cut := a.advisor.LastCut(); !cut.IsZero() && now.Sub(cut) < hold {
		return plugins.MechanismQuota, mechanismRule{kind: ruleCut, cut: cut, hold: hold}
	}
	return plugins.MechanismIdle, mechanismRule{kind: ruleIdle, hold: hold}
}

// mechanismTie: with cpu.mechanism auto, a later candidate must lend this much more of the
// usage ceiling than an earlier one to be chosen over it (readings are noisy).
const mechanismTie = 0.05

// chooseMechanismLocked feeds the auto chooser this reading (harm, online work's run-queue
// wait over its baselines and its SLO probes' answers since the last pass, with the share of
// the usage ceiling the node lends; when there is something to lend and nothing else holds
// lending down) and switches the mechanism when a trial ends. It reports whether the
// mechanism changed.
func (a *Agent) chooseMechanismLocked(now time.Time, pools plugins.Pools, harm mechanism.Reading) bool {
	if a.chooser == nil {
		return false
	}
	plan := a.advisor.Plan().ReclaimedMilliCPU
	ctls := a.advisor.Controllers()
	var lent, ceiling int64
	informative := a.advisor.Primed()
	for _, np := range pools {
		// What online usage leaves, whatever the mechanism: cores' own ceiling, in whole
		// cores online work keeps at coreUtilization, is lower, and a share of it would not
		// compare with the others'.
		limit, _, _ := a.advisor.Ceilings(np.Node)
		pool := a.poolMilliLocked(np.Node)
		usage := min(pool-limit.PredictedMilliCPU, pool)
		if ctls[np.Node].State == advisor.StateBaseline {
			informative = false
		}
		if usage > min(a.cfg.CPU.MinReclaimedMilliCPU, pool) {
			lent, ceiling = lent+plan[np.Node], ceiling+usage
		}
	}
	if informative && ceiling > 0 {
		harm.LentShare = float64(lent) / float64(ceiling)
		a.chooser.Observe(harm)
	}
	m, changed, chose := a.chooser.Step(now)
	a.mechChoice = "auto: " + a.chooser.Reason()
	if !changed {
		if chose {
			// A choice that keeps the last trial's mechanism is still the decision of the
			// exploration, with the figures behind it.
			a.actionLocked("mechanism", "auto", fmt.Sprintf("reclaimed CPU mechanism stays %s (%s)", m, a.chooser.Reason()))
		}
		return false
	}
	a.actionLocked("mechanism", "auto", fmt.Sprintf("reclaimed CPU mechanism %s -> %s (%s)", a.mech, m, a.chooser.Reason()))
	a.setMechanismLocked(m)
	return true
}

// setMechanismLocked makes m the cpu.mechanism in effect. Under cores the advisor lends in
// whole cores: reclaimed work gets only cores online work does not run on.
func (a *Agent) setMechanismLocked(m string) {
	a.mech = m
	var core int64
	if m == string(plugins.MechanismCores) {
		core = cpu.CoreMilliCPU(a.topo)
	}
	a.advisor.LendWholeCores(core, a.cfg.CPU.CoreUtilization)
}
