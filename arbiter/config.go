package arbiter

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Config is the configuration of the `tidal arbiter` process, read from YAML by LoadConfig.
// Every key is optional; docs/arbiter.md lists them.
type Config struct {
	// Mode is ModeStandalone (files) or ModeKubernetes (the API server; see Kubernetes).
	Mode string
	// ListenAddress is the host:port the API listens on.
	ListenAddress string
	// PolicyFile is the lending policy (polled for changes every PollInterval). Standalone.
	PolicyFile string
	// TokensFile maps node names to bearer tokens (polled too). Standalone.
	TokensFile string
	// StateDir holds the state file (leases and the last accepted policy). Standalone.
	StateDir string
	// Kubernetes configures the kubernetes mode.
	Kubernetes KubernetesConfig
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

// Modes of the arbiter.
const (
	ModeStandalone = "standalone"
	ModeKubernetes = "kubernetes"
)

// KubernetesConfig is the `kubernetes:` section of the config: where the arbiter finds its
// policy, how it checks the agents' tokens and which Lease elects its leader.
type KubernetesConfig struct {
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster config.
	Kubeconfig string
	// Namespace holds the policy ConfigMap and the leader-election Lease.
	Namespace string
	// PolicyConfigMap is the ConfigMap holding the policy under the key policy.yaml.
	PolicyConfigMap string
	// AgentServiceAccount is the user name agents' tokens must authenticate as.
	AgentServiceAccount string
	// Audiences are the audiences a TokenReview asks for; none: the API server's own.
	Audiences []string
	// TokenCacheTTL is how long an accepted token is remembered (0: not at all).
	TokenCacheTTL time.Duration
	// LeaseName is the coordination.k8s.io Lease of the leader election.
	LeaseName string
	// LeaseDuration, RenewDeadline, RetryPeriod tune the leader election (client-go's
	// meaning): a leader that could not renew for RenewDeadline stops deciding; another
	// replica takes over LeaseDuration after the last renewal.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// PodName is this replica's own Pod in Namespace (tidal arbiter --pod-name, default
	// $POD_NAME; not a key of the file, which every replica shares). The replica keeps the
	// label RoleLabel on it, leader or follower, so that a Service selecting the leader
	// routes reports there while every replica is Ready; "" leaves the labels alone, and then
	// only the leader is Ready.
	PodName string
}

// PolicyConfigMapKey is the key of the policy in its ConfigMap.
const PolicyConfigMapKey = "policy.yaml"

// DefaultKubernetesConfig returns the defaults of the kubernetes section.
func DefaultKubernetesConfig() KubernetesConfig {
	return KubernetesConfig{
		Namespace:           "tidal-system",
		PolicyConfigMap:     "tidal-arbiter-policy",
		AgentServiceAccount: "system:serviceaccount:tidal-system:tidal-agent",
		TokenCacheTTL:       time.Minute,
		LeaseName:           "tidal-arbiter",
		LeaseDuration:       15 * time.Second,
		RenewDeadline:       10 * time.Second,
		RetryPeriod:         2 * time.Second,
	}
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Mode:            ModeStandalone,
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
		Kubernetes:      DefaultKubernetesConfig(),
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
			if yamlconf.IsNull(v) {
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
			{name: "mode", decode: track("mode", func(v *yaml.Node, key string, line int) {
				if s, ok := d.str(v, key, line, "standalone or kubernetes", func(s string) bool {
					return s == ModeStandalone || s == ModeKubernetes
				}); ok {
					c.Mode = s
				}
			})},
			{name: "listenAddress", decode: func(v *yaml.Node, key string, line int) {
				if s, ok := d.str(v, key, line, `host:port such as "127.0.0.1:9480" or ":9480"`, validHostPort); ok {
					c.ListenAddress = s
				}
			}},
			{name: "policyFile", decode: track("policyFile", path(&c.PolicyFile, "/etc/tidal/arbiter-policy.yaml"))},
			{name: "tokensFile", decode: track("tokensFile", path(&c.TokensFile, "/etc/tidal/arbiter-tokens.yaml"))},
			{name: "stateDir", decode: track("stateDir", path(&c.StateDir, "/var/lib/tidal-arbiter"))},
			{name: "kubernetes", decode: track("kubernetes", func(v *yaml.Node, key string, line int) {
				parseKubernetes(d, v, key, line, &c.Kubernetes)
			})},
			{name: "leaseTTL", decode: track("leaseTTL", dur(&c.LeaseTTL, time.Second, time.Hour, "30s"))},
			{name: "nodeTimeout", decode: track("nodeTimeout", dur(&c.NodeTimeout, time.Second, 24*time.Hour, "5m"))},
			{name: "maxClockSkew", decode: dur(&c.MaxClockSkew, time.Second, 24*time.Hour, "1m")},
			{name: "pollInterval", decode: dur(&c.PollInterval, 100*time.Millisecond, time.Hour, "5s")},
			{name: "persistInterval", decode: dur(&c.PersistInterval, 100*time.Millisecond, time.Hour, "5s")},
			{name: "maxReportBytes", decode: func(v *yaml.Node, key string, line int) {
				if n, ok := d.size(v, key, line, `a size in [4Ki, 64Mi], such as "1Mi"`, 64<<20); ok {
					if n < 4<<10 {
						d.errorf(line, key, "%s is out of range: want a size in [4Ki, 64Mi], such as \"1Mi\"", yamlconf.DescribeNode(v))
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
	if c.Mode == ModeKubernetes {
		// The files of the standalone mode would be silently ignored: say so.
		for _, k := range []string{"policyFile", "tokensFile", "stateDir"} {
			if line := lines[k]; line > 0 {
				d.errorf(line, k, "not used in kubernetes mode (the policy comes from kubernetes.policyConfigMap, tokens are checked with TokenReviews, leases are kept on the Node objects): remove it")
			}
		}
	} else if line := lines["kubernetes"]; line > 0 {
		d.errorf(line, "kubernetes", "set, but mode is %s: add \"mode: kubernetes\" or remove the section", c.Mode)
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

// parseKubernetes decodes the kubernetes section into k (which holds the defaults).
func parseKubernetes(d *yamlDoc, v *yaml.Node, prefix string, line int, k *KubernetesConfig) {
	name := func(dst *string, want string, ok func(string) bool) func(v *yaml.Node, key string, line int) {
		return func(v *yaml.Node, key string, line int) {
			if s, good := d.str(v, key, line, want, ok); good {
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
	d.mapping(v, prefix, line, []field{
		{name: "kubeconfig", decode: func(v *yaml.Node, key string, line int) {
			if yamlconf.IsNull(v) {
				k.Kubeconfig = ""
				return
			}
			if s, ok := d.scalar(v, key, line, "a kubeconfig file path, or empty for the in-cluster config"); ok {
				k.Kubeconfig = s
			}
		}},
		{name: "namespace", decode: name(&k.Namespace, `a namespace name such as "tidal-system"`, dnsLabel)},
		{name: "policyConfigMap", decode: name(&k.PolicyConfigMap, `a ConfigMap name such as "tidal-arbiter-policy"`, func(s string) bool {
			return len(s) <= 253 && arbiterapi.IsDNSSubdomain(s)
		})},
		{name: "agentServiceAccount", decode: name(&k.AgentServiceAccount, `a ServiceAccount user name such as "system:serviceaccount:tidal-system:tidal-agent"`, validServiceAccountUser)},
		{name: "audiences", decode: func(v *yaml.Node, key string, line int) {
			want := `a list of token audiences such as ["tidal-arbiter"], or [] for the API server's own`
			k.Audiences = []string{}
			if !yamlconf.IsNull(v) && v.Kind != yaml.SequenceNode {
				d.errorf(line, key, "got %s: want %s", yamlconf.DescribeNode(v), want)
				return
			}
			d.list(v, key, line, want, func(item *yaml.Node, key string, line int) {
				if s, ok := d.str(item, key, line, "a non-empty audience without white space", func(s string) bool {
					return s != "" && !strings.ContainsAny(s, " \t\r\n")
				}); ok {
					k.Audiences = append(k.Audiences, s)
				}
			})
		}},
		{name: "tokenCacheTTL", decode: dur(&k.TokenCacheTTL, 0, 10*time.Minute, "1m")},
		{name: "leaseName", decode: name(&k.LeaseName, `a Lease name such as "tidal-arbiter"`, func(s string) bool {
			return len(s) <= 253 && arbiterapi.IsDNSSubdomain(s)
		})},
		{name: "leaseDuration", decode: track("leaseDuration", dur(&k.LeaseDuration, time.Second, 5*time.Minute, "15s"))},
		{name: "renewDeadline", decode: track("renewDeadline", dur(&k.RenewDeadline, 500*time.Millisecond, 5*time.Minute, "10s"))},
		{name: "retryPeriod", decode: track("retryPeriod", dur(&k.RetryPeriod, 100*time.Millisecond, time.Minute, "2s"))},
	})
	// The Lease records whole seconds, and followers time the leader out by the record.
	if k.LeaseDuration%time.Second != 0 {
		d.errorf(max(lines["leaseDuration"], line), joinKey(prefix, "leaseDuration"),
			"%v is not a whole number of seconds: want such as \"15s\" (the Lease records seconds)", k.LeaseDuration)
	}
	// client-go's own rules, reported here with a line rather than at start.
	if k.RenewDeadline >= k.LeaseDuration {
		d.errorf(max(lines["renewDeadline"], lines["leaseDuration"], line), joinKey(prefix, "renewDeadline"),
			"%v is not shorter than leaseDuration (%v): want renewDeadline < leaseDuration, so that a leader stops deciding before another can take over", k.RenewDeadline, k.LeaseDuration)
	}
	if float64(k.RenewDeadline) <= 1.2*float64(k.RetryPeriod) {
		d.errorf(max(lines["renewDeadline"], lines["retryPeriod"], line), joinKey(prefix, "retryPeriod"),
			"%v is too long for renewDeadline %v: want retryPeriod x 1.2 < renewDeadline", k.RetryPeriod, k.RenewDeadline)
	}
}

// dnsLabel accepts a DNS label (a namespace name): lowercase letters, digits and '-', at most
// 63 characters, starting and ending with a letter or digit.
func dnsLabel(s string) bool {
	return len(s) <= 63 && !strings.Contains(s, ".") && arbiterapi.IsDNSSubdomain(s)
}

// validServiceAccountUser accepts "system:serviceaccount:NAMESPACE:NAME".
func validServiceAccountUser(s string) bool {
	rest, ok := strings.CutPrefix(s, "system:serviceaccount:")
	ns, name, ok2 := strings.Cut(rest, ":")
	return ok && ok2 && dnsLabel(ns) && len(name) <= 253 && arbiterapi.IsDNSSubdomain(name)
}

func validHostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}
