package arbiterapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// DecodeReport reads one JSON report from body. Unknown fields, missing fields, wrong types
// and anything after the report are errors; each names its field (FieldErrors). It does not
// check values: call Report.Validate.
//
// Numbers and objects are decoded into pointers first, so that a missing field is told from a
// zero one.
func DecodeReport(body io.Reader) (Report, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var w wireReport
	if err := dec.Decode(&w); err != nil {
		return Report{}, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Report{}, FieldErrors{{Msg: "unexpected data after the report: want one JSON object"}}
	}
	var c checker
	r := w.report(&c)
	if len(c.errs) > 0 {
		return Report{}, c.result()
	}
	return r, nil
}

// jsonError turns a decoding error into a FieldErrors that names the field where it can.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return FieldErrors{{Msg: "empty body: want a JSON report"}}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return FieldErrors{{Msg: "the JSON ends too early: want a complete JSON report"}}
	case errors.As(err, &syntax):
		return FieldErrors{{Msg: fmt.Sprintf("invalid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))}}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return FieldErrors{{Field: field, Msg: fmt.Sprintf("got a JSON %s: want %s", typ.Value, jsonWant(typ.Type.Kind().String()))}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return FieldErrors{{Field: strings.Trim(name, `"`), Msg: "unknown field"}}
	default:
		return err // such as *http.MaxBytesError: the caller handles it
	}
}

func jsonWant(kind string) string {
	switch kind {
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	case "ptr":
		return "a value of another type"
	}
	return "another type"
}

// The wire types mirror Report with pointers, so that absent fields can be reported.
type (
	wireReport struct {
		Node     *string           `json:"node"`
		Labels   map[string]string `json:"labels"`
		Time     *string           `json:"time"`
		Capacity *wireResources    `json:"capacity"`
		Online   *wireOnline       `json:"online"`
		Lendable *wireLendable     `json:"lendable"`
		NUMA     []wireNUMA        `json:"numa"`
	}
	wireResources struct {
		MilliCPU    *int64 `json:"milliCPU"`
		MemoryBytes *int64 `json:"memoryBytes"`
		GPUs        *int64 `json:"gpus"`
	}
	wireUsage struct {
		MilliCPU    *int64 `json:"milliCPU"`
		MemoryBytes *int64 `json:"memoryBytes"`
	}
	wireOnline struct {
		Used        *wireUsage `json:"used"`
		Predicted   *wireUsage `json:"predicted"`
		Utilization *float64   `json:"utilization"`
	}
	wireLendable struct {
		MilliCPU    *int64   `json:"milliCPU"`
		MemoryBytes *int64   `json:"memoryBytes"`
		GPUs        *int64   `json:"gpus"`
		GPUUUIDs    []string `json:"gpuUUIDs"`
	}
	wireNUMA struct {
		ID       *int64         `json:"id"`
		Capacity *wireResources `json:"capacity"`
		Online   *wireOnline    `json:"online"`
		Lendable *wireLendable  `json:"lendable"`
	}
)

func (w *wireReport) report(c *checker) Report {
	r := Report{Labels: w.Labels}
	if need(c, "node", w.Node, "the node's name") {
		r.Node = *w.Node
	}
	if need(c, "time", w.Time, "an RFC 3339 time") {
		t, err := time.Parse(time.RFC3339Nano, *w.Time)
		if err != nil {
			c.addf("time", "%q is not an RFC 3339 time such as \"2026-03-29T22:00:00Z\"", yamlconf.Clip(*w.Time))
		}
		r.Time = t
	}
	r.Capacity = w.Capacity.resources(c, "capacity")
	r.Online = w.Online.online(c, "online")
	r.Lendable = w.Lendable.lendable(c, "lendable")
	for i, n := range w.NUMA {
		p := fmt.Sprintf("numa[%d]", i)
		var id int64
		if need(c, p+".id", n.ID, "the NUMA node's ID") {
			id = *n.ID
		}
		r.NUMA = append(r.NUMA, NUMANode{
			ID:       int(id),
			Capacity: n.Capacity.resources(c, p+".capacity"),
			Online:   n.Online.online(c, p+".online"),
			Lendable: n.Lendable.lendable(c, p+".lendable"),
		})
	}
	return r
}

// need reports whether p is set, adding "missing" for field when it is not.
func need[T any](c *checker, field string, p *T, want string) bool {
	if p == nil {
		c.addf(field, "missing: want %s", want)
		return false
	}
	return true
}

// num returns *p, or 0 after reporting it missing.
func num[T int64 | float64](c *checker, field string, p *T, want string) T {
	if !need(c, field, p, want) {
		return 0
	}
	return *p
}

func (w *wireResources) resources(c *checker, p string) Resources {
	if !need(c, p, w, "an object with milliCPU, memoryBytes, gpus") {
		return Resources{}
	}
	return Resources{
		MilliCPU:    num(c, p+".milliCPU", w.MilliCPU, "millicores"),
		MemoryBytes: num(c, p+".memoryBytes", w.MemoryBytes, "bytes"),
		GPUs:        int(num(c, p+".gpus", w.GPUs, "whole GPUs")),
	}
}

func (w *wireUsage) usage(c *checker, p string) Usage {
	if !need(c, p, w, "an object with milliCPU, memoryBytes") {
		return Usage{}
	}
	return Usage{
		MilliCPU:    num(c, p+".milliCPU", w.MilliCPU, "millicores"),
		MemoryBytes: num(c, p+".memoryBytes", w.MemoryBytes, "bytes"),
	}
}

func (w *wireOnline) online(c *checker, p string) Online {
	if !need(c, p, w, "an object with used, predicted, utilization") {
		return Online{}
	}
	return Online{
		Used:        w.Used.usage(c, p+".used"),
		Predicted:   w.Predicted.usage(c, p+".predicted"),
		Utilization: num(c, p+".utilization", w.Utilization, "a number in 0..1"),
	}
}

func (w *wireLendable) lendable(c *checker, p string) Lendable {
	if !need(c, p, w, "an object with milliCPU, memoryBytes, gpus, gpuUUIDs") {
		return Lendable{}
	}
	return Lendable{
		MilliCPU:    num(c, p+".milliCPU", w.MilliCPU, "millicores"),
		MemoryBytes: num(c, p+".memoryBytes", w.MemoryBytes, "bytes"),
		GPUs:        int(num(c, p+".gpus", w.GPUs, "whole GPUs")),
		GPUUUIDs:    w.GPUUUIDs,
	}
}
