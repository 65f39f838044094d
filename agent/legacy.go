package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"

	"github.com/tidalqos/tidal/agent/state"
	"github.com/tidalqos/tidal/plugins"
	"github.com/tidalqos/tidal/qos"
)

// cgroupMove is a reclaimed workload found in the tier's old place under the root, whose
// processes go to its cgroup in the tier's new place (plugins.TierPath).
type cgroupMove struct{ from, to string }

// maxMoveRounds bounds how often a move rereads the old cgroup for processes forked meanwhile.
const maxMoveRounds = 10

// adoptLegacyReclaimed adopts the reclaimed workloads an older agent left in the tier's old
// place ("tidal/reclaimed/NAME") as workloads of the new one ("tidal-reclaimed/NAME"). Their
// processes move once the new cgroups carry the tier's limits (moveLegacyLocked, after the
// first full pass): until then the old tier's limits, as the older agent left them, hold them.
func (a *Agent) adoptLegacyReclaimed(byPath map[string]plugins.Workload) ([]state.Record, error) {
	root := a.cfg.Cgroup.Root
	found, err := a.scanTier(plugins.LegacyReclaimedPath(root), qos.Reclaimed, byPath)
	if err != nil {
		return nil, err
	}
	var adopted []state.Record
	for _, r := range found {
		from := r.Cgroup
		to := plugins.WorkloadPath(root, qos.Reclaimed, path.Base(from))
		if a.layout.Exists(to) {
			a.log.Warn("cannot move a workload from the reclaimed tier's old place: its new cgroup is taken; left unmanaged",
				"cgroup", from, "new", to)
			continue
		}
		r.Cgroup = to
		adopted = append(adopted, r)
		a.moves = append(a.moves, cgroupMove{from: from, to: to})
		a.log.Info("adopting a workload from the reclaimed tier's old place", "cgroup", from, "new", to)
	}
	if len(a.moves) == 0 {
		a.removeLegacyTier()
	}
	return adopted, nil
}

// moveLegacyLocked moves the processes of adopted workloads into their new cgroups and removes
// the old ones, and the old tier once it is empty. A move that fails is tried again after the
// next full pass. The caller holds reconciling.
func (a *Agent) moveLegacyLocked() {
	var left []cgroupMove
	for _, m := range a.moves {
		if err := a.moveProcs(m); err != nil {
			a.log.Warn("cannot move a workload from the reclaimed tier's old place; trying again", "cgroup", m.from, "new", m.to, "err", err)
			left = append(left, m)
			continue
		}
		a.log.Info("moved a workload from the reclaimed tier's old place", "cgroup", m.from, "new", m.to)
	}
	a.moves = left
	if len(left) == 0 {
		a.removeLegacyTier()
	}
}

// removeLegacyTier removes the reclaimed tier's old cgroup once no workload is left in it.
func (a *Agent) removeLegacyTier() {
	old := plugins.LegacyReclaimedPath(a.cfg.Cgroup.Root)
	if names, err := a.layout.Children(old); err == nil && len(names) == 0 {
		if err := a.writer.Remove(old); err != nil {
			a.log.Warn("cannot remove the reclaimed tier's old cgroup", "cgroup", old, "err", err)
		}
	}
}

// moveProcs moves every process of m.from into m.to, rereading for processes forked meanwhile,
// then removes m.from.
func (a *Agent) moveProcs(m cgroupMove) error {
	for range maxMoveRounds {
		pids, err := a.layout.Procs(m.from, true)
		if err != nil {
			return fmt.Errorf("read %s: %w", m.from, err)
		}
		if len(pids) == 0 {
			return a.writer.Remove(m.from)
		}
		var errs []error
		for _, pid := range pids {
			if err := a.writer.Attach(m.to, pid); err != nil && a.alive(pid) {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s still gains processes after %d rounds", m.from, maxMoveRounds)
}

// alive says whether process pid is still there: one that exited cannot move, nor needs to.
func (a *Agent) alive(pid int) bool {
	_, err := os.Stat(filepath.Join(a.procDir, strconv.Itoa(pid)))
	return err == nil
}
