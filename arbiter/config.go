package arbiter

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the configuration of the `tidal arbiter` process, read from YAML by LoadConfig.
// Every key is optional; docs/arbiter.md lists them.
type Config struct {
	// ListenAddress is the host:port the API listens on.
	ListenAddress string
	// PolicyFile is the lending policy (polled for changes every PollInterval).
	PolicyFile string
	// TokensFile maps node names to bearer tokens (polled too).
	TokensFile string
	// StateDir holds the state file (leases and the last accepted policy).
	StateDir string
	// LeaseTTL, NodeTimeout, MaxClockSkew, PollInterval, PersistInterval: see Options.
	LeaseTTL        time.Duration
	NodeTimeout     time.Duration
	MaxClockSkew    time.Duration
	PollInterval    time.Duration
	PersistInterval time.Duration
	// MaxReportBytes caps a report's body.
	MaxReportBytes int64
	// TLSCertFile and TLSKeyFile, both set, serve HTTPS.
	TLSCertFile string
	TLSKeyFile  string
	// LogLevel is debug, info, warn or error.
	LogLevel string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		ListenAddress:   "127.0.0.1:9480",
		PolicyFile:      "/etc/tidal/arbiter-policy.yaml",
		TokensFile:      "/etc/tidal/arbiter-tokens.yaml",
		StateDir:        "/var/lib/tidal-arbiter",
		LeaseTTL:        DefaultLeaseTTL,
		NodeTimeout:     DefaultNodeTimeout,
		MaxClockSkew:    DefaultMaxClockSkew,
		PollInterval:    5 * time.Second,
		PersistInterval: 5 * time.Second,
		MaxReportBytes:  DefaultMaxReportBytes,
		LogLevel:        "info",
	}
}

// LoadConfig reads the config file at path on top of DefaultConfig.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a config file on top of DefaultConfig and validates it; every problem is
// reported with file:line: key.
func ParseConfig(name string, data []byte) (Config, error) {
	c := DefaultConfig()
	root, err := parseRoot(name, data, "arbiter config")
	if err != nil {
		return Config{}, err
	}
	d := &yamlDoc{file: name}
	path := func(dst *string, example string) func(v *yaml.Node, key string, line int) {
		return func(v *yaml.Node, key string, line int) {
			if s, ok := d.str(v, key, line, "a file path such as "+strconv.Quote(example), nil); ok {
				*dst = s
			}
		}
	}
	optPath := func(dst *string, example string) func(v *yaml.Node, key string, line int) {
		return func(v *yaml.Node, key string, line int) {
			if isNull(v) {
				*dst = ""
				return
			}
			if s, ok := d.scalar(v, key, line, "a file path such as "+strconv.Quote(example)+", or empty"); ok {
				*dst = s
			}
		}
	}
	dur := func(dst *time.Duration, lo, hi time.Duration, example string) func(v *yaml.Node, key string, line int) {
		return func(v *yaml.Node, key string, line int) {
			if x, ok := d.duration(v, key, line, fmt.Sprintf("a duration in [%v, %v], such as %q", lo, hi, example), lo, hi); ok {
				*dst = x
			}
		}
	}
	lines := map[string]int{}
	track := func(name string, f func(v *yaml.Node, key string, line int)) func(v *yaml.Node, key string, line int) {
		return func(v *yaml.Node, key string, line int) { lines[name] = line; f(v, key, line) }
	}
	if root != nil {
		d.mapping(root, "", 1, []field{
			{name: "listenAddress", decode: func(v *yaml.Node, key string, line int) {
				if s, ok := d.str(v, key, line, `host:port such as "127.0.0.1:9480" or ":9480"`, validHostPort); ok {
					c.ListenAddress = s
				}
			}},
			{name: "policyFile", decode: path(&c.PolicyFile, "/etc/tidal/arbiter-policy.yaml")},
			{name: "tokensFile", decode: path(&c.TokensFile, "/etc/tidal/arbiter-tokens.yaml")},
			{name: "stateDir", decode: path(&c.StateDir, "/var/lib/tidal-arbiter")},
			{name: "leaseTTL", decode: track("leaseTTL", dur(&c.LeaseTTL, time.Second, time.Hour, "30s"))},
			{name: "nodeTimeout", decode: track("nodeTimeout", dur(&c.NodeTimeout, time.Second, 24*time.Hour, "5m"))},
			{name: "maxClockSkew", decode: dur(&c.MaxClockSkew, time.Second, 24*time.Hour, "1m")},
			{name: "pollInterval", decode: dur(&c.PollInterval, 100*time.Millisecond, time.Hour, "5s")},
			{name: "persistInterval", decode: dur(&c.PersistInterval, 100*time.Millisecond, time.Hour, "5s")},
			{name: "maxReportBytes", decode: func(v *yaml.Node, key string, line int) {
				if n, ok := d.size(v, key, line, `a size in [4Ki, 64Mi], such as "1Mi"`, 64<<20); ok {
					if n < 4<<10 {
						d.errorf(line, key, "%s is out of range: want a size in [4Ki, 64Mi], such as \"1Mi\"", describe(v))
						return
					}
					c.MaxReportBytes = n
				}
			}},
			{name: "tlsCertFile", decode: track("tlsCertFile", optPath(&c.TLSCertFile, "/etc/tidal/tls.crt"))},
			{name: "tlsKeyFile", decode: track("tlsKeyFile", optPath(&c.TLSKeyFile, "/etc/tidal/tls.key"))},
			{name: "logLevel", decode: func(v *yaml.Node, key string, line int) {
				if s, ok := d.str(v, key, line, "one of debug, info, warn, error", func(s string) bool {
					return s == "debug" || s == "info" || s == "warn" || s == "error"
				}); ok {
					c.LogLevel = s
				}
			}},
		})
	}
	if c.NodeTimeout < c.LeaseTTL {
		line := lines["nodeTimeout"]
		if line == 0 {
			line = lines["leaseTTL"]
		}
		d.errorf(line, "nodeTimeout", "%v is shorter than leaseTTL (%v): want a node timeout >= the lease TTL", c.NodeTimeout, c.LeaseTTL)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		line := max(lines["tlsCertFile"], lines["tlsKeyFile"])
		d.errorf(line, "tlsCertFile", "tlsCertFile and tlsKeyFile go together: want both or neither")
	}
	if err := d.err(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func validHostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}
