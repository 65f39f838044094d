package arbiter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// DefaultOwnerLabel is the node label that says which queue owns a node.
const DefaultOwnerLabel = "tidalqos.io/queue"

// Policy is the lending policy: the tenant queues, the shared low-SLA queue and the lending
// rules. It is read from YAML by ParsePolicy (see docs/arbiter.md for the file format) and is
// immutable once parsed; a reload replaces it whole.
type Policy struct {
	// Source names where the policy came from (the file name); Digest is the SHA-256 of Raw.
	Source string
	Digest string
	// Raw is the YAML the policy was parsed from; the arbiter persists it so that a restart
	// with a broken file falls back to the last accepted policy.
	Raw []byte
	// OwnerLabel is the node label naming the queue that owns a node. A node owned by a queue
	// is never lent to that queue by a rule (it is the queue's already).
	OwnerLabel string
	// SharedQueue gets what a node can lend and no rule lends.
	SharedQueue string
	// Queues are the tenant queues, in file order.
	Queues []Queue
	// Rules are the lending rules, in file order.
	Rules []Rule

	queueIndex map[string]int
}

// Queue is a tenant queue.
type Queue struct {
	Name string
	// Weight divides a node's lendable capacity between rules competing for more than the
	// node can lend (in proportion to their queues' weights).
	Weight int
	// Guaranteed is what the queue is promised cluster-wide. While what it is lent elsewhere
	// falls short of it, its rules are served before others on a contended node.
	Guaranteed arbiterapi.Resources
}

// Rule lends an amount of each selected node's capacity to a queue during a daily window.
type Rule struct {
	Name  string
	Queue string
	// NodeSelector selects nodes whose labels equal every entry (empty: every node).
	NodeSelector map[string]string
	// Lend is the most the rule lends per node; a node lends less when it can lend less now.
	Lend   arbiterapi.Resources
	Window Window
	// MaxOnlineUtilization: the rule lends only while the node's online utilization is below
	// it (0: no condition).
	MaxOnlineUtilization float64
}

// Queue returns the queue named name.
func (p *Policy) Queue(name string) (Queue, bool) {
	i, ok := p.queueIndex[name]
	if !ok {
		return Queue{}, false
	}
	return p.Queues[i], true
}

// Selects reports whether the rule's node selector matches labels.
func (r *Rule) Selects(labels map[string]string) bool {
	for k, v := range r.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// LoadPolicy reads and parses the policy file at path.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return ParsePolicy(path, data)
}

// Limits on a policy.
const (
	maxQueues = 1000
	maxRules  = 10000
	maxWeight = 1000
)

