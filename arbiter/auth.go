package arbiter

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/tidalqos/tidal/arbiter/arbiterapi"
)

// Authenticator says who sent a request. It returns the name of the node the request's
// credentials are bound to: a report is accepted only for that node.
//
// Standalone, TokenFile binds one bearer token to each node. In Kubernetes, TokenReviewer sends
// the bearer token to a TokenReview and takes the node name from the bound pod's node (the
// authentication.kubernetes.io/node-name extra of a projected ServiceAccount token).
type Authenticator interface {
	Authenticate(r *http.Request) (node string, err error)
}

// ErrUnauthenticated is returned (wrapped) by an Authenticator for missing or unknown
// credentials; the server answers 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrAuthUnavailable is returned (wrapped) by an Authenticator that could not check the
// credentials (the API server did not answer); the server answers 503, not 401.
var ErrAuthUnavailable = errors.New("cannot check credentials now")

// TokenFile authenticates bearer tokens listed in a YAML file that maps node names to tokens:
//
//	node-a: 3q2+7w...   # at least 16 characters, no white space
//	node-b: 9f0c1d...
//
// Each token is bound to its node. Lookups hash the presented token (SHA-256) and compare the
// stored token in constant time, so the time taken says nothing about how close a guess is.
// The file is read again when it changes (Changed, Reload), so nodes can be added without a
// restart.
type TokenFile struct {
	file watchedFile

	mu     sync.RWMutex
	byHash map[[sha256.Size]byte]tokenEntry
}

type tokenEntry struct {
	node  string
	token []byte
}

// LoadTokenFile reads the tokens file at path.
func LoadTokenFile(path string) (*TokenFile, error) {
	t := &TokenFile{file: watchedFile{path: path}}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Changed reports whether the file changed since it was last read.
func (t *TokenFile) Changed() bool { return t.file.changed() }

// Reload reads the file again; on error the tokens in use stay.
func (t *TokenFile) Reload() error {
	data, err := t.file.read()
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	tokens, err := ParseTokens(t.file.path, data)
	if err != nil {
		return err
	}
	byHash := make(map[[sha256.Size]byte]tokenEntry, len(tokens))
	for node, tok := range tokens {
		byHash[sha256.Sum256([]byte(tok))] = tokenEntry{node: node, token: []byte(tok)}
	}
	t.mu.Lock()
	t.byHash = byHash
	t.mu.Unlock()
	return nil
}

// Len returns the number of tokens.
func (t *TokenFile) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byHash)
}

// bearerToken returns the request's bearer token.
func bearerToken(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" {
		return "", fmt.Errorf("%w: no Authorization header: want \"Authorization: Bearer TOKEN\"", ErrUnauthenticated)
	}
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", fmt.Errorf("%w: the Authorization header is not \"Bearer TOKEN\"", ErrUnauthenticated)
	}
	return tok, nil
}

// Authenticate implements Authenticator.
func (t *TokenFile) Authenticate(r *http.Request) (string, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	t.mu.RLock()
	e, found := t.byHash[sha256.Sum256([]byte(tok))]
	t.mu.RUnlock()
	if !found || subtle.ConstantTimeCompare(e.token, []byte(tok)) != 1 {
		return "", fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	return e.node, nil
}

// MinTokenLen is the shortest token accepted in a tokens file.
const MinTokenLen = 16

// ParseTokens parses a tokens file: a mapping of node names to tokens. Every problem is
// reported with file:line; tokens must be unique (a token names one node).
func ParseTokens(name string, data []byte) (map[string]string, error) {
	root, err := parseRoot(name, data, "mapping of node names to tokens")
	if err != nil {
		return nil, err
	}
	d := &yamlDoc{file: name}
	if root == nil {
		d.errorf(1, "", "no tokens: want a mapping of node names to tokens, such as \"node-a: 3q2+7w...\"")
		return nil, d.err()
	}
	want := fmt.Sprintf("a token of at least %d printable characters without white space", MinTokenLen)
	owner := map[string]string{}
	tokens, _ := d.stringMap(root, "", 1, want, func(node, tok string) string {
		if msg := arbiterapi.CheckNodeName(node); msg != "" {
			return msg
		}
		if len(tok) < MinTokenLen {
			return fmt.Sprintf("the token has %d characters: want %s", len(tok), want)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] > '~' {
				return "the token has a character that is not printable ASCII: want " + want
			}
		}
		if other, dup := owner[tok]; dup {
			return fmt.Sprintf("the token is also node %s's: want one token per node", other)
		}
		owner[tok] = node
		return ""
	})
	if err := d.err(); err != nil {
		return nil, err
	}
	return tokens, nil
}
