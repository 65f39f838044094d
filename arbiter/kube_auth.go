package arbiter

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
	"github.com/tidalqos/tidal/internal/yamlconf"
)

// NodeNameExtra is the extra a pod-bound ServiceAccount token carries with the name of the
// pod's node (Kubernetes >= 1.30).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// TokenReviewer authenticates agents in Kubernetes: the bearer token goes to a TokenReview, and
// it is accepted only when the API server authenticates it as the agents' ServiceAccount and it
// is bound to a pod on a node (NodeNameExtra). That node is the one the token may report for,
// so an agent cannot report for another node, and a token that is not bound to a pod (a
// long-lived Secret token, a `kubectl create token` without --bound-object-kind Pod) is refused.
//
// Accepted tokens are remembered for CacheTTL (and never past the token's own expiry), keyed by
// the token's SHA-256: 10,000 nodes reporting every 10 s would otherwise send 1,000
// TokenReviews a second. A deleted pod's token is thus accepted for up to CacheTTL more.
// Refusals are not cached.
type TokenReviewer struct {
	// Review sends a TokenReview (NewTokenReviewer sets it to the API server's; tests replace it).
	Review func(ctx context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error)
	// User is the user name a token must authenticate as.
	User string
	// Audiences are asked for in each review; none: the API server's own.
	Audiences []string
	// CacheTTL is how long an accepted token is remembered; 0 disables the cache.
	CacheTTL time.Duration
	// Timeout bounds one review (default 10s).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	cache   map[[sha256.Size]byte]cachedToken
	inserts int // since the last sweep of expired entries

	metricsOnce sync.Once
	reviews     *prometheus.CounterVec
	lookups     *prometheus.CounterVec
}

type cachedToken struct {
	node    string
	expires time.Time
}

// maxCachedTokens bounds the cache: 10 times a 10,000-node cluster with rotating tokens.
const maxCachedTokens = 100_000

// NewTokenReviewer returns a TokenReviewer that sends reviews through client.
func NewTokenReviewer(client authv1client.TokenReviewInterface, user string, audiences []string, ttl time.Duration) *TokenReviewer {
	return &TokenReviewer{
		Review: func(ctx context.Context, tr *authenticationv1.TokenReview) (*authenticationv1.TokenReview, error) {
			return client.Create(ctx, tr, metav1.CreateOptions{})
		},
		User: user, Audiences: audiences, CacheTTL: ttl,
	}
}

// Collectors returns the reviewer's metrics: TokenReviews by result and cache hits.
func (t *TokenReviewer) Collectors() []prometheus.Collector {
	t.initMetrics()
	return []prometheus.Collector{t.reviews, t.lookups}
}

func (t *TokenReviewer) initMetrics() { t.metricsOnce.Do(t.newMetrics) }

func (t *TokenReviewer) newMetrics() {
	t.reviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_arbiter_token_reviews_total",
		Help: "TokenReviews sent, by result (accepted; refused: not authenticated, another user or no node; error: the API server did not answer).",
	}, []string{"result"})
	t.lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tidal_arbiter_token_cache_lookups_total",
		Help: "Bearer tokens looked up in the cache of accepted tokens, by result (hit, miss).",
	}, []string{"result"})
	for _, r := range []string{"accepted", "refused", "error"} {
		t.reviews.WithLabelValues(r)
	}
	t.lookups.WithLabelValues("hit")
	t.lookups.WithLabelValues("miss")
}

func (t *TokenReviewer) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// Authenticate implements Authenticator.
func (t *TokenReviewer) Authenticate(r *http.Request) (string, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	t.initMetrics()
	key := sha256.Sum256([]byte(tok))
	now := t.now()
	t.mu.Lock()
	e, hit := t.cache[key]
	t.mu.Unlock()
	if hit && now.Before(e.expires) {
		t.lookups.WithLabelValues("hit").Inc()
		return e.node, nil
	}
	t.lookups.WithLabelValues("miss").Inc()

	// Not the request's context: when the agent gives up waiting, the answer still fills the
	// cache for its next report.
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
	defer cancel()
	res, err := t.Review(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: t.Audiences}})
	if err != nil {
		t.reviews.WithLabelValues("error").Inc()
		return "", fmt.Errorf("%w: TokenReview: %v", ErrAuthUnavailable, err)
	}
	node, err := t.check(&res.Status)
	if err != nil {
		t.reviews.WithLabelValues("refused").Inc()
		return "", err
	}
	t.reviews.WithLabelValues("accepted").Inc()
	if t.CacheTTL > 0 {
		expires := now.Add(t.CacheTTL)
		if exp, ok := jwtExpiry(tok); ok && exp.Before(expires) {
			expires = exp
		}
		t.remember(key, cachedToken{node: node, expires: expires}, now)
	}
	return node, nil
}

// check accepts a review's status: authenticated, as User, bound to a pod on a node.
func (t *TokenReviewer) check(st *authenticationv1.TokenReviewStatus) (string, error) {
	if !st.Authenticated {
		msg := "the API server does not accept the token"
		if st.Error != "" {
			msg += ": " + yamlconf.Clip(st.Error)
		}
		if len(t.Audiences) > 0 {
			msg += fmt.Sprintf(" (audiences asked for: %s)", strings.Join(t.Audiences, ", "))
		}
		return "", fmt.Errorf("%w: %s", ErrUnauthenticated, msg)
	}
	if st.User.Username != t.User {
		return "", fmt.Errorf("%w: the token is %s's: want a token of %s", ErrUnauthenticated, yamlconf.Clip(st.User.Username), t.User)
	}
	nodes := st.User.Extra[NodeNameExtra]
	if len(nodes) != 1 || arbiterapi.CheckNodeName(nodes[0]) != "" {
		return "", fmt.Errorf("%w: the token is not bound to a pod on a node (no %s): want the agent pod's projected ServiceAccount token (Kubernetes >= 1.30)", ErrUnauthenticated, NodeNameExtra)
	}
	return nodes[0], nil
}

// remember caches an accepted token. Expired entries are swept once the inserts since the
// last sweep reach half the cache's size, so the sweeps cost O(1) per insert; a cache still
// full after a sweep starts over (only tokens that keep arriving matter).
func (t *TokenReviewer) remember(key [sha256.Size]byte, e cachedToken, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cache == nil {
		t.cache = map[[sha256.Size]byte]cachedToken{}
	}
	t.inserts++
	if t.inserts >= len(t.cache)/2 || len(t.cache) >= maxCachedTokens {
		for k, c := range t.cache {
			if !now.Before(c.expires) {
				delete(t.cache, k)
			}
		}
		t.inserts = 0
		if len(t.cache) >= maxCachedTokens {
			clear(t.cache)
		}
	}
	t.cache[key] = e
}

// cached returns the number of tokens in the cache (for tests).
func (t *TokenReviewer) cached() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cache)
}

// jwtExpiry reads the exp claim of a JWT without checking anything else: the API server
// has just checked the token, this only keeps the cache from outliving it.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(*claims.Exp, 0), true
}
