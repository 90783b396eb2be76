package runtimepolicy

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
)

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// burst leaves the heap goal where a burst of large live buffers put it,
// then lets the buffers go without allocating anything more.
func burst(t *testing.T) {
	t.Helper()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 1<<20)
	}
	runtime.GC() // 64 MiB live: the goal is five times that
	runtime.KeepAlive(bufs)
	if g := heapGoal(); g < 256<<20 {
		t.Fatalf("heap goal %d MiB after the burst, want at least 256", g>>20)
	}
}

var sink []byte

// churn allocates garbage: n buffers of 256 KiB, one every pause.
func churn(n int, pause time.Duration) {
	for range n {
		sink = make([]byte, 256<<10)
		time.Sleep(pause)
	}
}

// After a burst, a daemon allocating small amounts would grow its heap
// toward the burst's goal; the quiet collector brings the goal down, and
// leaves a daemon that allocates nothing alone.
func TestCollectWhenQuiet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	const goal, allocated = 32 << 20, 4 << 20

	burst(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	defer func() { cancel(); <-done }() // no collection leaks into the next test
	go func() { collectWhenQuiet(ctx, 20*time.Millisecond, goal, allocated); close(done) }()
	time.Sleep(200 * time.Millisecond) // no allocation: nothing to do
	if g := heapGoal(); g <= goal {
		t.Fatalf("heap goal fell to %d MiB while nothing was allocated", g>>20)
	}
	// 16 MiB of garbage is far from the burst's goal: without the
	// collector nothing would collect.
	churn(64, time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for heapGoal() > goal {
		if time.Now().After(deadline) {
			t.Fatalf("heap goal still %d MiB 5 s after the burst", heapGoal()>>20)
		}
		churn(16, time.Millisecond)
	}
}

// Without the collector the same churn leaves the goal where the burst put
// it: what TestCollectWhenQuiet checks is the collector's doing.
func TestBurstGoalStaysWithoutCollector(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	burst(t)
	churn(64, time.Millisecond)
	if g := heapGoal(); g <= 32<<20 {
		t.Fatalf("heap goal fell to %d MiB without the collector", g>>20)
	}
}

// ForStorage gives the daemon spare processors, unless the environment sets
// GOMAXPROCS; ForDataPath (a gateway's) leaves them as Go set them.
func TestSpareProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no quiet collector left running

	t.Setenv("GOMAXPROCS", strconv.Itoa(before))
	ForStorage(ctx)
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS=%d in the environment, ForStorage set %d", before, got)
	}

	os.Unsetenv("GOMAXPROCS") // t.Setenv restores it
	ForDataPath(ctx)
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("ForDataPath changed GOMAXPROCS from %d to %d", before, got)
	}
	ForStorage(ctx)
	if got := runtime.GOMAXPROCS(0); got != 2*before {
		t.Fatalf("GOMAXPROCS %d after ForStorage, want twice the %d Go chose", got, before)
	}
}
