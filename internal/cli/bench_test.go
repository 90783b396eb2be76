package cli

import (
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/baseline"
	"github.com/cairn-storage/cairn/internal/bench"
)

// A write's efficiency is against the bound for separate disks, and its
// note also gives it against the bound for copies sharing one disk.
func TestEfficiencySharedDisk(t *testing.T) {
	b := &baseline.Result{}
	b.Bound.ReplicatedWriteUs, b.Bound.SharedDiskWriteUs, b.Bound.ReadUs = 150, 250, 80
	s := bench.Summary{Concurrency: 1}
	s.Latency.P50 = 500
	e := efficiency(b, "write", s)
	if e == nil || e.BoundLatencyUs != 150 || e.LatencyPercent != 30 {
		t.Fatalf("write efficiency %+v, want bound 150 µs, 30%%", e)
	}
	if !strings.Contains(e.Note, "50% of the 250.0 µs bound when every copy's OSD is on this one disk") {
		t.Errorf("write note %q does not give the shared-disk bound", e.Note)
	}
	r := efficiency(b, "rand", s)
	if r == nil || r.BoundLatencyUs != 80 || strings.Contains(r.Note, "one disk") {
		t.Errorf("read efficiency %+v, want the read bound and no shared-disk note", r)
	}
	b.Bound.SharedDiskWriteUs = 0 // a baseline saved before the measurement existed
	if e := efficiency(b, "write", s); e == nil || strings.Contains(e.Note, "one disk") {
		t.Errorf("without a shared-disk bound: %+v", e)
	}
}
