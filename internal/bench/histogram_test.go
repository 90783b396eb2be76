package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// oracle is the exact definition Quantile approximates: the ceil(q·n)-th
// smallest value, with q = 0 the minimum.
func oracle(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	if q <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

var testQuantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 0.9999, 1}

func distributions(r *rand.Rand) map[string]func() time.Duration {
	return map[string]func() time.Duration{
		"uniform": func() time.Duration { return time.Duration(r.Int64N(int64(100 * time.Millisecond))) },
		"uniform-wide": func() time.Duration {
			// log-uniform from 1 µs to 100 s: every octave of the range
			return time.Duration(math.Pow(10, 3+8*r.Float64()))
		},
		"exponential": func() time.Duration { return time.Duration(r.ExpFloat64() * float64(2*time.Millisecond)) },
		"bimodal": func() time.Duration {
			if r.IntN(10) == 0 {
				return time.Duration(50*time.Millisecond) + time.Duration(r.NormFloat64()*float64(5*time.Millisecond))
			}
			return time.Duration(300*time.Microsecond) + time.Duration(r.NormFloat64()*float64(30*time.Microsecond))
		},
		"constant": func() time.Duration { return 1234567 * time.Nanosecond },
		"tiny":     func() time.Duration { return time.Duration(r.Int64N(3000)) }, // 0–3 µs, around the first bucket
		"huge":     func() time.Duration { return 50*time.Second + time.Duration(r.Int64N(int64(50*time.Second))) },
	}
}

func TestHistogramAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, gen := range distributions(r) {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{1, 2, 7, 100, 20000} {
				h := NewHistogram()
				vals := make([]time.Duration, n)
				var sum int64
				for i := range vals {
					v := max(gen(), 0)
					vals[i] = v
					sum += int64(v)
					h.Record(v)
				}
				slices.Sort(vals)
				if h.Count() != int64(n) {
					t.Fatalf("n=%d: Count %d", n, h.Count())
				}
				if h.Min() != vals[0] || h.Max() != vals[n-1] {
					t.Fatalf("n=%d: Min/Max %v/%v, want %v/%v", n, h.Min(), h.Max(), vals[0], vals[n-1])
				}
				if want := time.Duration(sum / int64(n)); h.Mean() != want {
					t.Fatalf("n=%d: Mean %v, want %v", n, h.Mean(), want)
				}
				for _, q := range testQuantiles {
					got, want := h.Quantile(q), oracle(vals, q)
					tol := 0.01*float64(want) + float64(time.Microsecond)
					if want >= time.Microsecond {
						tol = 0.01 * float64(want) // ≤1% from 1 µs up
					}
					if math.Abs(float64(got-want)) > tol {
						t.Errorf("n=%d q=%v: got %v, want %v (±%v)", n, q, got, want, time.Duration(tol))
					}
				}
				if h.Quantile(0) != h.Min() || h.Quantile(1) != h.Max() {
					t.Errorf("n=%d: Quantile(0)/(1) = %v/%v, want Min/Max", n, h.Quantile(0), h.Quantile(1))
				}
			}
		})
	}
}

// TestHistogramRelativeErrorBound walks every bucket boundary region from
// 1 µs to 100 s and checks a single recorded value reads back within 1%.
func TestHistogramRelativeErrorBound(t *testing.T) {
	worst := 0.0
	for v := int64(time.Microsecond); v <= int64(100*time.Second); v += v/97 + 1 {
		b := bucketOf(v)
		if b == 0 || b == overflowBucket {
			t.Fatalf("%v in bucket %d", time.Duration(v), b)
		}
		rel := math.Abs(float64(midpoint(b)-v)) / float64(v)
		worst = max(worst, rel)
		if bucketOf(midpoint(b)) != b {
			t.Fatalf("midpoint of bucket %d (%d ns) maps to bucket %d", b, midpoint(b), bucketOf(midpoint(b)))
		}
	}
	if worst > 0.01 {
		t.Fatalf("worst relative error %.4f%% > 1%%", worst*100)
	}
	t.Logf("worst relative error %.3f%%", worst*100)
}

