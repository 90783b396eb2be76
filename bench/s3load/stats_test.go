package main

import (
	"testing"
	"time"
)

// TestPercentile checks the nearest-rank definition against values worked
// out by hand, including the edges where an off-by-one shows.
func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	cases := []struct {
		vals []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2), 50, 1 * time.Millisecond},
		{ms(1, 2), 51, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 99, 4 * time.Millisecond},
		{ms(hundred...), 50, 50 * time.Millisecond},
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 100, 100 * time.Millisecond},
		{ms(hundred...), 0.001, 1 * time.Millisecond},
	}
	for _, c := range cases {
		if got := percentile(c.vals, c.p); got != c.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(c.vals), c.p, got, c.want)
		}
	}
}

// TestSummarize checks rates and percentiles of a phase from unsorted
// latencies, and that a put phase that hit its cap says so.
func TestSummarize(t *testing.T) {
	lats := []time.Duration{}
	for i := 200; i >= 1; i-- {
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	o := options{op: "put", size: 4 << 20, clients: 16, maxObjects: 200}
	r := summarize(o, lats, 2*time.Second)
	if r.Ops != 200 || r.ObjectsPerS != 100 || r.MiBPerS != 400 || !r.Capped {
		t.Fatalf("ops %d, %v objects/s, %v MiB/s, capped %v; want 200, 100, 400, true", r.Ops, r.ObjectsPerS, r.MiBPerS, r.Capped)
	}
	if r.P50Ms != 100 || r.P99Ms != 198 || r.MaxMs != 200 {
		t.Fatalf("p50 %v p99 %v max %v; want 100, 198, 200", r.P50Ms, r.P99Ms, r.MaxMs)
	}
	r.ServerCPU = 1.5
	r.perCPU()
	if r.CPUPerGiB != 1.5/(800.0/1024) || r.CPUPer1000Ops != 7.5 || r.ServerCores != 0.75 {
		t.Fatalf("%v s/GiB, %v s/1000 ops, %v cores", r.CPUPerGiB, r.CPUPer1000Ops, r.ServerCores)
	}
}

// TestStatTicks reads utime+stime past a command name with spaces and
// parentheses.
func TestStatTicks(t *testing.T) {
	line := "1234 (cairn (osd) 1) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 500 0 0"
	got, err := statTicks(line)
	if err != nil || got != 325 {
		t.Fatalf("statTicks = %d, %v; want 325", got, err)
	}
	if _, err := statTicks("1234 (x) S 1 2"); err == nil {
		t.Fatal("a short line was accepted")
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4K": 4096, "4KiB": 4096, "4MiB": 4 << 20, "4M": 4 << 20, "1GiB": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "0", "-1K", "4T"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}
