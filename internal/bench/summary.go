package bench

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// MiB is the unit of every bandwidth figure (MiB/s, as rados bench).
const MiB = 1 << 20

// Sample is one second of a run, filled by the caller's per-second ticker.
type Sample struct {
	Second      int           // 1-based second of the run this sample closes
	Ops         int64         // operations completed during that second
	Bytes       int64         // bytes moved during that second (0: Summarize and ProgressLine use Ops×objectSize; PlotSVG needs it set)
	InFlight    int           // operations outstanding when the sample was taken
	LastLatency time.Duration // latency of the most recent completion
	Latency     *Histogram    // that second's latencies (may be nil)
}

// Summary is what `cairn bench` prints and emits as JSON.
type Summary struct {
	Mode        string      `json:"mode"` // write, seq, rand
	Pool        string      `json:"pool"`
	ObjectSize  int64       `json:"object_size"`
	Concurrency int         `json:"concurrency"`
	Seconds     float64     `json:"seconds"` // wall time measured
	Ops         int64       `json:"ops"`
	Bytes       int64       `json:"bytes"` // always Ops*ObjectSize
	Errors      int64       `json:"errors"`
	Bandwidth   Stat        `json:"bandwidth_mib_s"` // avg = Bytes/Seconds; stddev/min/max over per-second samples
	IOPS        Stat        `json:"iops"`            // avg = Ops/Seconds; stddev/min/max over per-second samples
	Latency     LatencyStat `json:"latency_us"`
	CPU         *CPUStat    `json:"cpu,omitempty"`        // filled by the caller
	Efficiency  *Efficiency `json:"efficiency,omitempty"` // filled by the caller
}

// Stat summarises a rate: the whole-run average and the spread of the
// per-second samples around it.
type Stat struct {
	Avg    float64 `json:"avg"`
	Stddev float64 `json:"stddev"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// LatencyStat is in microseconds (float64, so sub-µs values survive JSON).
type LatencyStat struct {
	Avg  float64 `json:"avg"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
}

// CPUStat is the cluster CPU spent during the run, normalised by work done.
type CPUStat struct {
	ClusterSeconds    float64 `json:"cluster_seconds"`
	SecondsPerGiB     float64 `json:"seconds_per_gib"`
	SecondsPer1000Ops float64 `json:"seconds_per_1000_ops"`
}

// Efficiency compares the measured latency, and the CPU per GiB of a
// write run, to bounds the caller computes (zero: no such bound).
type Efficiency struct {
	BoundLatencyUs float64 `json:"bound_latency_us,omitempty"`
	LatencyPercent float64 `json:"latency_percent,omitempty"`
	BoundCPUPerGiB float64 `json:"bound_cpu_s_per_gib,omitempty"`
	CPUPercent     float64 `json:"cpu_percent,omitempty"`
	Note           string  `json:"note,omitempty"`
}

