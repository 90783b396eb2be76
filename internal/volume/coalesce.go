package volume

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/bufpool"
)

// Writes to one data object queue behind the one in flight and go out
// together when it is done. An OSD runs the writes to an object one after
// another, each a full round of replication, so a guest writing 4 KiB
// sequentially at depth 16 got one write per round. Sent as one write,
// what queued meanwhile takes one round too: several writes per round
// instead of one.
//
// Every queued write is acknowledged only once the write that carries it is
// durable, as before. All writes in a batch hold the volume's writer lock
// (Volume.mu) shared, so they carry the same snapshot number. A batch is
// sent under its first writer's context: a queued writer waits for the
// batch whatever its own context does (its bytes may be on the wire), and
// shares the batch's error, a cancellation of the first writer's included.

// objectQueues holds, for each data object with a write in flight, the
// writes waiting behind it.
type objectQueues struct {
	mu sync.Mutex
	q  map[uint64][]*queuedWrite // key present: a write is in flight
}

// queuedWrite is one write to an object, waiting for its turn.
type queuedWrite struct {
	off  uint64
	data []byte
	// wake gets either the batch this writer is to send (it leads), or
	// the result of the batch that carried it.
	wake chan wakeup
}

type wakeup struct {
	batch []*queuedWrite
	err   error
}

// writeObject writes data at off in object index, or queues it behind the
// write in flight there.
func (v *Volume) writeObject(ctx context.Context, wp *client.Pool, index, off uint64, data []byte) error {
	self := &queuedWrite{off: off, data: data}
	qs := &v.queues
	qs.mu.Lock()
	if qs.q == nil {
		qs.q = map[uint64][]*queuedWrite{}
	}
	batch := []*queuedWrite{self}
	if waiting, busy := qs.q[index]; busy {
		self.wake = make(chan wakeup, 1)
		qs.q[index] = append(waiting, self)
		qs.mu.Unlock()
		w := <-self.wake
		if w.batch == nil {
			return w.err
		}
		batch = w.batch
	} else {
		qs.q[index] = nil
		qs.mu.Unlock()
	}
	// This writer leads batch (itself first): send it, answer the others,
	// and hand what queued meanwhile to the first of them.
	errs := v.sendBatch(ctx, wp, index, batch)
	for i, w := range batch[1:] {
		w.wake <- wakeup{err: errs[i+1]}
	}
	qs.mu.Lock()
	if next := qs.q[index]; len(next) > 0 {
		qs.q[index] = nil
		next[0].wake <- wakeup{batch: next}
	} else {
		delete(qs.q, index)
	}
	qs.mu.Unlock()
	return errs[0]
}

// sendBatch writes batch to object index: as one write if together the
// writes cover one run of bytes, else one after another in order. It
// returns each write's result.
func (v *Volume) sendBatch(ctx context.Context, wp *client.Pool, index uint64, batch []*queuedWrite) []error {
	errs := make([]error, len(batch))
	name := v.objectName(index)
	if start, buf, ok := merge(batch); ok {
		err := wp.WriteAt(ctx, name, start, buf)
		bufpool.Put(buf)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, w := range batch {
		errs[i] = wp.WriteAt(ctx, name, w.off, w.data)
	}
	return errs
}

// merge returns the bytes of several writes that together cover one run
// [start, start+len(buf)) with no gap, later writes winning where they
// overlap, as if applied in order. buf is from bufpool.
func merge(batch []*queuedWrite) (start uint64, buf []byte, ok bool) {
	if len(batch) < 2 {
		return 0, nil, false
	}
	r := make([][2]uint64, len(batch))
	for i, w := range batch {
		r[i] = [2]uint64{w.off, w.off + uint64(len(w.data))}
	}
	slices.SortFunc(r, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	start, end := r[0][0], r[0][1]
	for _, x := range r[1:] {
		if x[0] > end {
			return 0, nil, false
		}
		end = max(end, x[1])
	}
	buf = bufpool.Get(int(end - start))
	for _, w := range batch {
		copy(buf[w.off-start:], w.data)
	}
	return start, buf, true
}
