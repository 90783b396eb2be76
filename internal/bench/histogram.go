package bench

import (
	"math"
	"math/bits"
	"time"
)

// Bucket layout (log-linear, HDR-style). Every power of two [2^e, 2^(e+1))
// of nanoseconds is split into 2^subBits equal sub-buckets, so a bucket is at
// most 1/128 of its lower bound wide; reporting its midpoint keeps the
// relative error ≤ 1/256 (0.4%), well inside the 1% we promise.
//
// The first tracked octave is [512 ns, 1024 ns), the one holding 1 µs, so
// everything from 1 µs up is precise; values below 512 ns share bucket 0
// (absolute error < 512 ns). The last tracked octave ends at 2^37 ns
// (≈137 s > 100 s); anything above goes to a final overflow bucket.
// Min and Max are kept exactly beside the buckets.
const (
	subBits     = 7
	subBuckets  = 1 << subBits
	firstOctave = 9  // 2^9 ns = 512 ns
	lastOctave  = 36 // [2^36, 2^37) ns ≈ [68.7 s, 137 s)
	numOctaves  = lastOctave - firstOctave + 1
	// bucket 0: underflow; then numOctaves*subBuckets precise buckets; then overflow.
	numBuckets     = 1 + numOctaves*subBuckets + 1
	overflowBucket = numBuckets - 1
)

// Histogram records latencies with ≤1% relative error between 1 µs and
// 100 s using a fixed ~29 KB of counters, so workers can record millions of
// operations without keeping them. Not safe for concurrent use: each worker
// keeps its own and they are merged.
type Histogram struct {
	counts   [numBuckets]int64
	count    int64
	sum      int64 // nanoseconds; exact mean without float drift
	min, max time.Duration
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{} }

// bucketOf maps a non-negative nanosecond value to its bucket.
func bucketOf(v int64) int {
	if v < 1<<firstOctave {
		return 0
	}
	e := bits.Len64(uint64(v)) - 1 // v in [2^e, 2^(e+1))
	if e > lastOctave {
		return overflowBucket
	}
	sub := int(v>>(e-subBits)) - subBuckets // drop the leading bit
	return 1 + (e-firstOctave)*subBuckets + sub
}

// midpoint is the value reported for bucket b (not called for the overflow
// bucket, whose values are unbounded).
func midpoint(b int) int64 {
	if b == 0 {
		return (1 << firstOctave) / 2
	}
	i := b - 1
	e := firstOctave + i/subBuckets
	sub := int64(i % subBuckets)
	shift := e - subBits
	lo := (subBuckets + sub) << shift
	return lo + (int64(1)<<shift)/2
}

// Record adds one observation; negative durations count as 0.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if h.count == 0 || d < h.min {
		h.min = d
	}
	if h.count == 0 || d > h.max {
		h.max = d
	}
	h.counts[bucketOf(int64(d))]++
	h.count++
	h.sum += int64(d)
}

// Merge adds every observation of o into h; o is unchanged. A nil o is a no-op.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.count == 0 {
		return
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	if h.count == 0 || o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of observations.
func (h *Histogram) Count() int64 {
	if h == nil {
		return 0
	}
	return h.count
}

// Min is the exact smallest observation (0 if empty).
func (h *Histogram) Min() time.Duration {
	if h == nil {
		return 0
	}
	return h.min
}

// Max is the exact largest observation (0 if empty).
func (h *Histogram) Max() time.Duration {
	if h == nil {
		return 0
	}
	return h.max
}

// Mean is the exact arithmetic mean (0 if empty).
func (h *Histogram) Mean() time.Duration {
	if h == nil || h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / h.count)
}

// Quantile returns the ceil(q·n)-th smallest observation, to within the
// bucket precision. It is monotonic in q, exact at the ends (Quantile(0) =
// Min, Quantile(1) = Max) and never outside [Min, Max]. q is clamped to
// [0,1] (NaN counts as 0); an empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h == nil || h.count == 0 {
		return 0
	}
	if !(q > 0) {
		return h.min
	}
	if q >= 1 {
		return h.max
	}
	rank := int64(math.Ceil(q * float64(h.count)))
	rank = max(1, min(rank, h.count))
	var cum int64
	for b, c := range h.counts {
		cum += c
		if cum < rank {
			continue
		}
		if b == overflowBucket {
			return h.max
		}
		// Clamping only moves the answer towards the true value, which lies
		// in both the bucket and [Min, Max].
		return min(max(time.Duration(midpoint(b)), h.min), h.max)
	}
	return h.max // unreachable: counts sum to count
}

// Reset empties the histogram for reuse (e.g. the next second's samples).
func (h *Histogram) Reset() { *h = Histogram{} }