// Summarize turns a run into a Summary. total holds every successful
// operation's latency and is authoritative for Ops (samples may miss a
// partial last second); if total is nil, Ops is the sum of the samples.
// Min/max/stddev of bandwidth and IOPS are over the samples, so the caller
// should pass whole seconds only (drop a trailing partial one). The stddev is
// the sample standard deviation (n−1), as rados bench reports it.
func Summarize(mode, pool string, objectSize int64, concurrency int, elapsed time.Duration, samples []Sample, total *Histogram, errors int64) Summary {
	s := Summary{
		Mode:        mode,
		Pool:        pool,
		ObjectSize:  objectSize,
		Concurrency: concurrency,
		Seconds:     elapsed.Seconds(),
		Errors:      errors,
	}
	if total != nil {
		s.Ops = total.Count()
	} else {
		for _, x := range samples {
			s.Ops += x.Ops
		}
	}
	s.Bytes = s.Ops * objectSize

	bw := make([]float64, len(samples))
	iops := make([]float64, len(samples))
	for i, x := range samples {
		b := x.Bytes
		if b == 0 {
			b = x.Ops * objectSize
		}
		bw[i] = float64(b) / MiB
		iops[i] = float64(x.Ops)
	}
	s.Bandwidth = spread(bw)
	s.IOPS = spread(iops)
	if s.Seconds > 0 {
		s.Bandwidth.Avg = float64(s.Bytes) / MiB / s.Seconds
		s.IOPS.Avg = float64(s.Ops) / s.Seconds
	}

	if total.Count() > 0 {
		s.Latency = LatencyStat{
			Avg:  us(total.Mean()),
			Min:  us(total.Min()),
			Max:  us(total.Max()),
			P50:  us(total.Quantile(0.50)),
			P90:  us(total.Quantile(0.90)),
			P99:  us(total.Quantile(0.99)),
			P999: us(total.Quantile(0.999)),
		}
	}
	return s
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// spread fills Stddev/Min/Max (Avg is the run average, set by the caller).
func spread(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	st := Stat{Min: xs[0], Max: xs[0]}
	var sum float64
	for _, x := range xs {
		sum += x
		st.Min = min(st.Min, x)
		st.Max = max(st.Max, x)
	}
	if len(xs) > 1 {
		mean := sum / float64(len(xs))
		var ss float64
		for _, x := range xs {
			ss += (x - mean) * (x - mean)
		}
		st.Stddev = math.Sqrt(ss / float64(len(xs)-1))
	}
	return st
}

// Check reports every internal inconsistency of s, so tests (and a
// paranoid caller) can trust what is printed: Bytes = Ops*ObjectSize, no
// negative counts, no NaN/Inf, averages equal to totals/Seconds, min ≤ max,
// and ordered latency percentiles with the average inside [min, max].
func (s Summary) Check() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if s.Ops < 0 || s.Bytes < 0 || s.Errors < 0 || s.ObjectSize < 0 || s.Concurrency < 0 {
		bad("negative count (ops %d, bytes %d, errors %d, object size %d, concurrency %d)",
			s.Ops, s.Bytes, s.Errors, s.ObjectSize, s.Concurrency)
	}
	if s.Bytes != s.Ops*s.ObjectSize {
		bad("bytes %d != ops %d × object size %d", s.Bytes, s.Ops, s.ObjectSize)
	}
	floats := map[string]float64{
		"seconds":       s.Seconds,
		"bandwidth.avg": s.Bandwidth.Avg, "bandwidth.stddev": s.Bandwidth.Stddev,
		"bandwidth.min": s.Bandwidth.Min, "bandwidth.max": s.Bandwidth.Max,
		"iops.avg": s.IOPS.Avg, "iops.stddev": s.IOPS.Stddev, "iops.min": s.IOPS.Min, "iops.max": s.IOPS.Max,
		"latency.avg": s.Latency.Avg, "latency.min": s.Latency.Min, "latency.max": s.Latency.Max,
		"latency.p50": s.Latency.P50, "latency.p90": s.Latency.P90, "latency.p99": s.Latency.P99,
		"latency.p999": s.Latency.P999,
	}
	if s.CPU != nil {
		floats["cpu.cluster_seconds"] = s.CPU.ClusterSeconds
		floats["cpu.seconds_per_gib"] = s.CPU.SecondsPerGiB
		floats["cpu.seconds_per_1000_ops"] = s.CPU.SecondsPer1000Ops
	}
	if s.Efficiency != nil {
		floats["efficiency.bound_latency_us"] = s.Efficiency.BoundLatencyUs
		floats["efficiency.latency_percent"] = s.Efficiency.LatencyPercent
		floats["efficiency.bound_cpu_s_per_gib"] = s.Efficiency.BoundCPUPerGiB
		floats["efficiency.cpu_percent"] = s.Efficiency.CPUPercent
	}
	for _, name := range slices.Sorted(maps.Keys(floats)) {
		v := floats[name]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			bad("%s is %v", name, v)
		} else if v < 0 {
			bad("%s is negative (%g)", name, v)
		}
	}

	if s.Seconds > 0 {
		if !approxEqual(s.Bandwidth.Avg, float64(s.Bytes)/MiB/s.Seconds) {
			bad("bandwidth avg %g != bytes/seconds %g", s.Bandwidth.Avg, float64(s.Bytes)/MiB/s.Seconds)
		}
		if !approxEqual(s.IOPS.Avg, float64(s.Ops)/s.Seconds) {
			bad("iops avg %g != ops/seconds %g", s.IOPS.Avg, float64(s.Ops)/s.Seconds)
		}
	} else if s.Ops > 0 {
		bad("%d ops in %g seconds", s.Ops, s.Seconds)
	}
	for _, r := range []struct {
		name string
		st   Stat
	}{{"bandwidth", s.Bandwidth}, {"iops", s.IOPS}} {
		if r.st.Min > r.st.Max {
			bad("%s min %g > max %g", r.name, r.st.Min, r.st.Max)
		}
	}

	l := s.Latency
	chain := []struct {
		name string
		v    float64
	}{{"min", l.Min}, {"p50", l.P50}, {"p90", l.P90}, {"p99", l.P99}, {"p999", l.P999}, {"max", l.Max}}
	for i := 1; i < len(chain); i++ {
		if chain[i-1].v > chain[i].v {
			bad("latency %s %g > %s %g", chain[i-1].name, chain[i-1].v, chain[i].name, chain[i].v)
		}
	}
	if l.Avg < l.Min || l.Avg > l.Max {
		bad("latency avg %g outside [min %g, max %g]", l.Avg, l.Min, l.Max)
	}
	if s.Ops == 0 && l != (LatencyStat{}) {
		bad("latency reported for a run with no ops")
	}
	return errors.Join(errs...)
}

// approxEqual compares within a relative 1e-9, enough for float round-off and
// JSON round trips.
func approxEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1e-300)
}
