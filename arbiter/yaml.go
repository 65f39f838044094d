package arbiter

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Error is one problem in a file the arbiter reads (the policy, the tokens file, its own
// config): where it is and what is wrong, in the same format as the agent's config (both use
// internal/yamlconf). Parsers return one Error per problem, joined with errors.Join, one per
// line, sorted by line.
type Error = yamlconf.Error

// yamlDoc decodes one YAML file by hand, node by node, so that every problem carries its line
// and key path and all problems are reported together.
type yamlDoc struct {
	file string
	errs []*Error
}

func (d *yamlDoc) errorf(line int, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// err returns nil or every problem, sorted by line (problems without a line last).
func (d *yamlDoc) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	return yamlconf.JoinErrors(d.errs)
}

// field is one key of a YAML mapping: its name, whether it must be there, and how its value is
// decoded. want says in words what the value may be.
type field struct {
	name     string
	required bool
	want     string
	decode   func(v *yaml.Node, key string, line int)
}

// mapping decodes the mapping n field by field. Unknown and duplicate keys are errors; so are
// required keys that are missing (reported at line, the line of the mapping's own key).
func (d *yamlDoc) mapping(n *yaml.Node, prefix string, line int, fields []field) {
	n = yamlconf.ResolveAlias(n)
	if yamlconf.IsNull(n) {
		n = &yaml.Node{Kind: yaml.MappingNode}
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(line, prefix, "got %s: want a mapping with keys %s", yamlconf.DescribeNode(n), fieldList(fields))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlconf.ResolveAlias(n.Content[i]), yamlconf.ResolveAlias(n.Content[i+1])
		name := yamlconf.KeyName(k)
		key := joinKey(prefix, name)
		var f *field
		for j := range fields {
			if k.Kind == yaml.ScalarNode && fields[j].name == name {
				f = &fields[j]
				break
			}
		}
		if f == nil {
			hint := ""
			if name == "<<" {
				hint = " (YAML merge keys are not supported)"
			} else if s := suggest(name, fields); s != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			d.errorf(k.Line, key, "unknown key%s: want one of %s", hint, fieldList(fields))
			continue
		}
		if first, dup := seen[name]; dup {
			d.errorf(k.Line, key, "duplicate key: first set at line %d", first)
			continue
		}
		seen[name] = k.Line
		f.decode(v, key, k.Line)
	}
	for _, f := range fields {
		if _, ok := seen[f.name]; f.required && !ok {
			d.errorf(line, joinKey(prefix, f.name), "missing: want %s", f.want)
		}
	}
}

// list decodes a sequence, calling each with the item's key ("rules[2]") and line.
func (d *yamlDoc) list(v *yaml.Node, key string, line int, want string, each func(item *yaml.Node, key string, line int)) {
	if yamlconf.IsNull(v) {
		return
	}
	if v.Kind != yaml.SequenceNode {
		d.errorf(line, key, "got %s: want %s", yamlconf.DescribeNode(v), want)
		return
	}
	for i, item := range v.Content {
		item = yamlconf.ResolveAlias(item)
		each(item, fmt.Sprintf("%s[%d]", key, i), item.Line)
	}
}

// scalar returns v's text, or reports that it is missing or not a scalar.
func (d *yamlDoc) scalar(v *yaml.Node, key string, line int, want string) (string, bool) {
	if yamlconf.IsNull(v) {
		d.errorf(line, key, "missing value: want %s", want)
		return "", false
	}
	if v.Kind != yaml.ScalarNode {
		d.errorf(line, key, "got %s: want %s", yamlconf.DescribeNode(v), want)
		return "", false
	}
	return v.Value, true
}

// str decodes a string checked by ok (nil: any non-empty string).
func (d *yamlDoc) str(v *yaml.Node, key string, line int, want string, ok func(string) bool) (string, bool) {
	s, good := d.scalar(v, key, line, want)
	if !good {
		return "", false
	}
	if ok == nil {
		ok = func(s string) bool { return s != "" }
	}
	if !ok(s) {
		d.errorf(line, key, "%s is not allowed: want %s", yamlconf.DescribeNode(v), want)
		return "", false
	}
	return s, true
}

// integer decodes an integer in [lo, hi].
func (d *yamlDoc) integer(v *yaml.Node, key string, line int, want string, lo, hi int64) (int64, bool) {
	if _, good := d.scalar(v, key, line, want); !good {
		return 0, false
	}
	var n int64
	if v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		d.errorf(line, key, "%s is not an integer: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	if n < lo || n > hi {
		d.errorf(line, key, "%s is out of range: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	return n, true
}

// number decodes a number checked by ok.
func (d *yamlDoc) number(v *yaml.Node, key string, line int, want string, ok func(float64) bool) (float64, bool) {
	if _, good := d.scalar(v, key, line, want); !good {
		return 0, false
	}
	var f float64
	if tag := v.ShortTag(); (tag != "!!int" && tag != "!!float") || v.Decode(&f) != nil {
		d.errorf(line, key, "%s is not a number: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	if !ok(f) {
		d.errorf(line, key, "%s is out of range: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	return f, true
}

// size decodes bytes: an integer or a string such as "32Gi" (yamlconf.ParseSize), at most hi.
func (d *yamlDoc) size(v *yaml.Node, key string, line int, want string, hi int64) (int64, bool) {
	s, good := d.scalar(v, key, line, want)
	if !good {
		return 0, false
	}
	var n int64
	switch v.ShortTag() {
	case "!!int":
		if v.Decode(&n) != nil {
			d.errorf(line, key, "%s is too large: want %s", yamlconf.DescribeNode(v), want)
			return 0, false
		}
	case "!!str":
		var err error
		if n, err = yamlconf.ParseSize(s); err != nil {
			d.errorf(line, key, "%s is not a valid size: want %s", yamlconf.DescribeNode(v), want)
			return 0, false
		}
	default:
		d.errorf(line, key, "%s is not a valid size: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	if n < 0 || n > hi {
		d.errorf(line, key, "%s is out of range: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	return n, true
}

// duration decodes a Go duration string ("30s") in [lo, hi].
func (d *yamlDoc) duration(v *yaml.Node, key string, line int, want string, lo, hi time.Duration) (time.Duration, bool) {
	s, good := d.scalar(v, key, line, want)
	if !good {
		return 0, false
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		hint := ""
		if tag := v.ShortTag(); tag == "!!int" || tag == "!!float" {
			hint = " (a unit is required)"
		}
		d.errorf(line, key, "%s is not a duration%s: want %s", yamlconf.DescribeNode(v), hint, want)
		return 0, false
	}
	if dur < lo || dur > hi {
		d.errorf(line, key, "%s is out of range: want %s", yamlconf.DescribeNode(v), want)
		return 0, false
	}
	return dur, true
}

// stringMap decodes a mapping of strings to strings; check returns "" or what is wrong with
// one entry.
func (d *yamlDoc) stringMap(v *yaml.Node, key string, line int, want string, check func(k, val string) string) (map[string]string, bool) {
	out := map[string]string{}
	if yamlconf.IsNull(v) {
		return out, true
	}
	if v.Kind != yaml.MappingNode {
		d.errorf(line, key, "got %s: want %s", yamlconf.DescribeNode(v), want)
		return nil, false
	}
	ok := true
	seen := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := yamlconf.ResolveAlias(v.Content[i]), yamlconf.ResolveAlias(v.Content[i+1])
		name := yamlconf.KeyName(k)
		ekey := joinKey(key, name)
		if k.Kind != yaml.ScalarNode || yamlconf.IsNull(k) {
			d.errorf(k.Line, ekey, "got %s as a key: want %s", yamlconf.DescribeNode(k), want)
			ok = false
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, ekey, "duplicate key: first set at line %d", first)
			ok = false
			continue
		}
		seen[k.Value] = k.Line
		s, good := d.scalar(val, ekey, k.Line, want)
		if !good {
			ok = false
			continue
		}
		if yamlconf.IsNull(val) {
			s = ""
		}
		if msg := check(k.Value, s); msg != "" {
			d.errorf(k.Line, ekey, "%s", msg)
			ok = false
			continue
		}
		out[k.Value] = s
	}
	return out, ok
}

// parseRoot returns the top-level mapping of the single YAML document in data, or nil for an
// empty document. what names the file's content in messages ("policy").
func parseRoot(name string, data []byte, what string) (root *yaml.Node, err error) {
	defer func() {
		// The YAML library is not supposed to panic; if it does on odd input, say so.
		if r := recover(); r != nil {
			root, err = nil, &Error{File: name, Msg: fmt.Sprintf("cannot parse YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlconf.SyntaxError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: extra.Line, Msg: "more than one YAML document: want a single " + what}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlconf.SyntaxError(name, err)
	}
	root = &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	root = yamlconf.ResolveAlias(root)
	if yamlconf.IsNull(root) {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Msg: fmt.Sprintf("got %s at top level: want a %s (a mapping)", yamlconf.DescribeNode(root), what)}
	}
	return root, nil
}

func joinKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func fieldList(fields []field) string {
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// suggest returns the known key closest to name (case-insensitive match or edit distance 2 at
// most), or "".
func suggest(name string, fields []field) string {
	best, bestDist := "", 3
	for _, f := range fields {
		if strings.EqualFold(f.name, name) {
			return f.name
		}
		if dist := yamlconf.EditDistance(strings.ToLower(name), strings.ToLower(f.name)); dist < bestDist {
			best, bestDist = f.name, dist
		}
	}
	return best
}
