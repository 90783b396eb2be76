package runtimepolicy

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// Load counts what a daemon has in flight (a gateway its requests, an OSD
// its transactions on disk) and sizes its processors (GOMAXPROCS) to it:
// the high count from the moment more than a threshold is in flight, the
// low count again after a period in which it never was.
//
// A gateway runs on one processor while its requests come one at a time
// (threshold 1). A request crosses goroutines inside it: the connection's
// reader hands it to a worker, and the reader of the OSD's reply hands that
// back. While a processor is idle, the runtime answers each hand-off by
// waking a thread on the other CPU to look for that work; it finds none,
// or steals the goroutine the current thread was about to run, and sleeps
// again. In a VM such a wake-up is a trip through the hypervisor. Under
// 4 KiB volume writes one at a time, the NBD gateway spends less CPU per
// write on one processor than on two, and each write returns sooner.
// Requests in parallel need the second processor: with one, 4 KiB random
// reads at 16 in flight and 1 MiB reads run slower.
//
// An OSD runs with spare processors (see spareProcs) while it writes
// (threshold 0) and with one per CPU otherwise: its reads block little, and
// the spare processors only give its idle threads more to wake: NBD random
// reads run faster on one processor per CPU than with spare ones, on less
// OSD CPU, while writes run slower without the spares.
type Load struct {
	threshold int64
	inFlight  atomic.Int64
	above     atomic.Bool   // in flight went above threshold since the last look
	raise     chan struct{} // the first time since the last look
}

func newLoad(threshold int64) *Load {
	return &Load{threshold: threshold, raise: make(chan struct{}, 1)}
}

// Begin counts one in.
func (l *Load) Begin() {
	if l.inFlight.Add(1) > l.threshold && !l.above.Load() && !l.above.Swap(true) {
		select {
		case l.raise <- struct{}{}:
		default: // a raise is already due
		}
	}
}

// End counts one out.
func (l *Load) End() {
	l.inFlight.Add(-1)
}

// quietProcsPeriod is how long a daemon's load must stay at or under its
// threshold before it drops to its low processor count. Changing
// GOMAXPROCS stops the world for tens of µs, so the policy changes it at
// most a few times a second.
const quietProcsPeriod = 200 * time.Millisecond

// ForGateway applies ForDataPath's policy and returns the Load the gateway
// counts its requests in, which its processors follow (one, or Go's
// default) until ctx ends. GOMAXPROCS in the environment still wins: the
// Load then only counts. As for an OSD (see spareProcs), setting GOMAXPROCS
// turns off the runtime's tracking of a changing CPU limit: a gateway picks
// up a changed limit when restarted.
func ForGateway(ctx context.Context) *Load {
	ForDataPath(ctx)
	l := newLoad(1)
	if most := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && most > 1 {
		go l.follow(ctx, 1, most, quietProcsPeriod, setProcs)
	}
	return l
}

func setProcs(n int) { runtime.GOMAXPROCS(n) }

// follow sets the processors to high when the load goes above its
// threshold and to low after a period in which it did not, until ctx ends
// (and leaves high set).
func (l *Load) follow(ctx context.Context, low, high int, period time.Duration, set func(int)) {
	t := time.NewTicker(period)
	defer t.Stop()
	cur := high
	for {
		select {
		case <-ctx.Done():
			if cur != high {
				set(high)
			}
			return
		case <-l.raise:
			if cur != high {
				set(high)
				cur = high
			}
		case <-t.C:
			if !l.above.Swap(false) && l.inFlight.Load() <= l.threshold && cur != low {
				set(low)
				cur = low
			}
		}
	}
}
