package qos

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/tidalqos/tidal/internal/promhist"
	"github.com/tidalqos/tidal/internal/resp"
)

// An online workload may give the agent an SLO signal it already has: a URL whose answer
// time tracks what its users see (a health or latency probe, or a database command), or a
// latency histogram it exports for Prometheus; and the latency it must stay under. The
// interference feedback then counts that latency as one more indicator.
const (
	// AnnotationSLOProbe is what the agent asks every interference interval: an http:// URL
	// it GETs, or a redis://HOST:PORT/COMMAND/ARG… whose command it sends (package resp).
	AnnotationSLOProbe = "tidalqos.io/slo-probe"
	// AnnotationSLOMetric is a histogram the agent reads every interference interval instead:
	// http://HOST:PORT/PATH#NAME or #NAME{label="value",…}, a Prometheus page and the
	// histogram on it (package promhist). Every request the service served counts.
	AnnotationSLOMetric = "tidalqos.io/slo-metric"
	// AnnotationSLOQuantile is the quantile of the metric's histogram held to the target,
	// such as "0.99" (the default).
	AnnotationSLOQuantile = "tidalqos.io/slo-quantile"
	// AnnotationSLOLatency is the probe's or the metric's target: a Go duration such as "20ms".
	AnnotationSLOLatency = "tidalqos.io/slo-latency"
)

// DefaultSLOQuantile is the quantile of an SLO metric's histogram held to its target where
// the workload names none.
const DefaultSLOQuantile = 0.99

// SLO is a workload's SLO signal and its target (all zero without one).
type SLO struct {
	// Probe is the URL the agent asks, or with Histogram the page it reads.
	Probe string
	// Histogram selects a latency histogram on Probe's page (promhist.ParseSelector); empty
	// for a probe. Quantile is its quantile held to Latency.
	Histogram string
	Quantile  float64
	Latency   time.Duration
}

// Signal names the SLO's signal for messages: "probe URL", or "metric: the p99 of NAME on URL".
func (s SLO) Signal() string {
	if s.Histogram == "" {
		return "probe " + s.Probe
	}
	return fmt.Sprintf("metric: the p%s of %s on %s", strconv.FormatFloat(100*s.Quantile, 'f', -1, 64), s.Histogram, s.Probe)
}

// checkProbe says what is wrong with a probe's URL, if anything.
func checkProbe(probe string) error {
	u, err := url.Parse(probe)
	switch {
	case err == nil && u.Scheme == "http" && u.Host != "" && u.Fragment == "":
		return nil
	case err == nil && u.Scheme == "redis":
		if _, err := resp.ParseURL(probe); err != nil {
			return fmt.Errorf(`not a redis:// URL with a host and a command (such as "redis://127.0.0.1:6379/PING"): %v`, err)
		}
		return nil
	case err == nil && u.Scheme == "http" && u.Fragment != "":
		return fmt.Errorf("a probe is asked, not read: for a histogram on the page use %s", AnnotationSLOMetric)
	}
	return errors.New(`not an http:// URL with a host (such as "http://127.0.0.1:8080/healthz") or a redis:// one with a command (such as "redis://127.0.0.1:6379/PING")`)
}

// ParseMetric splits an SLO metric (AnnotationSLOMetric) into the page to read and the
// histogram's selector, or says what is wrong with it.
func ParseMetric(metric string) (page string, sel promhist.Selector, err error) {
	const want = `want an http:// URL with a host and, after #, a histogram's name (such as "http://127.0.0.1:8080/metrics#http_request_duration_seconds")`
	u, err := url.Parse(metric)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return "", promhist.Selector{}, errors.New(want)
	}
	if u.Fragment == "" {
		return "", promhist.Selector{}, fmt.Errorf("names no histogram: %s", want)
	}
	sel, err = promhist.ParseSelector(u.Fragment)
	if err != nil {
		return "", promhist.Selector{}, fmt.Errorf("histogram %q: %v", u.Fragment, err)
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String(), sel, nil
}

// maxSLOLatency bounds the target: a probe slower than this is no latency signal.
const maxSLOLatency = 10 * time.Second

// sloOf reads the SLO annotations: a probe or a metric, and the target, on an online tier
// (shared or dedicated). Anything else is reported and leaves the workload without an SLO
// signal; a metric beside a probe is reported and the probe kept.
func sloOf(annotations map[string]string, tier Tier, problems *[]error) SLO {
	probe, hasProbe := annotations[AnnotationSLOProbe]
	metric, hasMetric := annotations[AnnotationSLOMetric]
	quantile, hasQuantile := annotations[AnnotationSLOQuantile]
	latency, hasLatency := annotations[AnnotationSLOLatency]
	report := func(key, value string, kind error, reason, fallback string) {
		*problems = append(*problems, &Problem{Key: key, Value: value, Source: SourceAnnotation, Kind: kind, Reason: reason, Fallback: fallback})
	}
	const none = "no SLO signal"
	bad := func(key, value string, kind error, reason string) SLO {
		report(key, value, kind, reason, none)
		return SLO{}
	}
	if hasQuantile && (!hasMetric || hasProbe) {
		report(AnnotationSLOQuantile, quantile, ErrIgnored, fmt.Sprintf("the quantile of %s's histogram: only with one", AnnotationSLOMetric), "ignored")
		hasQuantile = false
	}
	if hasProbe && hasMetric {
		report(AnnotationSLOMetric, metric, ErrIgnored, fmt.Sprintf("one SLO signal a workload: %s or this, not both", AnnotationSLOProbe), "the probe alone")
		hasMetric = false
	}
	key, signal := AnnotationSLOProbe, probe
	if hasMetric {
		key, signal = AnnotationSLOMetric, metric
	}
	switch {
	case !hasProbe && !hasMetric && !hasLatency:
		return SLO{}
	case !hasProbe && !hasMetric:
		return bad(AnnotationSLOLatency, latency, ErrIgnored, fmt.Sprintf("needs %s or %s too (what to measure)", AnnotationSLOProbe, AnnotationSLOMetric))
	case !hasLatency:
		return bad(key, signal, ErrIgnored, fmt.Sprintf("needs %s too (the latency target, such as \"20ms\")", AnnotationSLOLatency))
	}
	slo := SLO{Probe: probe}
	if hasMetric {
		page, sel, err := ParseMetric(metric)
		if err != nil {
			return bad(AnnotationSLOMetric, metric, ErrMalformed, err.Error())
		}
		slo = SLO{Probe: page, Histogram: sel.String(), Quantile: DefaultSLOQuantile}
		if hasQuantile {
			q, err := strconv.ParseFloat(quantile, 64)
			if err != nil || !(q > 0 && q < 1) {
				return bad(AnnotationSLOQuantile, quantile, ErrMalformed, `not a number between 0 and 1 (such as "0.99")`)
			}
			slo.Quantile = q
		}
	} else if err := checkProbe(probe); err != nil {
		return bad(AnnotationSLOProbe, probe, ErrMalformed, err.Error())
	}
	d, err := time.ParseDuration(latency)
	if err != nil || d <= 0 || d > maxSLOLatency {
		return bad(AnnotationSLOLatency, latency, ErrMalformed, fmt.Sprintf(`not a duration in (0, %s] (such as "20ms")`, maxSLOLatency))
	}
	if tier != Shared && tier != Dedicated {
		report(key, signal, ErrIgnored, fmt.Sprintf("an SLO signal protects online work (tiers %s, %s), this workload is %s", Shared, Dedicated, tier), "ignored")
		return SLO{}
	}
	slo.Latency = d
	return slo
}
