package objstore

// The stall watchdog. A flash device that dies often returns no error: it
// stops answering (or answers one IO a second), and every commit waits on
// it, so the OSD looks alive, holds its lease and its PGs, and every write
// to them hangs. The watchdog turns that into a failure like an IO error:
// when a write and sync of the commit log, or a flush of the index, has
// been outstanding longer than Options.StallTimeout, the store fails (its
// owner stops serving and its data comes back from the other copies).
//
// Cost on the commit path: two atomic adds around each device operation
// (ioClock) and a compare-and-swap per batch where the leader reads it
// (logWaiter.state), no allocation, no clock read. One goroutine per store ticks
// ten times per timeout and counts the ticks an operation has stayed
// outstanding: a process paused as a whole (SIGSTOP, a suspended VM) misses
// its ticks too, so it is not taken for a stalled device.
//
// A stalled write is never acknowledged: the leader that finishes one
// after the failure returns the error (logwriter.go), and every writer
// queued behind it returns the error at once instead of waiting for it.
// The goroutine blocked in the system call stays blocked until the device
// answers; Close does not wait for it (closeStalled).

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultStallTimeout is how long a commit-log write or index flush may
// stay outstanding before the store fails, when Options.StallTimeout is 0.
const DefaultStallTimeout = 30 * time.Second

// stallTicks is how many watchdog ticks make one timeout.
const stallTicks = 10

// ioClock counts the device operations of one goroutine (or of one role
// only one goroutine plays at a time, as the log's leader): odd while one
// is outstanding.
type ioClock struct{ n atomic.Uint64 }

func (c *ioClock) start() { c.n.Add(1) }
func (c *ioClock) end()   { c.n.Add(1) }

// errStalled marks a store failed by its watchdog.
var errStalled = errors.New("objstore: the meta device stopped answering")

// stallError says which device stopped answering, for how long, and what
// to do.
type stallError struct {
	metaDir string
	op      string
	waited  time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%v: a %s in %s has not completed for %v (stall timeout); the store stopped and "+
		"acknowledged no write that waited on it: check or replace the device of %s; the OSD's data comes back "+
		"from the other copies (mark it out if it stays down), and it never starts on its data directory without this index",
		errStalled, e.op, e.metaDir, e.waited.Round(time.Millisecond), e.metaDir)
}

func (e *stallError) Unwrap() error { return errStalled }

// stallTimeout is o's timeout, 0 for none.
func (o Options) stallTimeout() time.Duration {
	switch {
	case o.StallTimeout < 0:
		return 0
	case o.StallTimeout == 0:
		return DefaultStallTimeout
	}
	return o.StallTimeout
}

// watchStalls fails the store once one of the log's device operations has
// stayed outstanding for timeout; it returns then, or when the log closes.
func (s *Store) watchStalls(timeout time.Duration) {
	l := s.log
	tick := max(timeout/stallTicks, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	clocks := [...]struct {
		c     *ioClock
		op    string
		seen  uint64
		n     int       // ticks it has stayed outstanding
		since time.Time // when a tick first saw it
	}{{c: &l.writing, op: "commit-log write and sync"}, {c: &l.flushing, op: "flush of the index"}}
	for {
		select {
		case <-l.closing:
			return
		case <-s.failedCh:
			return // failed otherwise: nothing left to watch
		case now := <-t.C:
			for i := range clocks {
				w := &clocks[i]
				v := w.c.n.Load()
				if v%2 == 0 || v != w.seen {
					w.seen, w.n, w.since = v, 0, now
					continue
				}
				// Both: ticks, which a paused process misses, and time,
				// since ticks may come late and then in a burst.
				if w.n++; time.Duration(w.n)*tick >= timeout && now.Sub(w.since) >= timeout {
					s.stalled.Store(true)
					s.fail(&stallError{metaDir: s.opts.MetaDir, op: w.op, waited: now.Sub(w.since)})
					return
				}
			}
		}
	}
}

// closeStalled closes a store whose device stopped answering without
// waiting for it: goroutines blocked in its system calls stay so until it
// answers or the process exits, and the files and index they use stay
// open. Background work stops.
func (s *Store) closeStalled() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.pace.stop()
		s.wb.pace.stop()
	})
	return s.failure()
}
