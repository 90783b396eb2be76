package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// handRun: 4 KiB objects, 4 seconds of 256, 512, 768, 1024 ops (1–4 MiB/s);
// all latencies 1 ms but one of 9 ms.
func handRun() ([]Sample, *Histogram) {
	var samples []Sample
	total := NewHistogram()
	n := 0
	for i := 1; i <= 4; i++ {
		ops := int64(256 * i)
		samples = append(samples, Sample{Second: i, Ops: ops, Bytes: ops * 4096, InFlight: 16})
		for range ops {
			n++
			if n == 100 {
				total.Record(9 * time.Millisecond)
			} else {
				total.Record(time.Millisecond)
			}
		}
	}
	return samples, total
}

func TestSummarizeHandComputed(t *testing.T) {
	samples, total := handRun()
	s := Summarize("write", "data", 4096, 16, 4*time.Second, samples, total, 3)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if s.Ops != 2560 || s.Bytes != 2560*4096 || s.Errors != 3 || s.Seconds != 4 {
		t.Fatalf("totals: %+v", s)
	}
	// Per-second MiB/s 1,2,3,4: mean 2.5, sample stddev sqrt(5/3).
	wantBW := Stat{Avg: 2.5, Stddev: math.Sqrt(5.0 / 3), Min: 1, Max: 4}
	wantIOPS := Stat{Avg: 640, Stddev: 256 * math.Sqrt(5.0/3), Min: 256, Max: 1024}
	for _, c := range []struct {
		name      string
		got, want Stat
	}{{"bandwidth", s.Bandwidth, wantBW}, {"iops", s.IOPS, wantIOPS}} {
		if !near(c.got.Avg, c.want.Avg) || !near(c.got.Stddev, c.want.Stddev) || c.got.Min != c.want.Min || c.got.Max != c.want.Max {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}
	// Mean (2559·1000 + 9000)/2560 µs exactly; percentiles 1000 µs to
	// the histogram's precision.
	l := s.Latency
	if l.Avg != 1003.125 || l.Min != 1000 || l.Max != 9000 {
		t.Errorf("latency avg/min/max = %v/%v/%v, want 1003.125/1000/9000", l.Avg, l.Min, l.Max)
	}
	for _, p := range []float64{l.P50, l.P90, l.P99, l.P999} {
		if math.Abs(p-1000) > 10 {
			t.Errorf("latency percentiles %+v, want 1000 ±1%%", l)
			break
		}
	}
}

func TestSummarizeEdgeCases(t *testing.T) {
	// No histogram: ops come from the samples; one sample has no spread.
	s := Summarize("seq", "p", 1<<20, 1, 2*time.Second, []Sample{{Second: 1, Ops: 6}}, nil, 0)
	if s.Ops != 6 || s.Bytes != 6<<20 || s.Bandwidth != (Stat{Avg: 3, Min: 6, Max: 6}) || s.IOPS.Stddev != 0 {
		t.Fatalf("from samples: %+v", s)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// Samples without Bytes get Ops×objectSize.
	s = Summarize("rand", "p", 1<<20, 1, time.Second, []Sample{{Second: 1, Ops: 2}}, nil, 0)
	if s.Bandwidth.Max != 2 {
		t.Fatalf("bytes fallback: %+v", s.Bandwidth)
	}
	// Nothing at all: zeros, no NaN, still consistent.
	s = Summarize("write", "p", 4096, 16, 0, nil, NewHistogram(), 5)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if s.Bandwidth != (Stat{}) || s.Latency != (LatencyStat{}) {
		t.Fatalf("empty: %+v", s)
	}
}

func TestSummaryJSON(t *testing.T) {
	samples, total := handRun()
	s := Summarize("write", "data", 4096, 16, 4*time.Second, samples, total, 0)
	s.CPU = &CPUStat{ClusterSeconds: 1, SecondsPerGiB: 2, SecondsPer1000Ops: 3}
	s.Efficiency = &Efficiency{BoundLatencyUs: 800, LatencyPercent: 80, Note: "disk bound"}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"mode":"write"`, `"pool":"data"`, `"object_size":4096`, `"concurrency":16`,
		`"seconds":4`, `"ops":2560`, `"bytes":`, `"errors":0`, `"bandwidth_mib_s":{"avg":2.5,"stddev":`,
		`"iops":{"avg":640`, `"latency_us":{"avg":1003.125,"min":1000,"max":9000,"p50":`, `"p999":`,
		`"cpu":{"cluster_seconds":1,"seconds_per_gib":2,"seconds_per_1000_ops":3}`,
		`"efficiency":{"bound_latency_us":800,"latency_percent":80,"note":"disk bound"}`} {
		if !strings.Contains(string(out), key) {
			t.Errorf("JSON lacks %s:\n%s", key, out)
		}
	}
	var back Summary
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Check(); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	s.CPU, s.Efficiency = nil, nil
	out, _ = json.Marshal(s)
	if strings.Contains(string(out), "cpu") || strings.Contains(string(out), "efficiency") {
		t.Fatalf("nil CPU/Efficiency not omitted: %s", out)
	}
}

func TestCheckCatchesInconsistencies(t *testing.T) {
	samples, total := handRun()
	good := Summarize("write", "data", 4096, 16, 4*time.Second, samples, total, 0)
	good.Latency = LatencyStat{Avg: 1100, Min: 900, Max: 9000, P50: 1000, P90: 1200, P99: 3000, P999: 8000}
	if err := good.Check(); err != nil {
		t.Fatalf("good summary rejected: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*Summary)
		want   string
	}{
		{"bytes", func(s *Summary) { s.Bytes++ }, "bytes"},
		{"object size", func(s *Summary) { s.ObjectSize = 4 << 20 }, "object size"},
		{"negative errors", func(s *Summary) { s.Errors = -1 }, "negative"},
		{"min>p50", func(s *Summary) { s.Latency.Min = 1001 }, "min"},
		{"p50>p90", func(s *Summary) { s.Latency.P50 = 1300 }, "p50"},
		{"p90>p99", func(s *Summary) { s.Latency.P90 = 3100 }, "p90"},
		{"p99>p999", func(s *Summary) { s.Latency.P99 = 8100 }, "p99"},
		{"p999>max", func(s *Summary) { s.Latency.P999 = 9100 }, "p999"},
		{"avg>max", func(s *Summary) { s.Latency.Avg = 9001 }, "avg"},
		{"avg<min", func(s *Summary) { s.Latency.Avg = 899 }, "avg"},
		{"NaN latency", func(s *Summary) { s.Latency.P90 = math.NaN() }, "NaN"},
		{"NaN stddev", func(s *Summary) { s.Bandwidth.Stddev = math.NaN() }, "bandwidth.stddev"},
		{"Inf iops", func(s *Summary) { s.IOPS.Max = math.Inf(1) }, "iops.max"},
		{"NaN seconds", func(s *Summary) { s.Seconds = math.NaN() }, "seconds"},
		{"NaN cpu", func(s *Summary) { s.CPU = &CPUStat{SecondsPerGiB: math.NaN()} }, "cpu.seconds_per_gib"},
		{"Inf efficiency", func(s *Summary) { s.Efficiency = &Efficiency{LatencyPercent: math.Inf(1)} }, "efficiency"},
		{"bandwidth avg", func(s *Summary) { s.Bandwidth.Avg *= 2 }, "bandwidth avg"},
		{"iops avg", func(s *Summary) { s.IOPS.Avg++ }, "iops avg"},
		{"bandwidth min>max", func(s *Summary) { s.Bandwidth.Min = 5 }, "bandwidth min"},
		{"iops min>max", func(s *Summary) { s.IOPS.Min = 2000 }, "iops min"},
		{"ops in no time", func(s *Summary) { s.Seconds = 0 }, "0 seconds"},
		{"latency without ops", func(s *Summary) {
			s.Ops, s.Bytes, s.Bandwidth.Avg, s.IOPS.Avg = 0, 0, 0, 0
		}, "no ops"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.mutate(&s)
			err := s.Check()
			if err == nil {
				t.Fatalf("Check accepted %+v", s)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	samples, total := handRun()
	s := Summarize("write", "data", 4096, 16, 4*time.Second, samples, total, 3)
	s.CPU = &CPUStat{ClusterSeconds: 12.5, SecondsPerGiB: 1250, SecondsPer1000Ops: 4.88}
	s.Efficiency = &Efficiency{BoundLatencyUs: 800, LatencyPercent: 79.75, Note: "3 replicas, one disk"}
	var b strings.Builder
	s.WriteText(&b)
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"write", `"data"`, "4 KiB", "16 in flight", "4.00 s", "2560 ops", "10 MiB", "3 errors",
		"MiB/s", "2.50", "IOPS", "640", "stddev", "p99.9", "(ms)", "1.00", "9.00", "cluster CPU", "12.50", "79.75%", "one disk"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	// Table rows line up: every row of a table has the same width.
	lines := strings.Split(out, "\n")
	width := func(prefix string, nth int) int {
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				if nth == 0 {
					return utf8.RuneCountInString(l)
				}
				nth--
			}
		}
		t.Fatalf("no line starting %q", prefix)
		return 0
	}
	if a, b, c := width("avg", 0), width("MiB/s", 0), width("IOPS", 0); a != b || b != c {
		t.Errorf("throughput table widths %d %d %d", a, b, c)
	}
	if a, b := width("avg", 1), width("latency (ms)", 0); a != b {
		t.Errorf("latency table widths %d %d", a, b)
	}

	// A CPU floor is printed beside the latency bound, or alone.
	s.Efficiency = &Efficiency{BoundLatencyUs: 800, LatencyPercent: 79.75, BoundCPUPerGiB: 1.8, CPUPercent: 75}
	b.Reset()
	s.WriteText(&b)
	if !strings.Contains(b.String(), "bound latency 800.0 µs, latency 79.75%; CPU floor 1.80 s/GiB, CPU 75.00%") {
		t.Errorf("latency bound and CPU floor not both printed:\n%s", b.String())
	}
	s.Efficiency = &Efficiency{BoundCPUPerGiB: 1.8, CPUPercent: 75}
	b.Reset()
	s.WriteText(&b)
	if out := b.String(); !strings.Contains(out, "efficiency    CPU floor 1.80 s/GiB, CPU 75.00%") || strings.Contains(out, "bound latency") {
		t.Errorf("CPU floor alone:\n%s", out)
	}

	// Without CPU/Efficiency those lines are absent.
	s.CPU, s.Efficiency = nil, nil
	b.Reset()
	s.WriteText(&b)
	if strings.Contains(b.String(), "cluster CPU") || strings.Contains(b.String(), "efficiency") {
		t.Error("nil CPU/Efficiency printed")
	}
}

func TestProgressLine(t *testing.T) {
	s := Sample{Second: 2, Ops: 1024, InFlight: 16, LastLatency: 1500 * time.Microsecond}
	line := ProgressLine(s, 2*time.Second, 2048, 0, 800*time.Microsecond, 4096)
	t.Log("\n" + ProgressHeader() + "\n" + line)
	fields := strings.Fields(line)
	want := []string{"2.0", "16", "4.00", "4.00", "1024", "1024", "1.50", "ms", "800.0", "µs"}
	if strings.Join(fields, " ") != strings.Join(want, " ") {
		t.Fatalf("fields %q, want %q", fields, want)
	}
	if h, l := utf8.RuneCountInString(ProgressHeader()), utf8.RuneCountInString(line); h != l {
		t.Errorf("header width %d, line width %d", h, l)
	}
	// Zero elapsed must not print NaN/Inf.
	if line := ProgressLine(Sample{}, 0, 0, 0, 0, 4096); strings.Contains(line, "NaN") || strings.Contains(line, "Inf") {
		t.Errorf("zero line: %q", line)
	}
}
