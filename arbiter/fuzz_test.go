package arbiter

// Fuzz targets for what the arbiter reads from outside: agents' report bodies, the policy and
// config YAML, and its own state file. scripts/fuzz.sh runs each for a bounded time.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"

	"go.yaml.in/yaml/v3"
)

// deployedConfigMaps returns the data of deploy/arbiter.yaml's ConfigMaps (real seeds).
func deployedConfigMaps(tb testing.TB) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(filepath.Join("..", "deploy", "arbiter.yaml"))
	if err != nil {
		return out
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var obj struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if dec.Decode(&obj) != nil {
			break
		}
		for k, v := range obj.Data {
			out[k] = v
		}
	}
	return out
}

// FuzzDecodeReport: any POST /v1/reports body decodes or is refused with messages; a decoded
// report encodes and decodes back the same; a report that validates gets a lease that never
// lends more than the node said it can, nor a GPU it did not offer, nor one GPU twice.
func FuzzDecodeReport(f *testing.F) {
	now := time.Date(2026, 3, 29, 23, 0, 0, 0, time.UTC)
	r := gpuNode("node-a", map[string]string{"pool": "gpu"})
	r.Time = now
	good, _ := json.Marshal(r)
	f.Add(good)
	r.NUMA = []arbiterapi.NUMANode{{ID: 0, Capacity: arbiterapi.Resources{MilliCPU: 32000, MemoryBytes: 128 * gi, GPUs: 4}, Online: arbiterapi.Online{Used: arbiterapi.Usage{MilliCPU: 10000, MemoryBytes: 50 * gi}, Predicted: arbiterapi.Usage{MilliCPU: 15000, MemoryBytes: 60 * gi}, Utilization: 0.3},
		Lendable: arbiterapi.Lendable{MilliCPU: 8000, MemoryBytes: 32 * gi, GPUs: 4, GPUUUIDs: []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}}}}
	withNUMA, _ := json.Marshal(r)
	f.Add(withNUMA)
	f.Add(good[:len(good)/2])
	f.Add(append(append([]byte{}, good...), []byte(" {}")...))
	f.Add([]byte(`{"node":"n","time":"yesterday","capacity":{"milliCPU":-1,"memoryBytes":1,"gpus":0},"online":{},"lendable":null,"extra":1}`))
	f.Add([]byte(`{"numa":[{"id":1e400}]}`))
	f.Add([]byte(``))
	f.Add([]byte(`[]`))

	var policy *Policy
	if p, err := ParsePolicy("policy.yaml", []byte(referencePolicy)); err == nil {
		policy = p
	} else {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := arbiterapi.DecodeReport(bytes.NewReader(body))
		if err != nil {
			checkFieldErrors(t, err)
			return
		}
		enc, err := json.Marshal(rep)
		if err != nil {
			t.Fatalf("encode a decoded report: %v", err)
		}
		back, err := arbiterapi.DecodeReport(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("decode an encoded report %s: %v", enc, err)
		}
		if enc2, _ := json.Marshal(back); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed the report:\n%s\n%s", enc, enc2)
		}
		if err := rep.Validate(rep.Time, time.Minute); err != nil {
			checkFieldErrors(t, err)
			return
		}
		lease := decide(policy, rep.Time, rep, nil)
		if lease.Node != rep.Node || lease.Expires.Before(lease.Issued) {
			t.Fatalf("lease %+v for node %q", lease, rep.Node)
		}
		var cpu, mem int64
		var gpus []string
		for _, g := range lease.Grants {
			if g.MilliCPU < 0 || g.MemoryBytes < 0 {
				t.Fatalf("negative grant %+v", g)
			}
			cpu, mem = cpu+g.MilliCPU, mem+g.MemoryBytes
			gpus = append(gpus, g.GPUs...)
		}
		if cpu > rep.Lendable.MilliCPU || mem > rep.Lendable.MemoryBytes || len(gpus) > rep.Lendable.GPUs {
			t.Fatalf("lends %dm, %d bytes, %d GPUs; the node lends %+v", cpu, mem, len(gpus), rep.Lendable)
		}
		slices.Sort(gpus)
		if len(slices.Compact(slices.Clone(gpus))) != len(gpus) {
			t.Fatalf("a GPU granted twice: %v", gpus)
		}
		for _, g := range gpus {
			if !slices.Contains(rep.Lendable.GPUUUIDs, g) {
				t.Fatalf("GPU %q granted but not offered (%v)", g, rep.Lendable.GPUUUIDs)
			}
		}
	})
}

// checkFieldErrors: a refusal is FieldErrors (what the API answers with), each with a message.
func checkFieldErrors(t *testing.T, err error) {
	t.Helper()
	var fe arbiterapi.FieldErrors
	if !errors.As(err, &fe) || len(fe) == 0 {
		t.Fatalf("error %T %v: want FieldErrors", err, err)
	}
	for _, e := range fe {
		if strings.TrimSpace(e.Msg) == "" {
			t.Fatalf("empty message in %#v", fe)
		}
	}
}

