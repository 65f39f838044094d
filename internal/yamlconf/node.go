package yamlconf

import (
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Helpers for decoding YAML node by node with messages that show what was found.

// ResolveAlias follows aliases to the node they stand for.
func ResolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; i < 100 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

// IsNull reports whether n is an explicit null (or an empty value).
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// KeyName shows a mapping key in a message.
func KeyName(k *yaml.Node) string {
	if k.Kind == yaml.ScalarNode {
		return Clip(k.Value)
	}
	return "<" + DescribeNode(k) + ">"
}

// DescribeNode shows a node in a message: a scalar as written (strings quoted), anything
// else by its kind.
func DescribeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "no value"
		}
		if n.ShortTag() == "!!str" {
			return strconv.Quote(Clip(n.Value))
		}
		return Clip(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "an unexpected node"
}

// Clip shortens s for messages.
func Clip(s string) string {
	const max = 60
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// EditDistance is the Levenshtein distance of a and b (large for long strings: only short
// keys are compared, to suggest the one a typo meant).
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
