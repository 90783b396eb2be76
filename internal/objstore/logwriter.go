package objstore

// Writing the commit log: the group commit (the first committer leads and
// writes the batches queued behind it in one write, commitJournal), the
// segment switch, and the flusher that frees full segments.
//
// A batch too large for a group (a quarter of a segment) is committed
// behind an empty group whose tail is itself: flush, empty group, apply,
// flush.

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// logWaiter is one committer waiting for its batch's group.
type logWaiter struct {
	batch   *pebble.Batch
	journal *pebble.Batch // written to the log only, or nil
	held    int           // journal records the segment holds until released
	bytes   int64         // its records' size in a group (takeGroup)
	pos     commitPos     // where the journal went
	err     error
	lead    bool          // woken to lead, not done
	wake    chan struct{} // capacity 1
	// state says who may read the batches: once the log failed, a waiting
	// writer gives up (waiterGone) and its caller may release them, unless
	// the leader is reading them (waiterInUse) for a group it took before.
	state atomic.Int32
}

const (
	waiterWaiting = iota
	waiterInUse
	waiterGone
)

// useBatches marks the group's batches in use by the leader, or returns
// false, marking none, if a writer of the group gave up on the failed log.
func useBatches(group []*logWaiter) bool {
	for i, g := range group {
		if !g.state.CompareAndSwap(waiterWaiting, waiterInUse) {
			releaseBatches(group[:i])
			return false
		}
	}
	return true
}

func releaseBatches(group []*logWaiter) {
	for _, g := range group {
		g.state.Store(waiterWaiting)
	}
}

// await waits until w is woken, and returns true; or, once the log has
// failed, gives up waiting and returns false, which leaves w to the leader
// (it may still write to it and wake it) and its batches to the caller.
// The leader of a stalled write holds the log until the device answers;
// the writers queued behind it do not wait for that.
func (l *commitLog) await(w *logWaiter) bool {
	select {
	case <-w.wake:
		return true
	case <-l.stopped:
	}
	for !w.state.CompareAndSwap(waiterWaiting, waiterGone) {
		// The leader is reading its batches (encoding or applying, not
		// waiting on the device): until it is done with them.
		select {
		case <-w.wake:
			return true
		case <-time.After(time.Millisecond):
		}
	}
	return false
}

var waiterPool = sync.Pool{New: func() any { return &logWaiter{wake: make(chan struct{}, 1)} }}

// commit makes b durable in the log and applies it to the index.
func (l *commitLog) commit(b *pebble.Batch) error {
	_, err := l.commitJournal(b, nil, 0)
	return err
}

// commitJournal makes b and journal (nil for none) durable in the log and
// applies b to the index. The first held records of journal keep their
// segment from being reused until released at the position returned.
func (l *commitLog) commitJournal(b, journal *pebble.Batch, held int) (commitPos, error) {
	w := waiterPool.Get().(*logWaiter)
	w.batch, w.journal, w.held, w.pos, w.err, w.lead = b, journal, held, commitPos{}, nil, false
	w.state.Store(waiterWaiting)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		waiterPool.Put(w)
		return commitPos{}, err
	}
	l.queue = append(l.queue, w)
	if l.leading {
		l.mu.Unlock()
		if !l.await(w) {
			return commitPos{}, l.failed() // w stays out of the pool
		}
		if !w.lead {
			w.batch, w.journal = nil, nil
			pos, err := w.pos, w.err
			waiterPool.Put(w)
			return pos, err
		}
		l.mu.Lock()
	}
	defer waiterPool.Put(w)
	l.leading = true
	for {
		group := l.takeGroup()
		err := l.err
		if err == nil {
			// After a failed write nothing more is written: a later group
			// intact behind a torn one would make the log unreadable.
			l.mu.Unlock()
			err = l.commitGroup(group)
			l.mu.Lock()
			if err == nil && l.err != nil {
				// Written after the log failed (the stall watchdog gave up
				// on it): never acknowledged.
				err = l.err
			}
		}
		if err != nil {
			l.setErr(err)
		}
		mine := false
		for _, g := range group {
			if err != nil {
				g.err = l.err
			}
			if g == w {
				mine = true
			} else {
				g.wake <- struct{}{}
			}
		}
		if mine {
			break
		}
	}
	if len(l.queue) > 0 {
		next := l.queue[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		l.leading = false
	}
	l.mu.Unlock()
	w.batch, w.journal = nil, nil
	return w.pos, w.err
}

