package bench

import (
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/baseline"
)

// A write's efficiency is against the bound for separate disks, and its
// note also gives it against the bound for copies sharing one disk.
func TestEfficiencySharedDisk(t *testing.T) {
	b := &baseline.Result{}
	b.Bound.ReplicatedWriteUs, b.Bound.SharedDiskWriteUs, b.Bound.ReadUs = 150, 250, 80
	s := Summary{Concurrency: 1}
	s.Latency.P50 = 500
	e := EfficiencyOf(b, "write", s, 3, "")
	if e == nil || e.BoundLatencyUs != 150 || e.LatencyPercent != 30 {
		t.Fatalf("write efficiency %+v, want bound 150 µs, 30%%", e)
	}
	if !strings.Contains(e.Note, "50% of the 250.0 µs bound when every copy's OSD is on this one disk") {
		t.Errorf("write note %q does not give the shared-disk bound", e.Note)
	}
	r := EfficiencyOf(b, "rand", s, 3, "")
	if r == nil || r.BoundLatencyUs != 80 || strings.Contains(r.Note, "one disk") {
		t.Errorf("read efficiency %+v, want the read bound and no shared-disk note", r)
	}
	if strings.Contains(e.Note, "processes doing only that work") {
		t.Errorf("write note %q gives a measured bound the baseline lacks", e.Note)
	}
	// The measured bound is for 4 KiB writes to 3 copies.
	b.Bound.MeasuredWriteUs = 400
	s.ObjectSize = 4096
	if e := EfficiencyOf(b, "write", s, 3, ""); e == nil || !strings.Contains(e.Note, "80% of the 400.0 µs that 3 processes doing only that work took here") {
		t.Errorf("4 KiB writes to 3 copies: %+v, want the measured bound", e)
	}
	for _, c := range []struct {
		size   int64
		copies int
	}{{1 << 20, 3}, {4096, 2}} {
		s2 := s
		s2.ObjectSize = c.size
		if e := EfficiencyOf(b, "write", s2, c.copies, ""); e == nil || strings.Contains(e.Note, "processes doing only that work") {
			t.Errorf("%d-byte writes to %d copies: %+v, want no measured bound", c.size, c.copies, e)
		}
	}
	b.Bound.MeasuredWriteUs = 0
	b.Bound.SharedDiskWriteUs = 0 // a baseline saved before the measurement existed
	if e := EfficiencyOf(b, "write", s, 3, ""); e == nil || strings.Contains(e.Note, "one disk") {
		t.Errorf("without a shared-disk bound: %+v", e)
	}
}

// The CPU floor applies to write runs of the floor's kind only: its object
// size, a pool of as many copies, and a measured CPU.
func TestEfficiencyCPUFloor(t *testing.T) {
	b := &baseline.Result{}
	b.Bound.ReplicatedWriteUs, b.Bound.ReadUs, b.Bound.WriteCPUPerGiB = 150, 80, 1.8
	s := Summary{Concurrency: 16, ObjectSize: baseline.ReplicatedWriteSize, CPU: &CPUStat{SecondsPerGiB: 2.4}}
	s.Latency.P50 = 100000
	e := EfficiencyOf(b, "write", s, baseline.SharedCopies, "")
	if e == nil || e.BoundCPUPerGiB != 1.8 || e.CPUPercent != 75 || e.BoundLatencyUs != 150 {
		t.Fatalf("efficiency %+v, want the latency bound and CPU floor 1.8 s/GiB at 75%%", e)
	}
	if !strings.Contains(e.Note, "CPU vs the floor of 3-copy 4 MiB writes") {
		t.Errorf("note %q does not say what the CPU floor is", e.Note)
	}
	for _, c := range []struct {
		name   string
		mode   string
		change func(*Summary, *baseline.Result) int // returns the pool's copies
	}{
		{"reads", "rand", func(*Summary, *baseline.Result) int { return 3 }},
		{"other size", "write", func(s *Summary, _ *baseline.Result) int { s.ObjectSize = 4096; return 3 }},
		{"two copies", "write", func(*Summary, *baseline.Result) int { return 2 }},
		{"no CPU", "write", func(s *Summary, _ *baseline.Result) int { s.CPU = nil; return 3 }},
		{"old baseline", "write", func(_ *Summary, b *baseline.Result) int { b.Bound.WriteCPUPerGiB = 0; return 3 }},
	} {
		s2, b2 := s, *b
		copies := c.change(&s2, &b2)
		if e := EfficiencyOf(&b2, c.mode, s2, copies, ""); e == nil || e.BoundCPUPerGiB != 0 || e.CPUPercent != 0 || strings.Contains(e.Note, "CPU") {
			t.Errorf("%s: %+v, want the latency bound only", c.name, e)
		}
	}
	// A pool of the floor's erasure code is compared with the erasure
	// floor, never the replicated one (a 2+1 pool has 3 positions too).
	b.Bound.ECWriteCPUPerGiB = 1.2
	if e := EfficiencyOf(b, "write", s, 3, baseline.ECProfile()); e == nil || e.BoundCPUPerGiB != 1.2 || e.CPUPercent != 50 ||
		!strings.Contains(e.Note, "CPU vs the floor of 2+1 erasure-coded 4 MiB writes") {
		t.Errorf("2+1 pool: %+v, want the erasure floor 1.2 s/GiB at 50%%", e)
	}
	if e := EfficiencyOf(b, "write", s, 6, "4+2"); e == nil || e.BoundCPUPerGiB != 0 || strings.Contains(e.Note, "CPU") {
		t.Errorf("4+2 pool: %+v, want no CPU floor (the baseline measures 2+1)", e)
	}
	b.Bound.ECWriteCPUPerGiB = 0
	if e := EfficiencyOf(b, "write", s, 3, baseline.ECProfile()); e == nil || e.BoundCPUPerGiB != 0 {
		t.Errorf("2+1 pool, baseline without the erasure floor: %+v, want no CPU floor", e)
	}
	// A baseline with a CPU floor and no latency bounds still gives it.
	b.Bound.ReplicatedWriteUs = 0
	if e := EfficiencyOf(b, "write", s, 3, ""); e == nil || e.BoundLatencyUs != 0 || e.CPUPercent != 75 {
		t.Errorf("CPU floor alone: %+v", e)
	}
	b.Bound.WriteCPUPerGiB = 0
	if e := EfficiencyOf(b, "write", s, 3, ""); e != nil {
		t.Errorf("no bound at all: %+v, want nil", e)
	}
}