func TestHistogramMonotonic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	h := NewHistogram()
	for range 5000 {
		h.Record(time.Duration(r.ExpFloat64() * float64(time.Millisecond)))
	}
	prev := time.Duration(-1)
	for i := 0; i <= 10000; i++ {
		q := float64(i) / 10000
		v := h.Quantile(q)
		if v < prev {
			t.Fatalf("Quantile(%v) = %v < previous %v", q, v, prev)
		}
		if v < h.Min() || v > h.Max() {
			t.Fatalf("Quantile(%v) = %v outside [%v, %v]", q, v, h.Min(), h.Max())
		}
		prev = v
	}
	// Out-of-range q clamps rather than panicking.
	if h.Quantile(-1) != h.Min() || h.Quantile(2) != h.Max() || h.Quantile(math.NaN()) != h.Min() {
		t.Fatal("out-of-range q not clamped")
	}
}

func TestHistogramMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	all := NewHistogram()
	parts := []*Histogram{NewHistogram(), NewHistogram(), NewHistogram(), NewHistogram()}
	for i := range 10000 {
		v := time.Duration(r.ExpFloat64() * float64(time.Duration(i%4+1)*time.Millisecond))
		all.Record(v)
		parts[i%3].Record(v) // parts[3] stays empty
	}
	merged := NewHistogram()
	merged.Merge(nil)
	for _, p := range parts {
		merged.Merge(p)
	}
	if *merged != *all {
		t.Fatalf("merged histogram differs from recording into one: count %d/%d min %v/%v max %v/%v",
			merged.Count(), all.Count(), merged.Min(), all.Min(), merged.Max(), all.Max())
	}
	// Merging into a non-empty histogram keeps its own min.
	a, b := NewHistogram(), NewHistogram()
	a.Record(time.Microsecond)
	b.Record(time.Second)
	a.Merge(b)
	if a.Min() != time.Microsecond || a.Max() != time.Second || a.Count() != 2 {
		t.Fatalf("merge: min %v max %v count %d", a.Min(), a.Max(), a.Count())
	}
}

func TestHistogramEmptyAndReset(t *testing.T) {
	for _, h := range []*Histogram{NewHistogram(), {}, nil} {
		if h.Count() != 0 || h.Min() != 0 || h.Max() != 0 || h.Mean() != 0 {
			t.Fatalf("empty: count %d min %v max %v mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
		}
		for _, q := range testQuantiles {
			if v := h.Quantile(q); v != 0 {
				t.Fatalf("empty Quantile(%v) = %v", q, v)
			}
		}
	}
	h := NewHistogram()
	h.Record(5 * time.Millisecond)
	h.Record(-time.Second) // clamps to 0
	if h.Min() != 0 {
		t.Fatalf("negative duration: Min %v", h.Min())
	}
	h.Reset()
	if *h != (Histogram{}) {
		t.Fatal("Reset left state behind")
	}
	h.Record(7 * time.Millisecond)
	if h.Min() != 7*time.Millisecond || h.Quantile(0.5) != 7*time.Millisecond {
		t.Fatalf("after Reset: min %v p50 %v", h.Min(), h.Quantile(0.5))
	}
}

// TestHistogramOverflow: values beyond the tracked range keep exact Min/Max
// and quantiles stay within [Min, Max].
func TestHistogramOverflow(t *testing.T) {
	h := NewHistogram()
	h.Record(time.Hour)
	h.Record(2 * time.Hour)
	h.Record(time.Millisecond)
	if h.Max() != 2*time.Hour || h.Quantile(1) != 2*time.Hour {
		t.Fatalf("max %v", h.Max())
	}
	if q := h.Quantile(0.9); q < time.Hour || q > 2*time.Hour {
		t.Fatalf("p90 %v outside overflow values", q)
	}
}