// takeGroup takes waiters off the queue for one group: as many as fit a
// group, or one batch too large for a group alone. Called with mu held.
func (l *commitLog) takeGroup() []*logWaiter {
	if l.err != nil {
		// Nothing more is written: every waiter gets the error, and no
		// batch is read (a writer that gave up may have released its own).
		group := slices.Clone(l.queue)
		l.queue = l.queue[:0]
		return group
	}
	size := int64(logHeaderLen)
	n := 0
	for n < len(l.queue) {
		w := l.queue[n]
		w.bytes = w.size()
		s := w.bytes
		if n > 0 && size+s > l.maxGroup() {
			break
		}
		size += s
		n++
		if size > l.maxGroup() {
			break
		}
	}
	group := slices.Clone(l.queue[:n])
	l.queue = append(l.queue[:0], l.queue[n:]...)
	return group
}

// size is the bytes w's records take in a group (an empty batch, as a
// checkpoint's that deletes journal records only, takes none).
func (w *logWaiter) size() int64 {
	var n int64
	if !w.batch.Empty() {
		n += int64(4 + len(w.batch.Repr()))
	}
	if w.journal != nil {
		n += int64(4 + len(w.journal.Repr()))
	}
	return n
}

// commitGroup writes a group and applies its batches, in order.
func (l *commitLog) commitGroup(group []*logWaiter) error {
	if len(group) == 1 && logHeaderLen+group[0].bytes > l.maxGroup() {
		w := group[0]
		w.pos.indexed = true
		return l.commitLarge(w)
	}
	if err := l.writeGroup(group); err != nil {
		return err
	}
	if !useBatches(group) {
		return l.failed()
	}
	defer releaseBatches(group)
	l.writing.start()
	defer l.writing.end()
	for _, g := range group {
		if g.batch.Empty() {
			continue
		}
		if err := l.apply(g.batch); err != nil {
			return err
		}
	}
	return nil
}

// commitLarge commits a batch too large for a group, and its journal
// records: once every earlier batch is in the index's sstables and every
// journal record in the log is released, an empty group moves the tail to
// itself; then both are applied to the index and flushed.
func (l *commitLog) commitLarge(w *logWaiter) error {
	l.large.Add(1)
	if err := l.timedFlush(); err != nil {
		return err
	}
	l.segMu.Lock()
	err := l.waitHeld(func() bool {
		return slices.ContainsFunc(l.segs[:], func(s *logSegment) bool { return s.state != segFree && s.held > 0 })
	})
	if err == nil {
		for _, s := range l.segs {
			if s.state == segFull {
				s.flushed = true
				s.mayFree()
			}
		}
		l.segs[l.cur].first = l.seq
		l.segCond.Broadcast()
	}
	l.segMu.Unlock()
	if err != nil {
		return err
	}
	if err := l.writeGroup(nil); err != nil {
		return err
	}
	if err := l.applyLarge(w); err != nil {
		return err
	}
	return l.timedFlush()
}

// applyLarge applies a large batch and its journal records to the index.
func (l *commitLog) applyLarge(w *logWaiter) error {
	group := []*logWaiter{w}
	if !useBatches(group) {
		return l.failed()
	}
	defer releaseBatches(group)
	if err := l.apply(w.batch); err != nil {
		return err
	}
	if w.journal != nil {
		return l.apply(w.journal)
	}
	return nil
}

// timedFlush is the leader's flush of the index, timed by the watchdog as
// part of its commit.
func (l *commitLog) timedFlush() error {
	l.writing.start()
	defer l.writing.end()
	return l.flush()
}

