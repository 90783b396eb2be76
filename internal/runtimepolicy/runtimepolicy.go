// Package runtimepolicy sets how the Go runtime of a data-path process (an
// OSD, a gateway, the bench) runs: with spare processors for an OSD's goroutines
// blocked in disk syscalls, one processor for a gateway while it serves one
// request at a time, and a garbage collector that runs rarely while requests stream
// through but never so rarely that the heap grows from fresh pages once the
// load changes.
package runtimepolicy

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The parameters of collectWhenQuiet for daemons.
const (
	quietPeriod    = time.Second
	quietHeapGoal  = 128 << 20
	quietAllocated = 64 << 20
)

// ForDataPath applies the policy for a gateway (NBD, S3) or `cairn bench`
// to this process until ctx ends: the collector's.
//
// The collector runs less often than Go's default: a data-path daemon's
// live heap is small, but every request allocates its payload, and at
// GOGC=100 a stream of 1 MiB reads or writes started a collection every
// few requests, a large share of the NBD gateway's CPU. GOGC in the environment
// still wins.
func ForDataPath(ctx context.Context) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	go collectWhenQuiet(ctx, quietPeriod, quietHeapGoal, quietAllocated)
}

// ForStorage applies the policy for a daemon that owns a disk (an OSD):
// ForDataPath's, and processors (GOMAXPROCS) that follow the Load it
// returns, in which the daemon counts its transactions on disk: twice as
// many as Go would give it while it writes (see spareProcs), as many as Go
// would otherwise (see Load). GOMAXPROCS in the environment still wins:
// the Load then only counts.
func ForStorage(ctx context.Context) *Load {
	ForDataPath(ctx)
	l := newLoad(0)
	if os.Getenv("GOMAXPROCS") == "" {
		cpus := runtime.GOMAXPROCS(0)
		runtime.GOMAXPROCS(spareProcs(cpus))
		go l.follow(ctx, cpus, spareProcs(cpus), quietProcsPeriod, setProcs)
	}
	return l
}

// spareProcs is the number of processors (Ps) a storage daemon runs with,
// while it writes, where Go would give it cpus: twice as many.
//
// Its writes' goroutines block in disk syscalls thousands of times a second (commit
// log writes, page-cache writes, fallocate, fdatasync). While a goroutine
// is in a syscall it keeps its P; when no other P is idle, the runtime's
// monitor thread takes that P away after 20 µs and wakes another thread to
// run it, and while it keeps doing so it polls every 20 µs instead of
// sleeping. On a machine of few CPUs an OSD under 4 KiB volume writes then
// wakes its monitor thousands of times a second and spends much of its CPU
// switching threads. With spare Ps a blocked goroutine leaves an idle P
// behind and nothing is handed off: more 4 KiB NBD writes a second, on less
// OSD CPU per write. Twice the CPUs is enough (more Ps do no better; fewer
// do less well). A gateway blocks in no disk syscall, and spare Ps only made
// it spin more: it spends less CPU per 4 KiB write without them.
//
// This is the second half of taming the monitor: the scheduler trace that
// long-running commands run with (internal/cli/sysmon.go) keeps syscalls
// from waking it out of deep sleep; spare Ps keep it from handing off.
// Syscalls longer than 10 ms (4 MiB writes behind a deep disk queue) are
// still handed off, spare Ps or not; under 4 MiB writes the monitor's
// polling that follows each remains a visible part of an OSD's CPU.
//
// Setting GOMAXPROCS turns off the runtime's tracking of a changing CPU
// limit of the container: a daemon picks up a changed limit when restarted.
func spareProcs(cpus int) int {
	return 2 * cpus
}

// collectWhenQuiet runs a collection whenever a whole period passed without
// one while the heap may grow past goal before the next, and the daemon is
// allocating (at least allocated bytes since the last collection).
//
// At GOGC=400 a burst of large requests sets the next collection far away:
// 4 MiB writes keep hundreds of MiB of buffers live on an OSD, so its heap
// may then grow to five times that. When the load turns to small requests,
// the daemon allocates that whole distance from fresh pages, each faulted in
// and zeroed by the kernel, before any memory is reused: several times the
// usual page faults per 4 KiB write on an OSD, and in a VM whose host
// reclaims free guest memory, far fewer writes per second. A collection brings the
// goal down within two periods (pooled buffers left idle are let go after
// two collections). A daemon that allocates little (large reads served
// from pooled buffers) grows nothing and is left alone.
func collectWhenQuiet(ctx context.Context, period time.Duration, goal, allocated uint64) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	t := time.NewTicker(period)
	defer t.Stop()
	var cycles, since uint64 // cycles seen, allocs when they were seen
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		if s[0].Value.Uint64() == cycles && s[1].Value.Uint64() > goal && s[2].Value.Uint64()-since >= allocated {
			runtime.GC()
			metrics.Read(s)
		}
		if s[0].Value.Uint64() != cycles {
			cycles, since = s[0].Value.Uint64(), s[2].Value.Uint64()
		}
	}
}
