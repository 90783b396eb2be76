package gcpolicy

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
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

// After a burst the goal stays up until something collects; the quiet
// collector brings it down without any further allocation.
func TestCollectWhenQuiet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	const large = 32 << 20
	wait := 300 * time.Millisecond

	burst(t)
	time.Sleep(wait)
	if g := heapGoal(); g <= large {
		t.Fatalf("heap goal fell to %d MiB with nothing collecting: the test shows nothing", g>>20)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go collectWhenQuiet(ctx, 20*time.Millisecond, large)
	deadline := time.Now().Add(5 * time.Second)
	for heapGoal() > large {
		if time.Now().After(deadline) {
			t.Fatalf("heap goal still %d MiB 5 s after the burst", heapGoal()>>20)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