// writeGroup writes one group, durably. Only the leader calls it.
func (l *commitLog) writeGroup(group []*logWaiter) error {
	n := int64(logHeaderLen)
	for _, g := range group {
		n += g.bytes
	}
	size := roundUp(n, l.align)
	if size > l.segSize-l.off {
		if err := l.nextSegment(); err != nil {
			return err
		}
	}
	l.segMu.Lock()
	tail := l.seq
	for _, s := range l.segs {
		if s.state != segFree {
			tail = min(tail, s.first)
		}
	}
	l.segMu.Unlock()
	if int64(cap(l.buf)) < size {
		bufpool.Put(l.buf)
		l.buf = bufpool.Aligned(int(max(size, 64<<10)))
	}
	if !useBatches(group) {
		return l.failed()
	}
	l.recs = l.recs[:0]
	held := 0
	for _, g := range group {
		if !g.batch.Empty() {
			l.recs = append(l.recs, g.batch.Repr())
		}
		if g.journal != nil {
			l.recs = append(l.recs, g.journal.Repr())
			held += g.held
		}
	}
	b := encodeLogGroup(l.buf[:0], l.seq, tail, uint32(l.align), l.recs)
	if int64(len(b)) != size || &b[0] != &l.buf[0] {
		panic("objstore: commit log group encoded outside its aligned buffer")
	}
	if invariantsOn {
		checkGroup(b, l.seq, tail, l.recs)
	}
	clear(l.recs) // no references to batches past their commit
	releaseBatches(group)
	l.writing.start()
	err := l.segs[l.cur].writeDurable(b, l.off)
	l.writing.end()
	if err != nil {
		return err
	}
	if held > 0 {
		l.segMu.Lock()
		cur := l.segs[l.cur]
		cur.held += held
		for _, g := range group {
			g.pos = commitPos{seg: l.cur, gen: cur.gen}
		}
		l.segMu.Unlock()
	}
	l.off += size
	l.seq++
	l.groups.Add(1)
	l.commits.Add(int64(len(group)))
	l.groupBytes.Add(size)
	return nil
}

// nextSegment hands the full segment to the flusher and moves to the next
// one, waiting for it to be free.
func (l *commitLog) nextSegment() error {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	l.segs[l.cur].state = segFull
	select {
	case l.kick <- struct{}{}:
	default:
	}
	next := (l.cur + 1) % logSegments
	for l.segs[next].state != segFree {
		if err := l.failed(); err != nil {
			return err
		}
		if s := l.segs[next]; s.flushed && s.held > 0 {
			// Only unreleased journal records keep it.
			if err := l.waitHeld(func() bool { return s.state != segFree && s.held > 0 }); err != nil {
				return err
			}
			continue
		}
		l.segCond.Wait()
	}
	l.segs[next].state = segActive
	l.segs[next].gen++
	l.segs[next].first = l.seq
	l.segs[next].flushed = false
	l.cur, l.off = next, 0
	l.wraps.Add(1)
	return nil
}

// flusher frees full segments: once the index has flushed every batch
// applied so far, no full segment is needed for recovery.
func (l *commitLog) flusher() {
	defer close(l.done)
	for {
		select {
		case <-l.closing:
			return
		case <-l.kick:
		}
		type seen struct {
			i   int
			gen uint64
		}
		var full []seen
		l.segMu.Lock()
		for i, s := range l.segs {
			if s.state == segFull {
				full = append(full, seen{i, s.gen})
			}
		}
		l.segMu.Unlock()
		if len(full) == 0 {
			continue
		}
		l.flushing.start()
		err := l.flush()
		l.flushing.end()
		l.segMu.Lock()
		if err != nil {
			l.mu.Lock()
			l.setErr(fmt.Errorf("index flush: %w", err))
			l.mu.Unlock()
		} else {
			for _, f := range full {
				if s := l.segs[f.i]; s.state == segFull && s.gen == f.gen {
					s.flushed = true
					s.mayFree()
				}
			}
		}
		l.segCond.Broadcast()
		l.segMu.Unlock()
	}
}
