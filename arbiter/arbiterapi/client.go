package arbiterapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidalqos/tidal/internal/yamlconf"
)

// Client is what an agent uses to report to the arbiter.
//
//	c := &arbiterapi.Client{URL: "http://arbiter:9480", Token: token, NodeName: "node-a"}
//	lease, err := c.Report(ctx, report)
//
// On error the agent keeps the lease it holds until that lease expires, and lends nothing
// after (the arbiter's answer is the only source of leases).
type Client struct {
	// URL is the arbiter's base URL, such as "http://127.0.0.1:9480".
	URL string
	// Token is this node's bearer token.
	Token string
	// NodeName is this node's name; reports are sent for it.
	NodeName string
	// HTTP is the client to use; nil uses a client with a 10 s timeout.
	HTTP *http.Client
}

// APIError is an error answer from the arbiter.
type APIError struct {
	StatusCode int
	// Message is the arbiter's message; Fields names the fields at fault, when any.
	Message string
	Fields  []string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("arbiter: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Report sends r (its Node set to NodeName when empty; an error when it names another node)
// and returns the node's lease.
func (c *Client) Report(ctx context.Context, r Report) (Lease, error) {
	if r.Node == "" {
		r.Node = c.NodeName
	}
	if r.Node != c.NodeName {
		return Lease{}, fmt.Errorf("arbiter: report for node %q from a client for node %q", r.Node, c.NodeName)
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	body, err := json.Marshal(r)
	if err != nil {
		return Lease{}, fmt.Errorf("arbiter: %w", err)
	}
	var lease Lease
	if err := c.do(ctx, http.MethodPost, "/v1/reports", body, &lease); err != nil {
		return Lease{}, err
	}
	return lease, nil
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("arbiter: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("arbiter: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("arbiter: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		apiErr := &APIError{StatusCode: resp.StatusCode, Message: strings.TrimSpace(yamlconf.Clip(string(data)))}
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			apiErr.Message = eb.Error
			for _, f := range eb.Fields {
				if f.Field != "" {
					apiErr.Fields = append(apiErr.Fields, f.Field)
				}
			}
		}
		return apiErr
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("arbiter: decoding the answer: %w", err)
	}
	return nil
}
