package isolation

import "time"

// WaitingUrgent makes w behave as if an ApplyUrgent were waiting for its lock until done is
// called, so a test can see Apply hand over deterministically.
func WaitingUrgent(w *Writer) (done func()) {
	w.urgent.Add(1)
	return func() { w.urgent.Add(-1) }
}

// HoldRemoveTries makes w call pause, instead of sleeping, between the tries of a cgroup
// removal.
func HoldRemoveTries(w *Writer, pause func(time.Duration)) { w.pause = pause }
