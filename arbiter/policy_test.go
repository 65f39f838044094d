package arbiter

import (
	"strings"
	"testing"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// referencePolicy is the reference case: every night from 22:00 to 08:00, GPU nodes
// lend 8 cores, 32 GiB and 4 GPUs to queue-1.
const referencePolicy = `# tidal arbiter policy
sharedQueue: best-effort
queues:
  - name: queue-1
    weight: 3
    guaranteed: {milliCPU: 16000, memory: 64Gi, gpus: 8}
  - name: queue-2
rules:
  - name: night-gpu
    queue: queue-1
    nodeSelector: {pool: gpu}
    lend: {milliCPU: 8000, memory: 32Gi, gpus: 4}
    window: "22:00-08:00"
    timeZone: Europe/Berlin
    maxOnlineUtilization: 0.6
  - name: day-cpu
    queue: queue-2
    nodeSelector: {pool: cpu}
    lend:
      milliCPU: 2000
    window: "08:00-22:00"
    timeZone: UTC
`

func mustPolicy(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := ParsePolicy("policy.yaml", []byte(text))
	if err != nil {
		t.Fatalf("ParsePolicy:\n%v", err)
	}
	return p
}

func TestParsePolicy(t *testing.T) {
	p := mustPolicy(t, referencePolicy)
	if p.SharedQueue != "best-effort" || p.OwnerLabel != DefaultOwnerLabel {
		t.Errorf("shared %q owner label %q", p.SharedQueue, p.OwnerLabel)
	}
	if len(p.Queues) != 2 || p.Queues[0].Weight != 3 || p.Queues[1].Weight != 1 {
		t.Fatalf("queues = %+v", p.Queues)
	}
	if g := p.Queues[0].Guaranteed; g != (arbiterapi.Resources{MilliCPU: 16000, MemoryBytes: 64 << 30, GPUs: 8}) {
		t.Errorf("guaranteed = %+v", g)
	}
	if len(p.Rules) != 2 {
		t.Fatalf("rules = %+v", p.Rules)
	}
	r := p.Rules[0]
	if r.Name != "night-gpu" || r.Queue != "queue-1" || r.NodeSelector["pool"] != "gpu" ||
		r.Lend != (arbiterapi.Resources{MilliCPU: 8000, MemoryBytes: 32 << 30, GPUs: 4}) || r.Window.String() != "22:00-08:00" ||
		r.Window.Zone() != "Europe/Berlin" || r.MaxOnlineUtilization != 0.6 {
		t.Errorf("rule = %+v", r)
	}
	if p.Rules[1].Lend != (arbiterapi.Resources{MilliCPU: 2000}) || len(p.Rules[1].NodeSelector) != 1 {
		t.Errorf("rule 2 = %+v", p.Rules[1])
	}
	if len(p.Digest) != 64 || string(p.Raw) != referencePolicy {
		t.Error("digest or raw text not kept")
	}
	// timeZone before window works as well.
	q := mustPolicy(t, "sharedQueue: s\nqueues: [{name: q}]\nrules:\n- {name: r, queue: q, lend: {gpus: 1}, timeZone: Asia/Tokyo, window: \"01:00-02:00\"}\n")
	if q.Rules[0].Window.Zone() != "Asia/Tokyo" || q.Rules[0].Window.String() != "01:00-02:00" {
		t.Errorf("window = %v %v", q.Rules[0].Window, q.Rules[0].Window.Zone())
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want []string // each a line of the error, in order
	}{
		{"empty file", "", []string{`policy.yaml:1: sharedQueue: missing: want the name of the shared low-SLA queue, such as "best-effort"`}},
		{"syntax", "sharedQueue: a\nqueues: [\n", []string{"policy.yaml:3: invalid YAML: did not find expected node content"}},
		{"not a mapping", "- a\n", []string{"policy.yaml:1: got a list at top level: want a policy (a mapping)"}},
		{"two documents", "sharedQueue: a\n---\nsharedQueue: b\n", []string{"policy.yaml:2: more than one YAML document: want a single policy"}},
		{"unknown key with a hint", "sharedQueue: a\nrulez: []\n", []string{
			"policy.yaml:2: rulez: unknown key (did you mean rules?): want one of ownerLabel, sharedQueue, queues, rules"}},
		{"everything wrong at once", `sharedQueue: best-effort
ownerLabel: "bad label/"
queues:
  - name: queue-1
    weight: 0
  - name: queue-1
  - name: best-effort
  - {name: "no spaces"}
  - name: q3
    guaranteed: {memory: 12XB, gpus: -1}
rules:
  - name: r1
    queue: queue-9
    lend: {milliCPU: 1000}
    window: "25:00-08:00"
    timeZone: Mars/Base
  - name: r1
    queue: best-effort
    lend: {}
    window: "22:00-08:00"
    timeZone: UTC
    maxOnlineUtilization: 1.5
    nodeSelector: {"tidalqos.io/pool": "a b"}
  - name: r3
    queue: queue-1
    lend: {gpus: 1}
    window: "22:00-08:00"
    timezone: UTC
`, []string{
			`policy.yaml:2: ownerLabel: "bad label/" is not allowed: want a label key such as "tidalqos.io/queue"`,
			`policy.yaml:5: queues[0].weight: 0 is out of range: want an integer in 1..1000 (default 1)`,
			`policy.yaml:6: queues[1].name: "queue-1" is already queues[0]: want unique queue names`,
			`policy.yaml:7: queues[2].name: "best-effort" is the shared queue: the shared queue gets what no rule lends and is not listed under queues`,
			`policy.yaml:8: queues[3].name: "no spaces" is not allowed: want ` + queueNameWant,
			`policy.yaml:10: queues[4].guaranteed.memory: "12XB" is not a valid size: want bytes (at most 1024Ti)`,
			`policy.yaml:10: queues[4].guaranteed.gpus: -1 is out of range: want whole GPUs, an integer in 0..1024`,
			`policy.yaml:13: rules[0].queue: "queue-9" is not a queue: want one of queue-1, q3`,
			`policy.yaml:15: rules[0].window: "25:00-08:00": start "25:00" is not a time of day: want 00:00..23:59`,
			`policy.yaml:16: rules[0].timeZone: "Mars/Base" is not a known time zone: want an IANA name such as "Europe/Berlin" or "UTC"`,
			`policy.yaml:17: rules[1].name: "r1" is already rules[0]: want unique rule names`,
			`policy.yaml:18: rules[1].queue: "best-effort" is the shared queue, which gets what no rule lends: want one of the queues`,
			`policy.yaml:19: rules[1].lend: lends nothing: want at least one of milliCPU, memory, gpus above 0`,
			`policy.yaml:22: rules[1].maxOnlineUtilization: 1.5 is out of range: want a number in (0, 1]`,
			`policy.yaml:23: rules[1].nodeSelector.tidalqos.io/pool: value "a b" is not a valid label value`,
			`policy.yaml:24: rules[2].timeZone: missing: want an IANA time zone such as "Europe/Berlin" or "UTC"`,
			`policy.yaml:28: rules[2].timezone: unknown key (did you mean timeZone?)`,
		}},
		{"missing keys of a rule", "sharedQueue: s\nqueues: [{name: q}]\nrules:\n  - name: r\n", []string{
			"policy.yaml:4: rules[0].queue: missing",
			"policy.yaml:4: rules[0].lend: missing",
			"policy.yaml:4: rules[0].window: missing",
			"policy.yaml:4: rules[0].timeZone: missing",
		}},
		{"duplicate key", "sharedQueue: a\nsharedQueue: b\n", []string{"policy.yaml:2: sharedQueue: duplicate key: first set at line 1"}},
		{"wrong shapes", "sharedQueue: [a]\nqueues: {name: q}\nrules: 3\n", []string{
			"policy.yaml:1: sharedQueue: got a list: want " + queueNameWant,
			"policy.yaml:2: queues: got a mapping: want a list of queues, each with a name",
			"policy.yaml:3: rules: got 3: want a list of lending rules",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy("policy.yaml", []byte(tc.text))
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if p != nil {
				t.Error("a policy came back with the error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i := range min(len(lines), len(tc.want)) {
				if !strings.HasPrefix(lines[i], tc.want[i]) {
					t.Errorf("problem %d:\n got %s\nwant %s", i, lines[i], tc.want[i])
				}
			}
		})
	}
}