// FuzzParsePolicy: any policy YAML is accepted whole, or refused with every problem as
// "file:line: ..."; an accepted policy parses again from its own Raw the same, and its rules
// name queues it has.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(referencePolicy))
	if p, ok := deployedConfigMaps(f)[PolicyConfigMapKey]; ok {
		f.Add([]byte(p))
	}
	for _, s := range []string{
		"", "sharedQueue: best-effort\n", "sharedQueue: x\nqueues: [{name: x}]\n",
		"sharedQueue: be\nrules:\n  - {name: r, queue: nope, lend: {milliCPU: 1}, window: \"25:00-01:00\"}\n",
		"sharedQueue: be\nqueues: [{name: q, weight: 0}]\nrules: [{name: r, queue: q, lend: {memory: 1.5Gi}, window: \"00:00-00:00\", timeZone: Mars/Base}]\n",
		"sharedQueue: &a be\nqueues: [{name: *a}]\n", "- a\n", "sharedQueue: be\n---\nx: 1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy("policy.yaml", data)
		if err != nil {
			if p != nil {
				t.Fatal("policy with an error")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "policy.yaml") {
					t.Fatalf("problem does not name the file: %q in\n%v", line, err)
				}
			}
			return
		}
		if p.SharedQueue == "" {
			t.Fatal("accepted a policy without a shared queue")
		}
		for _, r := range p.Rules {
			if _, ok := p.Queue(r.Queue); !ok {
				t.Fatalf("rule %q lends to unknown queue %q", r.Name, r.Queue)
			}
			if r.Lend.MilliCPU < 0 || r.Lend.MemoryBytes < 0 || r.Lend.GPUs < 0 {
				t.Fatalf("rule %q lends %+v", r.Name, r.Lend)
			}
		}
		again, err := ParsePolicy("policy.yaml", p.Raw)
		if err != nil || again.Digest != p.Digest || len(again.Rules) != len(p.Rules) || len(again.Queues) != len(p.Queues) {
			t.Fatalf("reparse of Raw: %v", err)
		}
	})
}

// FuzzParseConfig: any arbiter config YAML is accepted or refused with problems naming the
// file; accepted values are within the documented bounds.
func FuzzParseConfig(f *testing.F) {
	if c, ok := deployedConfigMaps(f)["arbiter.yaml"]; ok {
		f.Add([]byte(c))
	}
	for _, s := range []string{
		"", "listenAddress: 0.0.0.0:9999\nleaseTTL: 45s\nnodeTimeout: 10m\nmaxReportBytes: 2Mi\nlogLevel: debug\n",
		"listen: x\nleaseTTL: 30\nnodeTimeout: 10s\ntlsCertFile: /c\nlogLevel: loud\nmaxReportBytes: 1K\n",
		"mode: kubernetes\n", "mode: kubernetes\nstateDir: /s\nkubernetes:\n  namespace: a.b\n  leaseName: \"\"\n",
		"maxReportBytes: 9999999999Ti\n", "leaseTTL: -1s\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("arbiter.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "arbiter.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c.LeaseTTL <= 0 || c.NodeTimeout < c.LeaseTTL || c.MaxReportBytes <= 0 {
			t.Fatalf("accepted config out of bounds: leaseTTL %v nodeTimeout %v maxReportBytes %d", c.LeaseTTL, c.NodeTimeout, c.MaxReportBytes)
		}
	})
}

// FuzzStateFile: any bytes in the arbiter's state file load or give an error naming the file
// (the arbiter then refuses to start over silently); what loads saves and loads back.
func FuzzStateFile(f *testing.F) {
	seed := &State{Version: StateVersion, SavedAt: time.Unix(1000, 0).UTC(),
		Policy: &SavedPolicy{Source: "policy.yaml", YAML: referencePolicy, Accepted: time.Unix(900, 0).UTC()},
		Leases: []SavedLease{{Received: time.Unix(990, 0).UTC(), Lease: arbiterapi.Lease{Node: "node-a", Generation: 7, Issued: time.Unix(990, 0).UTC(),
			Expires: time.Unix(1020, 0).UTC(), Grants: []arbiterapi.Grant{{Queue: "queue-1", Rule: "night-gpu", MilliCPU: 8000, MemoryBytes: gi, GPUs: []string{"GPU-0"}, Until: time.Unix(1020, 0).UTC()}}}}}}
	dir := f.TempDir()
	st, err := NewFileStore(dir)
	if err != nil {
		f.Fatal(err)
	}
	if err := st.Save(seed); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(st.Path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add([]byte(`{"version":2,"leases":[]}`))
	f.Add([]byte(`{"version":1,"leases":null}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := NewFileStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.Path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load()
		if err != nil {
			if !strings.Contains(err.Error(), s.Path) && !strings.HasPrefix(err.Error(), "state") {
				t.Fatalf("error does not say which file: %v", err)
			}
			return
		}
		if got == nil || got.Version != StateVersion {
			t.Fatalf("loaded %+v", got)
		}
		if err := s.Save(got); err != nil {
			t.Fatalf("save what loaded: %v", err)
		}
		again, err := s.Load()
		if err != nil {
			t.Fatalf("load what was saved: %v", err)
		}
		if got.Leases == nil {
			got.Leases = []SavedLease{} // null and [] are the same: no leases
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(again)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the state:\n%s\n%s", a, b)
		}
	})
}
