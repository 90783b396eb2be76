package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/baseline"
	"github.com/cairn-storage/cairn/internal/bench"
)

// TestBaselineFloors runs cairn bench --baseline as a user does, copy
// processes and all, and then write runs that print their efficiency
// against the floors it saved beside cairn.conf.
func TestBaselineFloors(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	dir := t.TempDir()
	out, err := c.cli(nil, "--json", "bench", "--baseline", dir, "-d", "300ms")
	if err != nil {
		t.Fatal(err)
	}
	var b baseline.Result
	if err := json.Unmarshal(out, &b); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out)
	}
	q1, w4 := b.Replicated.Write4KQD1, b.Replicated.Write4M
	if q1.Ops == 0 || q1.P50us <= 0 || w4.Ops == 0 || w4.MBps <= 0 || w4.CPUPerGiB <= 0 {
		t.Fatalf("replicated measurements missing: 4 KiB %+v, 4 MiB %+v", q1, w4)
	}
	if b.Bound.MeasuredWriteUs != q1.P50us || b.Bound.WriteCPUPerGiB != w4.CPUPerGiB {
		t.Errorf("bounds %+v do not carry the measurements", b.Bound)
	}
	t.Logf("replicated 4 KiB write %.0f µs p50 (sum of parts %.0f µs), CPU floor %.2f s/GiB at %.0f MB/s",
		q1.P50us, b.Bound.ReplicatedWriteUs, w4.CPUPerGiB, w4.MBps)
	// Every copy process ended and took its file along.
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left in %s: %v", dir, left)
	}
	if ps, _ := exec.Command("pgrep", "-f", "baseline-copy --file "+dir).Output(); len(ps) != 0 {
		t.Errorf("copy processes still running: %s", ps)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(c.conf), "baseline.json")); err != nil {
		t.Fatalf("baseline not saved beside cairn.conf: %v", err)
	}

	for _, tc := range []struct {
		args []string
		want func(e *bench.Efficiency) bool
		what string
	}{
		{[]string{"-b", "4M", "-t", "4", "-d", "2s"}, func(e *bench.Efficiency) bool {
			return e.BoundCPUPerGiB == w4.CPUPerGiB && e.CPUPercent > 0
		}, "the CPU floor"},
		{[]string{"-b", "4K", "-t", "1", "-d", "1s"}, func(e *bench.Efficiency) bool {
			return e.BoundCPUPerGiB == 0 && strings.Contains(e.Note, "processes doing only that work")
		}, "the measured latency and no CPU floor"},
	} {
		out, err := c.cli(nil, append([]string{"--json", "bench", "default", "write"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var s bench.Summary
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("JSON: %v\n%s", err, out)
		}
		if s.Efficiency == nil || !tc.want(s.Efficiency) {
			t.Errorf("write %v: efficiency %+v, want %s", tc.args, s.Efficiency, tc.what)
		}
	}
	if _, err := c.cli(nil, "bench", "--baseline", dir, "-d", "0s"); err == nil || !strings.Contains(err.Error(), "positive duration") {
		t.Errorf("-d 0s: got %v", err)
	}
}
