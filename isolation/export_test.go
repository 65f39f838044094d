package isolation

// WaitingUrgent makes w behave as if an ApplyUrgent were waiting for its lock until done is
// called, so a test can see Apply hand over deterministically.
func WaitingUrgent(w *Writer) (done func()) {
	w.urgent.Add(1)
	return func() { w.urgent.Add(-1) }
}
