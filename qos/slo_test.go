package qos

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSLOAnnotations(t *testing.T) {
	for _, c := range []struct {
		ann     map[string]string
		tier    string
		want    SLO
		problem error
		says    string
	}{
		{ann: map[string]string{AnnotationSLOProbe: "http://127.0.0.1:8080/healthz", AnnotationSLOLatency: "20ms"}, tier: "shared",
			want: SLO{Probe: "http://127.0.0.1:8080/healthz", Latency: 20 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "http://db:5432/", AnnotationSLOLatency: "5ms"}, tier: "dedicated",
			want: SLO{Probe: "http://db:5432/", Latency: 5 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "redis://127.0.0.1:6379/PING", AnnotationSLOLatency: "2ms"}, tier: "shared",
			want: SLO{Probe: "redis://127.0.0.1:6379/PING", Latency: 2 * time.Millisecond}},
		{ann: map[string]string{AnnotationSLOProbe: "https://x/", AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrMalformed, says: "http://"},
		{ann: map[string]string{AnnotationSLOProbe: "redis://127.0.0.1:6379/", AnnotationSLOLatency: "2ms"}, tier: "shared", problem: ErrMalformed, says: "names no command"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "fast"}, tier: "shared", problem: ErrMalformed, says: "duration"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "-1s"}, tier: "shared", problem: ErrMalformed, says: "duration"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "1m"}, tier: "shared", problem: ErrMalformed, says: "10s"},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/"}, tier: "shared", problem: ErrIgnored, says: AnnotationSLOLatency},
		{ann: map[string]string{AnnotationSLOLatency: "20ms"}, tier: "shared", problem: ErrIgnored, says: AnnotationSLOProbe},
		{ann: map[string]string{AnnotationSLOProbe: "http://x/", AnnotationSLOLatency: "20ms"}, tier: "reclaimed", problem: ErrIgnored, says: "online work"},
	} {
		ann := map[string]string{AnnotationQoSLevel: c.tier}
		for k, v := range c.ann {
			ann[k] = v
		}
		d := Classify(Metadata{Name: "w", Annotations: ann}, Policy{})
		if d.SLO != c.want {
			t.Errorf("%v: SLO %+v, want %+v", c.ann, d.SLO, c.want)
		}
		switch {
		case c.problem == nil && len(d.Problems) > 0:
			t.Errorf("%v: problems %v", c.ann, d.Problems)
		case c.problem != nil && (len(d.Problems) != 1 || !errors.Is(d.Problems[0], c.problem) || !strings.Contains(d.Problems[0].Error(), c.says)):
			t.Errorf("%v: problems %v, want one %v saying %q", c.ann, d.Problems, c.problem, c.says)
		}
	}
}