// ParsePolicy parses and validates a policy. name (usually the file path) is used in
// messages. A policy is accepted whole or not at all: on error the Policy is nil and the error
// lists every problem, one per line, as "file:line: key: message".
func ParsePolicy(name string, data []byte) (*Policy, error) {
	root, err := parseRoot(name, data, "policy")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	p := &Policy{
		Source:     name,
		Digest:     hex.EncodeToString(sum[:]),
		Raw:        append([]byte(nil), data...),
		OwnerLabel: DefaultOwnerLabel,
		queueIndex: map[string]int{},
	}
	d := &yamlDoc{file: name}
	if root == nil {
		d.errorf(1, "sharedQueue", "missing: want the name of the shared low-SLA queue, such as \"best-effort\"")
		return nil, d.err()
	}
	var queueLines, ruleLines []int // line of each queue's and rule's name
	var ruleQueueLines []int
	d.mapping(root, "", 1, []field{
		{name: "ownerLabel", want: `a label key such as "tidalqos.io/queue"`, decode: func(v *yaml.Node, key string, line int) {
			if s, ok := d.str(v, key, line, `a label key such as "tidalqos.io/queue"`, func(s string) bool { return arbiterapi.CheckLabel(s, "") == "" }); ok {
				p.OwnerLabel = s
			}
		}},
		{name: "sharedQueue", required: true, want: `the name of the shared low-SLA queue, such as "best-effort"`, decode: func(v *yaml.Node, key string, line int) {
			if s, ok := d.str(v, key, line, queueNameWant, validQueueName); ok {
				p.SharedQueue = s
			}
		}},
		{name: "queues", want: "a list of queues", decode: func(v *yaml.Node, key string, line int) {
			d.list(v, key, line, "a list of queues, each with a name", func(item *yaml.Node, key string, line int) {
				if len(p.Queues) >= maxQueues {
					d.errorf(line, key, "too many queues: want at most %d", maxQueues)
					return
				}
				q, nameLine := d.queue(item, key, line)
				p.Queues = append(p.Queues, q)
				queueLines = append(queueLines, nameLine)
			})
		}},
		{name: "rules", want: "a list of lending rules", decode: func(v *yaml.Node, key string, line int) {
			d.list(v, key, line, "a list of lending rules", func(item *yaml.Node, key string, line int) {
				if len(p.Rules) >= maxRules {
					d.errorf(line, key, "too many rules: want at most %d", maxRules)
					return
				}
				r, nameLine, queueLine := d.rule(item, key, line)
				p.Rules = append(p.Rules, r)
				ruleLines = append(ruleLines, nameLine)
				ruleQueueLines = append(ruleQueueLines, queueLine)
			})
		}},
	})

	// Rules between entries.
	for i, q := range p.Queues {
		if q.Name == "" {
			continue // already reported
		}
		key := fmt.Sprintf("queues[%d].name", i)
		if first, dup := p.queueIndex[q.Name]; dup {
			d.errorf(queueLines[i], key, "%q is already queues[%d]: want unique queue names", q.Name, first)
			continue
		}
		if q.Name == p.SharedQueue {
			d.errorf(queueLines[i], key, "%q is the shared queue: the shared queue gets what no rule lends and is not listed under queues", q.Name)
			continue
		}
		p.queueIndex[q.Name] = i
	}
	ruleNames := map[string]int{}
	for i, r := range p.Rules {
		if r.Name != "" {
			if first, dup := ruleNames[r.Name]; dup {
				d.errorf(ruleLines[i], fmt.Sprintf("rules[%d].name", i), "%q is already rules[%d]: want unique rule names", r.Name, first)
			} else {
				ruleNames[r.Name] = i
			}
		}
		if r.Queue == "" {
			continue
		}
		key := fmt.Sprintf("rules[%d].queue", i)
		switch _, ok := p.queueIndex[r.Queue]; {
		case r.Queue == p.SharedQueue:
			d.errorf(ruleQueueLines[i], key, "%q is the shared queue, which gets what no rule lends: want one of the queues", r.Queue)
		case !ok:
			d.errorf(ruleQueueLines[i], key, "%q is not a queue: want one of %s", r.Queue, p.queueNames())
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return p, nil
}

const queueNameWant = `a queue name of 1..63 letters, digits, '-', '_', '.' (a valid label value), such as "queue-1"`

func validQueueName(s string) bool { return s != "" && arbiterapi.IsLabelValue(s) }

func (p *Policy) queueNames() string {
	if len(p.queueIndex) == 0 {
		return "(no queues are defined)"
	}
	var names []string
	for i, q := range p.Queues {
		if j, ok := p.queueIndex[q.Name]; ok && j == i {
			names = append(names, q.Name)
		}
	}
	return strings.Join(names, ", ")
}

// queue decodes one entry of queues; it returns the line of its name.
func (d *yamlDoc) queue(n *yaml.Node, key string, line int) (Queue, int) {
	q := Queue{Weight: 1}
	nameLine := line
	d.mapping(n, key, line, []field{
		{name: "name", required: true, want: queueNameWant, decode: func(v *yaml.Node, key string, line int) {
			nameLine = line
			q.Name, _ = d.str(v, key, line, queueNameWant, validQueueName)
		}},
		{name: "weight", want: fmt.Sprintf("an integer in 1..%d", maxWeight), decode: func(v *yaml.Node, key string, line int) {
			if w, ok := d.integer(v, key, line, fmt.Sprintf("an integer in 1..%d (default 1)", maxWeight), 1, maxWeight); ok {
				q.Weight = int(w)
			}
		}},
		{name: "guaranteed", want: "amounts", decode: func(v *yaml.Node, key string, line int) {
			q.Guaranteed = d.resources(v, key, line, false)
		}},
	})
	return q, nameLine
}

// rule decodes one entry of rules; it returns the lines of its name and queue.
func (d *yamlDoc) rule(n *yaml.Node, key string, line int) (Rule, int, int) {
	r := Rule{NodeSelector: map[string]string{}}
	nameLine, queueLine := line, line
	var window Window      // without its zone
	var loc *time.Location // the zone
	d.mapping(n, key, line, []field{
		{name: "name", required: true, want: "a rule name such as \"night-gpu\"", decode: func(v *yaml.Node, key string, line int) {
			nameLine = line
			r.Name, _ = d.str(v, key, line, "a rule name of 1..63 letters, digits, '-', '_', '.', such as \"night-gpu\"", validQueueName)
		}},
		{name: "queue", required: true, want: "the queue the rule lends to", decode: func(v *yaml.Node, key string, line int) {
			queueLine = line
			r.Queue, _ = d.str(v, key, line, queueNameWant, validQueueName)
		}},
		{name: "nodeSelector", want: "a mapping of label keys to values", decode: func(v *yaml.Node, key string, line int) {
			r.NodeSelector, _ = d.stringMap(v, key, line, "a mapping of label keys to values, such as {pool: gpu}", arbiterapi.CheckLabel)
		}},
		{name: "lend", required: true, want: "the amounts lent per node: milliCPU, memory, gpus", decode: func(v *yaml.Node, key string, line int) {
			r.Lend = d.resources(v, key, line, true)
		}},
		{name: "window", required: true, want: `a daily window "HH:MM-HH:MM" such as "22:00-08:00"`, decode: func(v *yaml.Node, key string, line int) {
			if s, ok := d.scalar(v, key, line, `a daily window "HH:MM-HH:MM" such as "22:00-08:00"`); ok {
				var err error
				if window, err = parseWindowText(s); err != nil {
					d.errorf(line, key, "%v", err)
				}
			}
		}},
		{name: "timeZone", required: true, want: `an IANA time zone such as "Europe/Berlin" or "UTC"`, decode: func(v *yaml.Node, key string, line int) {
			if s, ok := d.scalar(v, key, line, `an IANA time zone such as "Europe/Berlin" or "UTC"`); ok {
				var err error
				if loc, err = loadZone(s); err != nil {
					d.errorf(line, key, "%v", err)
				}
			}
		}},
		{name: "maxOnlineUtilization", want: "a number in (0, 1]", decode: func(v *yaml.Node, key string, line int) {
			r.MaxOnlineUtilization, _ = d.number(v, key, line, "a number in (0, 1]: lend only while the node's online utilization is below it", func(f float64) bool { return f > 0 && f <= 1 })
		}},
	})
	window.loc = loc
	r.Window = window
	return r, nameLine, queueLine
}

// resources decodes amounts {milliCPU, memory, gpus}; nonZero requires at least one above 0.
func (d *yamlDoc) resources(n *yaml.Node, key string, line int, nonZero bool) arbiterapi.Resources {
	var r arbiterapi.Resources
	before := len(d.errs)
	d.mapping(n, key, line, []field{
		{name: "milliCPU", want: "millicores", decode: func(v *yaml.Node, key string, line int) {
			r.MilliCPU, _ = d.integer(v, key, line, fmt.Sprintf("millicores, an integer in 0..%d, such as 8000 for 8 cores", arbiterapi.MaxMilliCPU), 0, arbiterapi.MaxMilliCPU)
		}},
		{name: "memory", want: "bytes", decode: func(v *yaml.Node, key string, line int) {
			r.MemoryBytes, _ = d.size(v, key, line, `bytes (at most 1024Ti): an integer, or a number with a suffix Ki, Mi, Gi, Ti (powers of 1024) or K, M, G, T (powers of 1000), such as "32Gi"`, arbiterapi.MaxMemoryBytes)
		}},
		{name: "gpus", want: "whole GPUs", decode: func(v *yaml.Node, key string, line int) {
			g, _ := d.integer(v, key, line, fmt.Sprintf("whole GPUs, an integer in 0..%d", arbiterapi.MaxGPUs), 0, arbiterapi.MaxGPUs)
			r.GPUs = int(g)
		}},
	})
	if nonZero && r.IsZero() && len(d.errs) == before {
		d.errorf(line, key, "lends nothing: want at least one of milliCPU, memory, gpus above 0")
	}
	return r
}
