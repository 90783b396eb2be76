package objstore

// Pacing writes to the speed of the data disk.
//
// A small overwrite is durable once its journal record is in the commit
// log, and its data reaches the data file later, when a checkpoint syncs
// it (checkpoint.go). With the log on flash and the data on a disk that
// syncs far fewer random blocks a second than the flash, the log takes writes far
// faster than checkpoints can sync them: each checkpoint has more to sync
// than the last, and once the log wraps onto records a running checkpoint
// has not released, every write waits for that checkpoint, however long
// it runs. The pacer keeps the data not yet synced (the backlog) to what the
// data disk syncs in about checkpointTarget, measured from the
// checkpoints themselves: below the low watermark writes pass untouched;
// between the low and the high watermark they are admitted at a rate that
// falls from twice the measured sync rate to half of it (so
// the backlog settles between them); at the high watermark they wait for a
// checkpoint to finish. A client sees its writes
// slow down to the disk's speed, never a stall.

import (
	"sync"
	"sync/atomic"
	"time"
)

// Tunables; tests shorten them.
var (
	// checkpointTarget is how long one checkpoint's sync should take at
	// the data disk's measured rate: the high watermark's backlog.
	checkpointTarget = 2 * time.Second
	// minPaceHigh is the least high watermark, however slow the disk.
	minPaceHigh = int64(2 << 20)
)

// pacer holds a store's backlog of applied, unsynced deferred writes and
// paces writers by it (see the top of this file).
type pacer struct {
	maxHigh int64 // the largest high watermark: what the commit log holds without waiting
	// fixedLow, if set, makes the watermarks fixed at fixedLow and maxHigh
	// instead of following the measured rate: the write-back area's pacer
	// (writeback.go), whose high watermark is the area's size.
	fixedLow int64

	backlog atomic.Int64 // bytes applied and not yet synced, the running checkpoint's included
	low     atomic.Int64 // below it writes pass without taking mu

	mu     sync.Mutex
	cond   *sync.Cond // broadcast when a checkpoint lowers the backlog, or on stop
	rate   float64    // bytes a second checkpoints synced (moving average); 0 until measured
	next   time.Time  // the next free admission slot, between the watermarks
	closed bool

	paced, waitedNs atomic.Int64 // writes slowed or held, and the time they lost
}

func newPacer(maxHigh int64) *pacer {
	p := &pacer{maxHigh: max(maxHigh, minPaceHigh)}
	p.cond = sync.NewCond(&p.mu)
	p.low.Store(p.maxHigh / 2)
	return p
}

// watermarks returns the low and high watermarks. Called with mu held.
func (p *pacer) watermarks() (low, high int64) {
	if p.fixedLow > 0 {
		return p.fixedLow, p.maxHigh
	}
	high = p.maxHigh
	if p.rate > 0 {
		high = min(high, max(minPaceHigh, int64(p.rate*checkpointTarget.Seconds())))
	}
	return high / 2, high
}

// applied adds n bytes of deferred writes to the backlog.
func (p *pacer) applied(n int64) { p.backlog.Add(n) }

// synced takes n bytes that a checkpoint synced off the backlog, and folds
// the rate it wrote at (wrote bytes in d) into the measured one.
func (p *pacer) synced(n, wrote int64, d time.Duration) {
	p.backlog.Add(-n)
	p.mu.Lock()
	defer p.mu.Unlock()
	// A sync of a few blocks measures the disk's latency, not its rate.
	if wrote >= 64<<10 && d > 0 {
		r := float64(wrote) / d.Seconds()
		if p.rate == 0 {
			p.rate = r
		} else {
			// A sync of pages the kernel had mostly written back already
			// measures little: one such sample moves the rate a little.
			p.rate = 0.7*p.rate + 0.3*min(r, 4*p.rate)
		}
	}
	low, _ := p.watermarks()
	p.low.Store(low)
	p.cond.Broadcast()
}

// stop lets every writer through, now and later: the store closed or
// failed, and no checkpoint will lower the backlog.
func (p *pacer) stop() {
	p.mu.Lock()
	p.closed = true
	p.low.Store(1 << 62)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// kickBytes is the backlog from which a checkpoint should start at once.
func (p *pacer) kickBytes() int64 { return p.low.Load() / 2 }

// admit returns when a write of n bytes may go: at once below the low
// watermark, else at its slot in the admission rate. kick asks for a
// checkpoint when the writer must wait for one.
func (p *pacer) admit(n int64, kick func()) {
	if p.backlog.Load() < p.low.Load() {
		return
	}
	start := time.Now()
	var slot time.Time // zero until reserved
	p.mu.Lock()
	for !p.closed {
		low, high := p.watermarks()
		b := p.backlog.Load()
		now := time.Now()
		// A slot passed lets the writer go, except past a fixed high
		// watermark: the write-back area's size is a bound.
		if b < low || (!slot.IsZero() && !now.Before(slot) && (p.fixedLow == 0 || b < high)) {
			break
		}
		if b >= high {
			kick()
			p.cond.Wait()
			continue
		}
		if slot.IsZero() {
			slot = p.reserve(n, now, 2-1.5*float64(b-low)/float64(high-low))
		}
		// Sleep in steps, so that a checkpoint ending meanwhile lets the
		// writer go early.
		p.mu.Unlock()
		time.Sleep(min(slot.Sub(now), 20*time.Millisecond))
		p.mu.Lock()
	}
	p.mu.Unlock()
	p.paced.Add(1)
	p.waitedNs.Add(int64(time.Since(start)))
}

// reserve takes the next admission slot for n bytes at frac of the
// measured rate. Called with mu held.
func (p *pacer) reserve(n int64, now time.Time, frac float64) time.Time {
	if p.rate == 0 {
		return now // nothing measured yet: only the high watermark holds writers
	}
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(time.Duration(float64(n) / (p.rate * frac) * float64(time.Second)))
	return slot
}
