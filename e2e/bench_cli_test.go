package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/bench"
)

// TestBenchModes runs cairn bench write, seq, rand and cleanup for a couple
// of seconds each and checks that every JSON summary is complete and
// consistent (ops × size = bytes, percentiles ordered, CPU charged).
func TestBenchModes(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	svg := filepath.Join(t.TempDir(), "write.svg")
	for _, tc := range []struct {
		args []string
		mode string
	}{
		{[]string{"bench", "default", "write", "-b", "64K", "-t", "8", "-d", "2s", "--no-cleanup", "--run-name", "e2e", "--plot", svg, "--json"}, "write"},
		{[]string{"bench", "default", "seq", "-t", "8", "-d", "2s", "--run-name", "e2e", "--json"}, "seq"},
		{[]string{"bench", "default", "rand", "-t", "8", "-d", "2s", "--run-name", "e2e", "--json"}, "rand"},
	} {
		out, err := c.cli(nil, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		var s bench.Summary
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("%s: JSON: %v\n%s", tc.mode, err, out)
		}
		if err := s.Check(); err != nil {
			t.Errorf("%s: inconsistent summary: %v", tc.mode, err)
		}
		if s.Mode != tc.mode || s.ObjectSize != 64<<10 || s.Ops == 0 || s.Errors != 0 || s.Concurrency != 8 {
			t.Errorf("%s: summary %+v", tc.mode, s)
		}
		if s.Bytes != s.Ops*s.ObjectSize {
			t.Errorf("%s: bytes %d != ops %d × size %d", tc.mode, s.Bytes, s.Ops, s.ObjectSize)
		}
		l := s.Latency
		if !(l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("%s: percentiles out of order: %+v", tc.mode, l)
		}
		if s.CPU == nil || s.CPU.ClusterSeconds <= 0 || s.CPU.SecondsPer1000Ops <= 0 {
			t.Errorf("%s: the OSDs' CPU was not charged: %+v", tc.mode, s.CPU)
		}
		t.Logf("%s: %d ops, %.0f IOPS, p50 %.0f µs, p99 %.0f µs, %.2f CPU s per 1000 ops",
			tc.mode, s.Ops, s.IOPS.Avg, l.P50, l.P99, s.CPU.SecondsPer1000Ops)
	}
	if b, err := os.ReadFile(svg); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("--plot did not write an SVG chart: %v", err)
	}
	if _, err := c.cli(nil, "bench", "default", "cleanup", "--run-name", "e2e"); err != nil {
		t.Fatal(err)
	}
	out, err := c.cli(nil, "obj", "ls", "default")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "e2e_") {
		t.Fatalf("cleanup left benchmark objects behind:\n%s", out)
	}
	// Bad input is named.
	if _, err := c.cli(nil, "bench", "default", "seq", "--run-name", "never"); err == nil || !strings.Contains(err.Error(), "write --no-cleanup") {
		t.Errorf("seq without a write run: want advice to run write --no-cleanup first, got %v", err)
	}
	if _, err := c.cli(nil, "bench", "default", "write", "-b", "lots"); err == nil || !strings.Contains(err.Error(), "positive number of bytes") {
		t.Errorf("bad -b: got %v", err)
	}
}
