package config

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/utils/cpuset"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// MarshalYAML writes c as a config file that Parse reads back to c: every
// key, in the order of docs/config.md, durations as "1s", sizes as "1Gi".
func (c Config) MarshalYAML() (any, error) {
	return mappingNode(&c, schema), nil
}

func mappingNode(c *Config, entries []*entry) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, e := range entries {
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: e.key}
		var v *yaml.Node
		switch e.kind {
		case kindSection:
			v = mappingNode(c, e.children)
		case kindIODevices:
			v = ioDevicesNode(c)
		default:
			v = scalarNode(e, c)
		}
		m.Content = append(m.Content, key, v)
	}
	return m
}

func scalarNode(e *entry, c *Config) *yaml.Node {
	tag, val := "!!str", ""
	switch p := e.ptr(c).(type) {
	case *string:
		val = *p
	case *int:
		tag, val = "!!int", strconv.Itoa(*p)
	case *int64:
		if e.kind == kindSize {
			if val = yamlconf.FormatSize(*p); val == strconv.FormatInt(*p, 10) {
				tag = "!!int"
			}
		} else {
			tag, val = "!!int", strconv.FormatInt(*p, 10)
		}
	case *float64:
		tag, val = "!!float", formatFloat(*p)
	case *bool:
		tag, val = "!!bool", strconv.FormatBool(*p)
	case *time.Duration:
		val = p.String()
	case *cpuset.CPUSet:
		val = p.String()
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: val}
}
