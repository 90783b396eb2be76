package objstore

import (
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// remover unlinks the data files of deleted and replaced objects in the
// background, after the transactions that dropped them have committed.
//
// Why: an unlink is the filesystem's work of freeing the file's extents,
// and a writer has no reason to wait for it once the index no longer
// points at the file. On ext4 mounted with discard (what many SSD setups
// use), unlinking a 4 MiB data file takes long enough that deleting 4 MiB
// objects with the unlink inline ran at a fraction of the rate of Ceph's
// BlueStore.
//
// Nothing is lost by a crash: a file whose removal had not happened is an
// orphan, which the next Open removes (removeOrphans), and data file IDs
// are never reused, so a late removal cannot hit a live file. The queue is
// bounded (maxQueuedRemovals): past it, the caller unlinks the file itself.
// Each unlink makes the store sample free space again, and a write refused
// for space waits for the queue before it is refused for good
// (Store.checkSpace), so the space a deletion frees is never withheld from
// a writer.
type remover struct {
	fs      vfs.FS
	removed func() // after each unlink: the disk has more free space

	mu      sync.Mutex
	queue   []string
	queued  uint64     // removals ever queued
	done    uint64     // of those, unlinked (in queue order)
	moved   *sync.Cond // on mu: broadcast when done grows
	closed  bool
	wake    chan struct{} // capacity 1
	stopped chan struct{} // closed when run returns
}

const maxQueuedRemovals = 1024

func newRemover(fs vfs.FS, removed func()) *remover {
	r := &remover{fs: fs, removed: removed, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	r.moved = sync.NewCond(&r.mu)
	go r.run()
	return r
}

// remove unlinks path, now or soon. A failure leaves an orphan that the
// next Open removes. fs serves a nil remover (a store still opening).
func (r *remover) remove(fs vfs.FS, path string) {
	if r == nil {
		_ = fs.Remove(path)
		return
	}
	r.mu.Lock()
	if r.closed || len(r.queue) >= maxQueuedRemovals {
		r.mu.Unlock()
		_ = r.fs.Remove(path)
		r.removed()
		return
	}
	r.queue = append(r.queue, path)
	r.queued++
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *remover) run() {
	defer close(r.stopped)
	var batch []string
	for {
		r.mu.Lock()
		batch, r.queue = r.queue, batch[:0]
		closed := r.closed
		r.mu.Unlock()
		for _, p := range batch {
			_ = r.fs.Remove(p)
			r.removed()
			r.mu.Lock()
			r.done++
			r.moved.Broadcast()
			r.mu.Unlock()
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-r.wake
	}
}

// close removes what is queued, then stops; later removals are done by
// their callers.
func (r *remover) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	<-r.stopped
}

// busy reports whether removals are queued or under way.
func (r *remover) busy() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done < r.queued
}

// drain waits until every removal queued before it was called is done (not
// the ones queued meanwhile, so a stream of deletes cannot hold it up): a
// writer short of space gets back what deleted objects still hold.
func (r *remover) drain() {
	if r == nil {
		return
	}
	r.waitFor(r.mark())
}

// mark returns how many removals have been queued so far.
func (r *remover) mark() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queued
}

// waitFor waits until the first n removals ever queued are done.
func (r *remover) waitFor(n uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.done < n {
		r.moved.Wait()
	}
}

// pending returns how many removals are queued (for tests).
func (r *remover) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}
