package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// WriteText prints the human summary: a header line naming the run, totals,
// then two right-aligned tables (throughput, latency) whose columns line up
// so runs can be compared by eye. Latency uses one unit for the whole row
// (chosen from the median) rather than rados bench's seconds everywhere.
func (s Summary) WriteText(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "cairn bench %s: pool %q, %s objects, %d in flight\n",
		s.Mode, s.Pool, fmtSize(s.ObjectSize), s.Concurrency)
	fmt.Fprintf(&b, "  %-12s%.2f s\n", "elapsed", s.Seconds)
	fmt.Fprintf(&b, "  %-12s%d ops, %s, %d errors\n", "completed", s.Ops, fmtSize(s.Bytes), s.Errors)
	b.WriteString("\n")

	const col = 11
	row := func(label string, cells ...string) {
		fmt.Fprintf(&b, "  %-14s", label)
		for _, c := range cells {
			fmt.Fprintf(&b, "%*s", col, c)
		}
		b.WriteString("\n")
	}
	row("", "avg", "stddev", "min", "max")
	row("MiB/s", fmtNum(s.Bandwidth.Avg), fmtNum(s.Bandwidth.Stddev), fmtNum(s.Bandwidth.Min), fmtNum(s.Bandwidth.Max))
	row("IOPS", fmtNum(s.IOPS.Avg), fmtNum(s.IOPS.Stddev), fmtNum(s.IOPS.Min), fmtNum(s.IOPS.Max))
	b.WriteString("\n")

	l := s.Latency
	unit, div := latencyUnit(l.P50)
	cell := func(v float64) string { return fmtNum(v / div) }
	row("", "avg", "min", "p50", "p90", "p99", "p99.9", "max")
	row("latency ("+unit+")", cell(l.Avg), cell(l.Min), cell(l.P50), cell(l.P90), cell(l.P99), cell(l.P999), cell(l.Max))

	if s.CPU != nil || s.Efficiency != nil {
		b.WriteString("\n")
	}
	if c := s.CPU; c != nil {
		fmt.Fprintf(&b, "  %-14s%s s total, %s s/GiB, %s s/1000 ops\n", "cluster CPU",
			fmtNum(c.ClusterSeconds), fmtNum(c.SecondsPerGiB), fmtNum(c.SecondsPer1000Ops))
	}
	if e := s.Efficiency; e != nil {
		var parts []string
		if e.BoundLatencyUs > 0 {
			parts = append(parts, fmt.Sprintf("bound latency %s µs, latency %s%%", fmtNum(e.BoundLatencyUs), fmtNum(e.LatencyPercent)))
		}
		if e.BoundCPUPerGiB > 0 {
			parts = append(parts, fmt.Sprintf("CPU floor %s s/GiB, CPU %s%%", fmtNum(e.BoundCPUPerGiB), fmtNum(e.CPUPercent)))
		}
		fmt.Fprintf(&b, "  %-14s%s", "efficiency", strings.Join(parts, "; "))
		if e.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.Note)
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// ProgressHeader is the column header matching ProgressLine; print it once
// before the first line (and again every screenful if desired).
func ProgressHeader() string {
	return fmt.Sprintf("%7s %8s %10s %10s %9s %9s %10s %10s",
		"sec", "inflight", "cur MiB/s", "avg MiB/s", "cur IOPS", "avg IOPS", "last lat", "avg lat")
}

// ProgressLine is the once-a-second line: elapsed time, operations in
// flight, this second's and the run-so-far MiB/s and IOPS, the last and the
// average latency. Byte counts of zero are derived from ops × objectSize, so
// a caller counting only ops still gets bandwidth.
func ProgressLine(s Sample, elapsed time.Duration, totalOps, totalBytes int64, avgLatency time.Duration, objectSize int64) string {
	curBytes := s.Bytes
	if curBytes == 0 {
		curBytes = s.Ops * objectSize
	}
	if totalBytes == 0 {
		totalBytes = totalOps * objectSize
	}
	var avgBW, avgIOPS float64
	if sec := elapsed.Seconds(); sec > 0 {
		avgBW = float64(totalBytes) / MiB / sec
		avgIOPS = float64(totalOps) / sec
	}
	return fmt.Sprintf("%7.1f %8d %10s %10s %9s %9s %10s %10s",
		elapsed.Seconds(), s.InFlight,
		fmtNum(float64(curBytes)/MiB), fmtNum(avgBW),
		fmtNum(float64(s.Ops)), fmtNum(avgIOPS),
		fmtLatency(s.LastLatency), fmtLatency(avgLatency))
}

// fmtNum keeps about four significant digits without switching to
// exponents, so table columns stay narrow and comparable.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// latencyUnit picks µs, ms or s from a representative value in µs.
func latencyUnit(us float64) (string, float64) {
	switch {
	case us >= 1e6:
		return "s", 1e6
	case us >= 1e3:
		return "ms", 1e3
	default:
		return "µs", 1
	}
}

// fmtLatency formats a duration with its own unit, for the progress line.
func fmtLatency(d time.Duration) string {
	unit, div := latencyUnit(us(d))
	return fmtNum(us(d)/div) + " " + unit
}

// fmtSize prints a byte count in binary units ("4 KiB", "1.50 MiB").
func fmtSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n)
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmtNum(v) + " " + units[i]
}
