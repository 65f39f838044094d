package qos

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/tidalqos/tidal/internal/resp"
)

// An online workload may give the agent an SLO signal it already has: a URL whose answer
// time tracks what its users see (a health or latency probe, or a database command), and the
// latency it must stay under. The interference feedback then counts the probe's latency as
// one more indicator.
const (
	// AnnotationSLOProbe is what the agent asks every interference interval: an http:// URL
	// it GETs, or a redis://HOST:PORT/COMMAND/ARG… whose command it sends (package resp).
	AnnotationSLOProbe = "tidalqos.io/slo-probe"
	// AnnotationSLOLatency is the probe's target: a Go duration such as "20ms".
	AnnotationSLOLatency = "tidalqos.io/slo-latency"
)

// SLO is a workload's probe and its target (both zero without one).
type SLO struct {
	Probe   string
	Latency time.Duration
}

// checkProbe says what is wrong with a probe's URL, if anything.
func checkProbe(probe string) error {
	u, err := url.Parse(probe)
	switch {
	case err == nil && u.Scheme == "http" && u.Host != "":
		return nil
	case err == nil && u.Scheme == "redis":
		if _, err := resp.ParseURL(probe); err != nil {
			return fmt.Errorf(`not a redis:// URL with a host and a command (such as "redis://127.0.0.1:6379/PING"): %v`, err)
		}
		return nil
	}
	return errors.New(`not an http:// URL with a host (such as "http://127.0.0.1:8080/healthz") or a redis:// one with a command (such as "redis://127.0.0.1:6379/PING")`)
}

// maxSLOLatency bounds the target: a probe slower than this is no latency signal.
const maxSLOLatency = 10 * time.Second

// sloOf reads the SLO annotations. Both are needed, on an online tier (shared or dedicated);
// anything else is reported and leaves the workload without a probe.
func sloOf(annotations map[string]string, tier Tier, problems *[]error) SLO {
	probe, hasProbe := annotations[AnnotationSLOProbe]
	latency, hasLatency := annotations[AnnotationSLOLatency]
	if !hasProbe && !hasLatency {
		return SLO{}
	}
	const none = "no SLO probe"
	bad := func(key, value string, kind error, reason, fallback string) SLO {
		*problems = append(*problems, &Problem{Key: key, Value: value, Source: SourceAnnotation, Kind: kind, Reason: reason, Fallback: fallback})
		return SLO{}
	}
	switch {
	case !hasProbe:
		return bad(AnnotationSLOLatency, latency, ErrIgnored, fmt.Sprintf("needs %s too (the URL to probe)", AnnotationSLOProbe), none)
	case !hasLatency:
		return bad(AnnotationSLOProbe, probe, ErrIgnored, fmt.Sprintf("needs %s too (the latency target, such as \"20ms\")", AnnotationSLOLatency), none)
	}
	if err := checkProbe(probe); err != nil {
		return bad(AnnotationSLOProbe, probe, ErrMalformed, err.Error(), none)
	}
	d, err := time.ParseDuration(latency)
	if err != nil || d <= 0 || d > maxSLOLatency {
		return bad(AnnotationSLOLatency, latency, ErrMalformed, fmt.Sprintf(`not a duration in (0, %s] (such as "20ms")`, maxSLOLatency), none)
	}
	if tier != Shared && tier != Dedicated {
		return bad(AnnotationSLOProbe, probe, ErrIgnored, fmt.Sprintf("an SLO probe protects online work (tiers %s, %s), this workload is %s", Shared, Dedicated, tier), "ignored")
	}
	return SLO{Probe: probe, Latency: d}
}
