package config

import (
	"slices"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// problem is a value that Validate rejects.
type problem struct {
	key     string
	msg     string
	related []string // keys the rule depends on
}

// problems checks every value against its rule, in schema order.
func (c Config) problems() []problem {
	var out []problem
	var walk func(prefix string, entries []*entry)
	walk = func(prefix string, entries []*entry) {
		for _, e := range entries {
			key := joinKey(prefix, e.key)
			if e.kind == kindSection {
				walk(key, e.children)
				continue
			}
			if e.ok == nil || e.ok(&c) {
				continue
			}
			verb := "is out of range"
			if e.kind == kindString || e.kind == kindCPUSet {
				verb = "is not allowed"
			}
			out = append(out, problem{
				key:     key,
				msg:     formatValue(e, &c) + " " + verb + ": want " + e.wantFor(&c),
				related: e.related,
			})
		}
	}
	walk("", schema)

	// A rule between keys says nothing useful when a key it depends on is
	// itself wrong: report only that key.
	bad := map[string]bool{}
	for _, p := range out {
		bad[p.key] = true
	}
	return slices.DeleteFunc(out, func(p problem) bool { return dependsOn(p, bad) })
}

func dependsOn(p problem, keys map[string]bool) bool {
	for _, k := range p.related {
		if keys[k] {
			return true
		}
	}
	return false
}

// Validate checks every value and the rules between values (such as
// loops.fastInterval < loops.slowInterval). It returns nil or one *Error per
// problem, joined with errors.Join. Parse already calls it.
func (c Config) Validate() error {
	ps := c.problems()
	if len(ps) == 0 {
		return nil
	}
	errs := make([]*Error, len(ps))
	for i, p := range ps {
		errs[i] = &Error{Key: p.key, Msg: p.msg}
	}
	return yamlconf.JoinErrors(errs)
}
