package runtimepolicy

import (
	"context"
	"testing"
	"time"
)

// The processors drop to one after a period of requests one at a time,
// return to all of them at the first overlap without waiting for a period
// to end, stay there while requests overlap, and are all given back when
// the gateway stops.
func TestProcsFollowLoad(t *testing.T) {
	const most, period = 4, 20 * time.Millisecond
	l := newLoad(1)
	sets := make(chan int, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.follow(ctx, 1, most, period, func(n int) { sets <- n }); close(done) }()
	next := func(want int, within time.Duration) {
		t.Helper()
		select {
		case n := <-sets:
			if n != want {
				t.Fatalf("processors set to %d, want %d", n, want)
			}
		case <-time.After(within):
			t.Fatalf("processors not set to %d within %v", want, within)
		}
	}
	none := func(d time.Duration) {
		t.Helper()
		select {
		case n := <-sets:
			t.Fatalf("processors set to %d, want no change", n)
		case <-time.After(d):
		}
	}

	// One at a time: one processor, and no change however long it goes on.
	for range 3 {
		l.Begin()
		l.End()
	}
	next(1, 5*time.Second)
	for range 10 {
		l.Begin()
		time.Sleep(period / 4)
		l.End()
	}
	none(3 * period)

	// An overlap raises them at once (well within a period), and they stay
	// up while requests keep overlapping.
	start := time.Now()
	l.Begin()
	l.Begin()
	next(most, 5*time.Second)
	if d := time.Since(start); d > time.Second {
		t.Logf("raise took %v", d) // a loaded machine; the order is what matters
	}
	for range 10 {
		l.Begin()
		time.Sleep(period / 2)
		l.End()
	}
	none(2 * period) // two are still in flight
	l.End()
	l.End()
	next(1, 5*time.Second)

	// Stopping gives all processors back.
	cancel()
	next(most, 5*time.Second)
	<-done
}

// With threshold 0 (an OSD's writes) a single transaction in flight raises
// the processors, and they stay up until none has been for a period.
func TestProcsFollowWrites(t *testing.T) {
	const low, high, period = 2, 4, 20 * time.Millisecond
	l := newLoad(0)
	sets := make(chan int, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.follow(ctx, low, high, period, func(n int) { sets <- n })
	next := func(want int) {
		t.Helper()
		select {
		case n := <-sets:
			if n != want {
				t.Fatalf("processors set to %d, want %d", n, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("processors not set to %d", want)
		}
	}
	next(low) // nothing written
	l.Begin()
	next(high)
	select {
	case n := <-sets:
		t.Fatalf("processors set to %d while a write is in flight", n)
	case <-time.After(3 * period):
	}
	l.End()
	next(low)
}
