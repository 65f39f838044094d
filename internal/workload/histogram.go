package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear (HDR-style) latency histogram over nanoseconds.
//
// Values below 128ns are counted exactly; above, each power of two is split
// into 128 linear sub-buckets, so a bucket is at most 1/128 of its lower bound
// wide and a reported quantile (the bucket midpoint, clamped to the exact
// min/max seen) is within 0.4% of a recorded value. The range runs to 2^36ns
// (about 68.7s); larger values are counted in the last bucket (max stays
// exact). Record does not allocate.
//
// A Histogram is not safe for concurrent use; the zero value is empty and
// ready. It is about 30 KiB: pass it by pointer.
type Histogram struct {
	counts [histBuckets]uint64
	count  uint64
	sum    float64 // ns, for the mean
	min    int64
	max    int64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits // linear sub-buckets per power of two
	histMaxExp  = 36               // values up to 2^36-1 ns
	histBuckets = (histMaxExp - histSubBits + 1) << histSubBits
	histMaxVal  = int64(1)<<histMaxExp - 1
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{} }

func histIndex(v int64) int {
	if v < histSub {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	if v > histMaxVal {
		v = histMaxVal
	}
	exp := bits.Len64(uint64(v)) - 1 // >= histSubBits
	shift := exp - histSubBits
	sub := int(v>>uint(shift)) & (histSub - 1)
	return (shift+1)<<histSubBits + sub
}

// histBucket returns the lower bound and width (ns) of bucket i.
func histBucket(i int) (low, width int64) {
	if i < histSub {
		return int64(i), 1
	}
	shift := i>>histSubBits - 1
	sub := int64(i & (histSub - 1))
	return (histSub + sub) << uint(shift), int64(1) << uint(shift)
}

// Record adds one observation. Negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[histIndex(v)]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += float64(v)
}

// Count is the number of observations.
func (h *Histogram) Count() uint64 { return h.count }

// Max is the largest observation (exact), 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest observation (exact), 0 when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the exact mean of the observations, 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.count))
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// Merge adds all observations of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.count == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.count += o.count
	h.sum += o.sum
}

// Quantile returns the value at quantile q in [0,1]: the smallest recorded
// value v such that at least ceil(q*Count) observations are <= v, within the
// bucket precision. Quantile(1) is the exact max; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	var out [1]time.Duration
	h.Quantiles([]float64{q}, out[:])
	return out[0]
}

// Quantiles fills out[i] with Quantile(qs[i]) in one pass; qs must be
// ascending and len(out) >= len(qs).
func (h *Histogram) Quantiles(qs []float64, out []time.Duration) {
	if h.count == 0 {
		for i := range qs {
			out[i] = 0
		}
		return
	}
	var cum uint64
	b := 0
	for i, q := range qs {
		if q >= 1 {
			out[i] = time.Duration(h.max)
			continue
		}
		rank := uint64(math.Ceil(q * float64(h.count)))
		if rank < 1 {
			rank = 1
		}
		for ; b < histBuckets; b++ {
			if cum+h.counts[b] >= rank {
				break
			}
			cum += h.counts[b]
		}
		if b >= histBuckets { // cannot happen with consistent counts
			out[i] = time.Duration(h.max)
			continue
		}
		low, width := histBucket(b)
		v := low + width/2
		if v < h.min {
			v = h.min
		}
		if v > h.max {
			v = h.max
		}
		out[i] = time.Duration(v)
	}
}

// CountAtLeast returns how many observations are >= d, to bucket precision
// (observations in d's bucket count as >= d).
func (h *Histogram) CountAtLeast(d time.Duration) uint64 {
	var n uint64
	for i := histIndex(int64(d)); i < histBuckets; i++ {
		n += h.counts[i]
	}
	return n
}

// histJSON is the sparse wire form: "b" holds [bucket index, count] pairs.
type histJSON struct {
	Count uint64      `json:"count"`
	Sum   float64     `json:"sum_ns"`
	Min   int64       `json:"min_ns"`
	Max   int64       `json:"max_ns"`
	B     [][2]uint64 `json:"b"`
}

// MarshalJSON writes the histogram sparsely, so that another process (the
// demo, the benchmark) can decode and Merge it.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	j := histJSON{Count: h.count, Sum: h.sum, Min: h.min, Max: h.max, B: [][2]uint64{}}
	for i, c := range h.counts {
		if c != 0 {
			j.B = append(j.B, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var j histJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var n Histogram
	var total uint64
	for _, p := range j.B {
		if p[0] >= histBuckets {
			return fmt.Errorf("histogram bucket %d out of range", p[0])
		}
		n.counts[p[0]] += p[1]
		total += p[1]
	}
	if total != j.Count {
		return errors.New("histogram count does not match its buckets")
	}
	n.count, n.sum, n.min, n.max = j.Count, j.Sum, j.Min, j.Max
	*h = n
	return nil
}
