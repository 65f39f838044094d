package arbiterapi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The handler survives any byte soup as a body.
func TestDecodeReportNeverPanics(t *testing.T) {
	inputs := []string{"", "null", "{}", `{"numa": [null]}`, `{"numa": [{}]}`, `{"capacity": null}`, `{"labels": null}`,
		`{"online": {"used": null}}`, `{"lendable": {"gpuUUIDs": [null]}}`, strings.Repeat("[", 10000), `{"time": 5}`, "\x00\xff"}
	for _, in := range inputs {
		r, err := DecodeReport(bytes.NewReader([]byte(in)))
		if err == nil {
			if verr := r.Validate(time.Now(), time.Minute); verr == nil {
				t.Errorf("%q accepted", in)
			}
		}
	}
}

// One report lists at most maxFieldErrors errors, then says how many more: a report of a
// megabyte could hold a quarter of a million bad entries, each answered twice.
func TestValidateListsAtMostAHundredErrors(t *testing.T) {
	uuids := make([]string, 500)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-%d", i)
	}
	r := Report{Node: "node-a", Time: time.Now(), Capacity: Resources{MilliCPU: 1000, GPUs: 500},
		NUMA: []NUMANode{{ID: 0, Capacity: Resources{MilliCPU: 1000, GPUs: 500}, Lendable: Lendable{GPUs: 500, GPUUUIDs: uuids}}}}
	var fe FieldErrors
	if err := r.Validate(time.Now(), 0); !errors.As(err, &fe) {
		t.Fatalf("500 GPUs on a NUMA node the node does not lend: %v", err)
	}
	if len(fe) != maxFieldErrors+1 || !strings.HasPrefix(fe[len(fe)-1].Msg, "and ") {
		t.Errorf("%d errors, the last %q: want %d and a count of the rest", len(fe), fe[len(fe)-1].Msg, maxFieldErrors)
	}
}
