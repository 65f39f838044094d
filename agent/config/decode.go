package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// decoder applies a YAML mapping onto a Config, collecting every problem.
type decoder struct {
	file   string
	errs   []*Error
	lines  map[string]int  // key path -> line of the key in the file
	failed map[string]bool // key paths already reported
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
	d.failed[key] = true
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping applies the keys of n (a mapping node) described by entries.
func (d *decoder) mapping(n *yaml.Node, prefix string, entries []*entry, c *Config) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		keyNode, v := n.Content[i], yamlconf.ResolveAlias(n.Content[i+1])
		line := keyNode.Line
		k := yamlconf.ResolveAlias(keyNode)
		name := yamlconf.KeyName(k)
		p := joinKey(prefix, name)
		var e *entry
		if k.Kind == yaml.ScalarNode && !yamlconf.IsNull(k) {
			for _, cand := range entries {
				if cand.key == name {
					e = cand
					break
				}
			}
		}
		if e == nil {
			hint := ""
			if name == "<<" {
				hint = " (YAML merge keys are not supported)"
			} else if section, rest, ok := strings.Cut(name, "."); ok && nested(section, entries) {
				hint = fmt.Sprintf(" (a dotted key is not a path: write %s: on its own line and %s: indented below it)", section, rest)
			} else if s := suggest(name, entries); s != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			d.errorf(line, p, "unknown key%s: want one of %s", hint, keyList(entries))
			continue
		}
		if first, dup := seen[name]; dup {
			d.errorf(line, p, "duplicate key: first set at line %d", first)
			continue
		}
		seen[name] = line
		d.lines[p] = line
		if e.kind == kindSection {
			if yamlconf.IsNull(v) {
				continue // "cpu:" with nothing below keeps the defaults
			}
			if v.Kind != yaml.MappingNode {
				d.errorf(line, p, "got %s: want a mapping with keys %s", yamlconf.DescribeNode(v), keyList(e.children))
				continue
			}
			d.mapping(v, p, e.children, c)
			continue
		}
		if e.kind == kindIODevices {
			d.ioDevices(v, line, p, c)
			continue
		}
		d.leaf(v, line, p, e, c)
	}
}

// leaf decodes one value into its field.
func (d *decoder) leaf(v *yaml.Node, line int, key string, e *entry, c *Config) {
	if yamlconf.IsNull(v) {
		d.errorf(line, key, "missing value: want %s", e.want)
		return
	}
	if v.Kind != yaml.ScalarNode {
		d.errorf(line, key, "got %s: want %s", yamlconf.DescribeNode(v), e.want)
		return
	}
	tag := v.ShortTag()
	switch e.kind {
	case kindString:
		*e.ptr(c).(*string) = v.Value
	case kindInt:
		var n int64
		if tag != "!!int" || v.Decode(&n) != nil {
			d.errorf(line, key, "%s is not an integer: want %s", yamlconf.DescribeNode(v), e.want)
			return
		}
		switch p := e.ptr(c).(type) {
		case *int64:
			*p = n
		case *int:
			if int64(int(n)) != n {
				d.errorf(line, key, "%s is out of range: want %s", yamlconf.DescribeNode(v), e.want)
				return
			}
			*p = int(n)
		}
	case kindFloat:
		var f float64
		if (tag != "!!int" && tag != "!!float") || v.Decode(&f) != nil {
			d.errorf(line, key, "%s is not a number: want %s", yamlconf.DescribeNode(v), e.want)
			return
		}
		*e.ptr(c).(*float64) = f
	case kindBool:
		var b bool
		if tag != "!!bool" || v.Decode(&b) != nil {
			d.errorf(line, key, "%s is not a boolean: want %s", yamlconf.DescribeNode(v), e.want)
			return
		}
		*e.ptr(c).(*bool) = b
	case kindDuration:
		dur, err := time.ParseDuration(strings.TrimSpace(v.Value))
		if err != nil {
			hint := ""
			if tag == "!!int" || tag == "!!float" {
				hint = " (a unit is required)"
			}
			d.errorf(line, key, "%s is not a duration%s: want %s", yamlconf.DescribeNode(v), hint, e.want)
			return
		}
		*e.ptr(c).(*time.Duration) = dur
	case kindSize:
		var n int64
		switch tag {
		case "!!int":
			if v.Decode(&n) != nil {
				d.errorf(line, key, "%s is not a valid size (too large): want %s", yamlconf.DescribeNode(v), e.want)
				return
			}
		case "!!str":
			var reason string
			if n, reason = yamlconf.ParseSizeReason(v.Value); reason != "" {
				d.errorf(line, key, "%s is not a valid size (%s): want %s", yamlconf.DescribeNode(v), reason, e.want)
				return
			}
		default:
			d.errorf(line, key, "%s is not a valid size: want %s", yamlconf.DescribeNode(v), e.want)
			return
		}
		*e.ptr(c).(*int64) = n
	case kindCPUSet:
		set, reason := parseCPUList(v.Value)
		if reason != "" {
			d.errorf(line, key, "%s is not a valid CPU list (%s): want %s", yamlconf.DescribeNode(v), reason, e.want)
			return
		}
		*e.ptr(c).(*cpuset.CPUSet) = set
	}
}
