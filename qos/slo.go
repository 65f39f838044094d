package qos

import (
	"fmt"
	"net/url"
	"time"
)

// An online workload may give the agent an SLO signal it already has: a URL whose answer
// time tracks what its users see (a health or latency probe), and the latency it must stay
// under. The interference feedback then counts the probe's latency as one more indicator.
const (
	// AnnotationSLOProbe is an http:// URL the agent GETs every interference interval.
	AnnotationSLOProbe = "tidalqos.io/slo-probe"
	// AnnotationSLOLatency is the probe's target: a Go duration such as "20ms".
	AnnotationSLOLatency = "tidalqos.io/slo-latency"
)

// SLO is a workload's probe and its target (both zero without one).
type SLO struct {
	Probe   string
	Latency time.Duration
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
	u, err := url.Parse(probe)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return bad(AnnotationSLOProbe, probe, ErrMalformed, `not an http:// URL with a host (such as "http://127.0.0.1:8080/healthz")`, none)
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
