package bench

import (
	"fmt"
	"strconv"

	"github.com/cairn-storage/cairn/internal/baseline"
)

// EfficiencyOf compares the measured median latency with what the hardware
// allows for one operation of that kind, and the CPU a write run cost with
// the CPU floor of writes, where the run is a floor's kind: writes of its
// size to a pool of as many copies, or of the same erasure code (ec, ""
// for a replicated pool).
func EfficiencyOf(b *baseline.Result, mode string, s Summary, copies int, ec string) *Efficiency {
	bound := b.Bound.ReplicatedWriteUs
	kind := "replicated write (2 round trips + 1 sync write)"
	if mode != "write" {
		bound, kind = b.Bound.ReadUs, "read (1 round trip + 1 disk read)"
	}
	var e Efficiency
	if bound > 0 && s.Latency.P50 > 0 {
		e.BoundLatencyUs, e.LatencyPercent = bound, 100*bound/s.Latency.P50
		e.Note = fmt.Sprintf("median latency vs the hardware bound for one %s", kind)
		if shared := b.Bound.SharedDiskWriteUs; mode == "write" && shared > 0 {
			e.Note += fmt.Sprintf("; %s%% of the %s µs bound when every copy's OSD is on this one disk, as in cairn dev",
				strconv.FormatFloat(100*shared/s.Latency.P50, 'f', 0, 64), strconv.FormatFloat(shared, 'f', 1, 64))
		}
		if m := b.Bound.MeasuredWriteUs; mode == "write" && m > 0 && s.ObjectSize == 4096 && copies == baseline.SharedCopies && ec == "" {
			e.Note += fmt.Sprintf("; %s%% of the %s µs that %d processes doing only that work took here",
				strconv.FormatFloat(100*m/s.Latency.P50, 'f', 0, 64), strconv.FormatFloat(m, 'f', 1, 64), baseline.SharedCopies)
		}
		if s.Concurrency > 1 {
			e.Note += "; with more than 1 in flight, queueing adds latency: compare -t 1 runs"
		}
	}
	if floor, kind, counts := cpuFloor(b, copies, ec); mode == "write" && floor > 0 && s.CPU != nil && s.CPU.SecondsPerGiB > 0 &&
		s.ObjectSize == baseline.ReplicatedWriteSize {
		e.BoundCPUPerGiB, e.CPUPercent = floor, 100*floor/s.CPU.SecondsPerGiB
		if e.Note != "" {
			e.Note += "; "
		}
		e.Note += fmt.Sprintf("CPU vs the floor of %s %d MiB writes: %s", kind, baseline.ReplicatedWriteSize>>20, counts)
	}
	if e == (Efficiency{}) {
		return nil
	}
	return &e
}

// cpuFloor is the baseline's CPU floor of writes to a pool of that
// protection, what kind of write it is and what it counts; 0 where the
// baseline measured none.
func cpuFloor(b *baseline.Result, copies int, ec string) (floor float64, kind, counts string) {
	switch {
	case ec == "" && copies == baseline.SharedCopies:
		return b.Bound.WriteCPUPerGiB, fmt.Sprintf("%d-copy", copies),
			"the copies' CPU per GiB when they only move, check, write and sync the bytes"
	case ec != "" && ec == baseline.ECProfile():
		return b.Bound.ECWriteCPUPerGiB, ec + " erasure-coded",
			"the positions' CPU per GiB when they only code, move, check, write and sync the shards"
	}
	return 0, "", ""
}
