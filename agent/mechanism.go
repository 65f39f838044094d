package agent

import (
	"fmt"
	"time"

	"github.com/tidalqos/tidal/agent/config"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/sysadvisor/advisor"
)

// mechanism is how reclaimed work is held to what is lent now. Callers hold a.mu. It runs
// on every pass and every runtime hook's decision, so it resolves without saying why.
func (a *Agent) mechanism() plugins.CPUMechanism {
	m, _ := a.resolveMechanismLocked(time.Now())
	return m
}

// mechanismStatusLocked is the mechanism in effect at now and why, for status.
func (a *Agent) mechanismStatusLocked(now time.Time) (mechanism, why string) {
	m, resolved := a.resolveMechanismLocked(now)
	if resolved == nil {
		return string(m), a.mechChoice
	}
	return string(m), a.mechChoice + "; " + config.MechanismQuotaOnCut + ": " + resolved()
}

// resolveMechanismLocked turns cpu.mechanism quota-on-cut into the policy's mechanism at now:
// the quota while online work has just needed CPU back (a cut within cpu.quotaAfterCut),
// while lending is at its minimum on a NUMA node, or while the arbiter's lease holds lending
// under the plan; the idle class otherwise. resolved says which rule held, formatted only
// when status asks. Any other mechanism is itself, with resolved nil.
func (a *Agent) resolveMechanismLocked(now time.Time) (m plugins.CPUMechanism, resolved func() string) {
	if a.mech != config.MechanismQuotaOnCut {
		return plugins.CPUMechanism(a.mech), nil
	}
	for _, np := range a.pools {
		if node := np.Node; a.advisor.LendsMinimum(node) {
			return plugins.MechanismQuota, func() string { return fmt.Sprintf("quota: numa %d lends its minimum", node) }
		}
	}
	// A lease is a promise to the arbiter: the idle class would let reclaimed work use its
	// whole cpuset (ceil(lent) CPUs), more than the grant.
	if a.lease != nil {
		if granted, planned := a.lease.granted(now).MilliCPU, a.advisor.PlannedMilliCPU(); granted < planned {
			return plugins.MechanismQuota, func() string {
				return fmt.Sprintf("quota: the arbiter's lease grants %dm, under the %dm planned", granted, planned)
			}
		}
	}
	hold := a.cfg.CPU.QuotaAfterCut
	if cut := a.advisor.LastCut(); !cut.IsZero() && now.Sub(cut) < hold {
		return plugins.MechanismQuota, func() string {
			return fmt.Sprintf("quota until %s, %s after the last cut (%s)",
				cut.Add(hold).Format("15:04:05.000"), hold, cut.Format("15:04:05.000"))
		}
	}
	return plugins.MechanismIdle, func() string { return fmt.Sprintf("the idle class alone: no cut for %s", hold) }
}

// mechanismTie: with cpu.mechanism auto, a later candidate must lend this much more of the
// usage ceiling than an earlier one to be chosen over it (readings are noisy).
const mechanismTie = 0.05

// chooseMechanismLocked feeds the auto chooser this reading (the share of the usage ceiling
// the node lends, when there is something to lend and nothing else holds lending down) and
// switches the mechanism when a trial ends. It reports whether the mechanism changed.
func (a *Agent) chooseMechanismLocked(now time.Time, pools plugins.Pools) bool {
	if a.chooser == nil {
		return false
	}
	plan := a.advisor.Plan().ReclaimedMilliCPU
	ctls := a.advisor.Controllers()
	var lent, ceiling int64
	informative := a.advisor.Primed()
	for _, np := range pools {
		limit, _, _ := a.advisor.Ceilings(np.Node)
		usage := limit.MilliCPU
		if ctls[np.Node].State == advisor.StateBaseline {
			informative = false
		}
		if usage > min(a.cfg.CPU.MinReclaimedMilliCPU, a.poolMilliLocked(np.Node)) {
			lent, ceiling = lent+plan[np.Node], ceiling+usage
		}
	}
	if informative && ceiling > 0 {
		a.chooser.Observe(float64(lent) / float64(ceiling))
	}
	m, changed := a.chooser.Step(now)
	a.mechChoice = "auto: " + a.chooser.Reason()
	if !changed {
		return false
	}
	a.actionLocked("mechanism", "auto", fmt.Sprintf("reclaimed CPU mechanism %s -> %s (%s)", a.mech, m, a.chooser.Reason()))
	a.mech = m
	return true
}
