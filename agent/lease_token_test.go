package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidalqos/tidal/agent/config"
)

// A projected ServiceAccount token rotates: the agent reads the token file again when it
// changes, and keeps the last token when the file is empty for a moment.
func TestArbiterTokenIsReadAgainWhenItChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string, at time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	write("first-token-0123456789\n", t0)
	cfg := config.Default()
	cfg.Arbiter.URL, cfg.Arbiter.TokenFile = "http://127.0.0.1:1", path
	l, err := newLeasing(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if l.client.Token != "first-token-0123456789" {
		t.Fatalf("token %q", l.client.Token)
	}
	write("second-token-0123456789", t0.Add(time.Minute))
	if err := l.refreshToken(); err != nil || l.client.Token != "second-token-0123456789" {
		t.Fatalf("after rotation: %q, %v", l.client.Token, err)
	}
	write("", t0.Add(2*time.Minute))
	if err := l.refreshToken(); err != nil || l.client.Token != "second-token-0123456789" {
		t.Fatalf("an empty file must keep the last token: %q, %v", l.client.Token, err)
	}
}
