package arbiterapi

import (
	"bytes"
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
