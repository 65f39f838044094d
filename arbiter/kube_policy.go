package arbiter

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ConfigMapPolicy reads the policy from a ConfigMap's policy.yaml, as cached by an informer
// that watches that one ConfigMap. Changed is cheap (it compares resourceVersions), so the
// server's poll costs nothing; a policy that does not parse is refused whole by the server and
// the last accepted one stays, as with FilePolicy. OnReject, when set, is told why (the
// Kubernetes wiring records a Warning Event on the ConfigMap).
type ConfigMapPolicy struct {
	Namespace, Name string
	// Get returns the ConfigMap from the informer's cache (a NotFound error when missing).
	Get func() (*corev1.ConfigMap, error)
	// OnReject is called with the ConfigMap (nil when missing) and the error of a Load.
	OnReject func(cm *corev1.ConfigMap, err error)

	mu     sync.Mutex
	loaded string // resourceVersion last loaded; "" when missing
}

// Source is how the policy is named in messages and in GET /v1/rules: a path-like name, so
// that errors read "configmaps/NS/NAME/policy.yaml:12: rules[0].window: ...".
func (c *ConfigMapPolicy) Source() string {
	return fmt.Sprintf("configmaps/%s/%s/%s", c.Namespace, c.Name, PolicyConfigMapKey)
}

// Load implements PolicySource.
func (c *ConfigMapPolicy) Load() (*Policy, error) {
	cm, err := c.Get()
	version := ""
	if err == nil {
		version = cm.ResourceVersion
	}
	c.mu.Lock()
	c.loaded = version
	c.mu.Unlock()
	p, err := c.parse(cm, err)
	if err != nil && c.OnReject != nil {
		c.OnReject(cm, err)
	}
	return p, err
}

func (c *ConfigMapPolicy) parse(cm *corev1.ConfigMap, getErr error) (*Policy, error) {
	switch {
	case apierrors.IsNotFound(getErr):
		return nil, fmt.Errorf("policy: ConfigMap %s/%s not found: create it with the policy under the key %s", c.Namespace, c.Name, PolicyConfigMapKey)
	case getErr != nil:
		return nil, fmt.Errorf("policy: ConfigMap %s/%s: %w", c.Namespace, c.Name, getErr)
	}
	data, ok := cm.Data[PolicyConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("policy: ConfigMap %s/%s has no key %s (data keys: %d)", c.Namespace, c.Name, PolicyConfigMapKey, len(cm.Data))
	}
	return ParsePolicy(c.Source(), []byte(data))
}

// Changed implements PolicySource.
func (c *ConfigMapPolicy) Changed() bool {
	cm, err := c.Get()
	version := ""
	if err == nil {
		version = cm.ResourceVersion
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return version != c.loaded
}
