// Package promhist reads a latency histogram from a Prometheus text exposition (what a
// service serves at /metrics) and gives the quantiles of what it counted between two reads.
// The agent takes an online service's tail latency from it: every request the service served
// counts, where a probe sees one request per interval.
package promhist

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Selector names one histogram: its name (without _bucket), the labels a series must have to
// count (the others are summed over, as `sum by (le)` does), and the unit its bounds are in.
type Selector struct {
	Name   string
	Labels map[string]string
	// Seconds is one of the histogram's units in seconds, from its name: 1e-3 for a name that
	// ends in _milliseconds or _ms, 1e-6 for _microseconds or _us, else 1 (Prometheus's base
	// unit).
	Seconds float64
}

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// ParseSelector reads NAME or NAME{label="value",...}: a histogram's name, without its _bucket
// suffix, and the labels its series must carry, quoted as in the exposition.
func ParseSelector(s string) (Selector, error) {
	name, labels, hasLabels := strings.Cut(s, "{")
	if !metricName.MatchString(name) {
		return Selector{}, fmt.Errorf("%q is not a metric name", name)
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if strings.HasSuffix(name, suffix) {
			return Selector{}, fmt.Errorf("name the histogram, not its series: %q without %s", name, suffix)
		}
	}
	sel := Selector{Name: name, Labels: map[string]string{}, Seconds: unitOf(name)}
	if !hasLabels {
		return sel, nil
	}
	// The exposition's own parser reads the labels, escapes and all, off a line of one sample.
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(name + "{" + labels + " 0\n"))
	if err != nil {
		return Selector{}, fmt.Errorf("labels {%s: want label=\"value\" pairs, comma-separated, in braces: %v", labels, err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == model.BucketLabel {
					return Selector{}, errors.New(`the le label is the buckets' own: leave it out`)
				}
				sel.Labels[l.GetName()] = l.GetValue()
			}
		}
	}
	return sel, nil
}

func unitOf(name string) float64 {
	switch {
	case strings.HasSuffix(name, "_milliseconds"), strings.HasSuffix(name, "_ms"):
		return 1e-3
	case strings.HasSuffix(name, "_microseconds"), strings.HasSuffix(name, "_us"):
		return 1e-6
	}
	return 1
}

// String is the selector as ParseSelector reads it.
func (s Selector) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var pairs []string
	for k, v := range s.Labels {
		pairs = append(pairs, k+"="+strconv.Quote(v))
	}
	sort.Strings(pairs)
	return s.Name + "{" + strings.Join(pairs, ",") + "}"
}

// Bucket is a histogram bucket: how many observations were at most UpperBound seconds.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Buckets are a histogram's cumulative buckets by rising bound, the last one +Inf.
type Buckets []Bucket

// maxLine bounds one line of the exposition.
const maxLine = 1 << 20

