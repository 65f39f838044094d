package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// ReliabilityOutEnv names the folder where fault cases append what they measured
// (faults.jsonl), for docs/reliability.md (scripts/reliability.sh sets it).
const ReliabilityOutEnv = "TIDAL_RELIABILITY_OUT"

// Outcome is one fault case's line in faults.jsonl.
type Outcome struct {
	Test     string   `json:"test"`
	Fault    string   `json:"fault"`
	Measured []string `json:"measured"`
	Passed   bool     `json:"passed"`
	Seconds  float64  `json:"seconds"`
}

var outcomesMu sync.Mutex

// Record keeps what a fault case measures; with $TIDAL_RELIABILITY_OUT set it is appended to
// faults.jsonl there when the case ends, with its result.
func Record(t testing.TB, fault string) *Outcome {
	o := &Outcome{Test: t.Name(), Fault: fault}
	start := time.Now()
	t.Cleanup(func() {
		o.Passed, o.Seconds = !t.Failed(), time.Since(start).Round(100*time.Millisecond).Seconds()
		if dir := os.Getenv(ReliabilityOutEnv); dir != "" {
			if err := AppendOutcomes(dir, *o); err != nil {
				t.Errorf("record: %v", err)
			}
		}
	})
	return o
}

// Add logs one measured figure and keeps it.
func (o *Outcome) Add(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	o.Measured = append(o.Measured, msg)
}

// AppendOutcomes appends outcomes to dir/faults.jsonl.
func AppendOutcomes(dir string, outcomes ...Outcome) error {
	outcomesMu.Lock()
	defer outcomesMu.Unlock()
	f, err := os.OpenFile(filepath.Join(dir, "faults.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, o := range outcomes {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