// Read finds sel's histogram in an exposition and sums the buckets of its matching series by
// bound. Only the histogram's own lines are parsed; the rest is skipped unread. A name that is
// not a histogram there, or has no matching series, is an error that says so.
func Read(r io.Reader, sel Selector) (Buckets, error) {
	bucketName := sel.Name + "_bucket"
	typeLine := "# TYPE " + sel.Name + " "
	var lines bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte(typeLine)); ok {
			if kind := string(bytes.TrimSpace(rest)); kind != "histogram" {
				return nil, fmt.Errorf("%s is a %s, not a histogram", sel.Name, kind)
			}
			continue
		}
		if rest, ok := bytes.CutPrefix(line, []byte(bucketName)); ok && len(rest) > 0 && (rest[0] == '{' || rest[0] == ' ') {
			lines.Write(line)
			lines.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(&lines)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", bucketName, err)
	}
	byBound := map[float64]float64{}
	matched := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !matches(labels, sel.Labels) {
				continue
			}
			le, err := strconv.ParseFloat(labels[model.BucketLabel], 64)
			if err != nil || math.IsNaN(le) {
				return nil, fmt.Errorf("%s: a bucket without a numeric le label (%q)", bucketName, labels[model.BucketLabel])
			}
			// Untyped: the parser sees the bucket lines without their histogram's TYPE line.
			byBound[le] += m.GetUntyped().GetValue()
			matched++
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("no %s series in the page (a histogram %s)", bucketName, sel)
	}
	if _, ok := byBound[math.Inf(1)]; !ok {
		return nil, fmt.Errorf("%s has no le=\"+Inf\" bucket", sel)
	}
	b := make(Buckets, 0, len(byBound))
	for le, n := range byBound {
		b = append(b, Bucket{UpperBound: le * sel.Seconds, Count: n})
	}
	sort.Slice(b, func(i, j int) bool { return b[i].UpperBound < b[j].UpperBound })
	// Cumulative: no count below zero or below the bucket's under it, none NaN.
	for i, bk := range b {
		if math.IsNaN(bk.Count) || bk.Count < 0 || i > 0 && bk.Count < b[i-1].Count {
			return nil, fmt.Errorf("%s: le=%q counts %v, not a cumulative count over the buckets under it", sel, strconv.FormatFloat(bk.UpperBound/sel.Seconds, 'g', -1, 64), bk.Count)
		}
	}
	return b, nil
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Total is how many observations the histogram counted.
func (b Buckets) Total() float64 {
	if len(b) == 0 {
		return 0
	}
	return b[len(b)-1].Count
}

// Since is what b counted after earlier was read: each bucket's count less earlier's. False
// where the two do not line up (other bounds) or a count fell (the service restarted): then
// there is no telling what was counted between them.
func (b Buckets) Since(earlier Buckets) (Buckets, bool) {
	if len(earlier) != len(b) {
		return nil, false
	}
	out := make(Buckets, len(b))
	for i := range b {
		n := b[i].Count - earlier[i].Count
		if b[i].UpperBound != earlier[i].UpperBound || n < 0 {
			return nil, false
		}
		out[i] = Bucket{UpperBound: b[i].UpperBound, Count: n}
	}
	return out, true
}

// Quantile is the q-quantile (0 < q < 1) in seconds, interpolated linearly within its bucket as
// Prometheus's histogram_quantile does. beyond says it lies in the +Inf bucket: then it is only
// known to be over the last finite bound, which is returned. NaN with no observation.
func (b Buckets) Quantile(q float64) (seconds float64, beyond bool) {
	total := b.Total()
	if total <= 0 {
		return math.NaN(), false
	}
	rank := q * total
	i := sort.Search(len(b), func(i int) bool { return b[i].Count >= rank })
	if i >= len(b)-1 { // the +Inf bucket
		if len(b) < 2 {
			return 0, true
		}
		return b[len(b)-2].UpperBound, true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = b[i-1].UpperBound, b[i-1].Count
	}
	if lower > b[i].UpperBound { // a negative first bound: no interpolation below it
		lower = b[i].UpperBound
	}
	in := b[i].Count - below
	if in <= 0 {
		return b[i].UpperBound, false
	}
	return lower + (b[i].UpperBound-lower)*(rank-below)/in, false
}

// Over estimates how many observations were slower than seconds, interpolating linearly
// within the bucket it falls in. Those in the +Inf bucket all count when seconds is past the
// last finite bound: a histogram that cannot tell counts them as slower.
func (b Buckets) Over(seconds float64) float64 {
	total := b.Total()
	lower, below := 0.0, 0.0
	for _, bk := range b[:max(len(b)-1, 0)] {
		if seconds < bk.UpperBound {
			width := bk.UpperBound - lower
			atMost := below
			if width > 0 && seconds > lower {
				atMost += (bk.Count - below) * (seconds - lower) / width
			}
			return total - atMost
		}
		lower, below = bk.UpperBound, bk.Count
	}
	return total - below
}
