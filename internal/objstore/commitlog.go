package objstore

// The commit log is the store's write-ahead log. The index (pebble) runs
// without a WAL of its own: every batch is first written here, durably,
// and only then applied to the index's memtable. Two reasons:
//
//   - One writer does the work. The first committer to arrive leads: it
//     writes the batches queued behind it in one write, and applies them;
//     the others only wait. Pebble's synced commit hands each batch to its
//     WAL goroutine and back (two context switches), and under 4 KiB writes
//     took far longer than a bare write and fdatasync.
//   - One system call per group. Segments are preallocated, zero-filled
//     files written with O_DIRECT|O_DSYNC: the write returns durable, with
//     no page-cache copy, no writeback and no inode change to commit.
//
// Journal records. A commit may carry, besides its batch, a second batch of
// journal records (the data of deferred writes, and their deletion once
// checkpointed), which is written to the log but not applied to the index:
// at runtime nothing reads it, and in the index's memtable a 4 KiB journal
// record and its deletion were two of the seven keys of a volume write,
// and nine tenths of its bytes (keeping them out lets an OSD take more
// 4 KiB volume writes per second). Replay applies every record of the log to
// the index, journal records too, so after Open they are where the
// journal replay (Store.replayJournal) has always found them. The price is
// a second condition on freeing a segment: besides the index flush, every
// journal record written to it must be released (commitPos.release), which
// the store does once a checkpoint has synced the record's data file. A
// segment still holding records makes the next writer wait and wakes the
// checkpointer (onHeld). A batch too large for a group has its journal
// records applied to the index with it (commitPos.indexed), since it is not
// in the log at all.
//
// Where it is: its format (logformat.go), the writer and its group commit
// (logwriter.go), replay at Open (logreplay.go) and the segment files
// (logsegments.go); here, the log's state and the journal records it holds.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

const (
	logSegments     = 3
	logMaxGroupFrac = 4 // a group takes at most 1/4 of a segment
)

// errCommitLog marks a failed commit-log write: the store must stop, and
// what the write did reach the disk is replayed at the next Open.
var errCommitLog = errors.New("objstore: commit log failed, restart the OSD")

// testLogSegment sizes commit-log segments on file systems in memory.
var testLogSegment int64 = 4 << 20

// logSegment is one preallocated file of the log, reused in turn.
type logSegment struct {
	path string
	f    vfs.File // reads; writes too when fd < 0
	fd   int      // O_DIRECT|O_DSYNC descriptor, or -1
	// Under commitLog.segMu:
	state int    // segFree, segActive, segFull
	gen   uint64 // times it became active
	first uint64 // number of its first group (of this use)
	// held counts journal records written to it (this use) and not yet
	// released; flushed says the index flushed every batch in it. A full
	// segment is freed once both allow it (mayFree).
	held    int
	flushed bool
}

// mayFree frees a full segment that recovery no longer needs. Called with
// segMu held.
func (s *logSegment) mayFree() {
	if s.state == segFull && s.flushed && s.held == 0 {
		s.state = segFree
	}
}

const (
	segFree = iota
	segActive
	segFull
)

// commitLog is a store's write-ahead log (see the top of this file).
type commitLog struct {
	fs      vfs.FS
	segSize int64
	align   int64
	apply   func(*pebble.Batch) error // into the index, without a WAL
	flush   func() error              // the index's memtables into sstables
	onHeld  func()                    // a writer waits for held journal records

	mu      sync.Mutex
	queue   []*logWaiter
	leading bool
	err     error         // sticky: set by the first failed write or flush (setErr)
	stopped chan struct{} // closed when err is set: queued writers stop waiting

	// The device operations the stall watchdog times (stall.go): the
	// leader's writes, syncs and applies, and the flusher's flushes.
	writing, flushing ioClock

	// Only the leader touches these.
	cur  int      // active segment
	off  int64    // where the next group goes in it
	seq  uint64   // number of the next group
	buf  []byte   // aligned group buffer
	recs [][]byte // the batches of the group being written

	segMu   sync.Mutex
	segCond *sync.Cond
	segs    [logSegments]*logSegment
	kick    chan struct{}
	closing chan struct{}
	done    chan struct{}

	// For tests and benchmarks: groups written, segment switches, large
	// batches, waits for held journal records.
	groups, wraps, large, heldWaits atomic.Int64
	// Commits written in those groups, and the groups' bytes (Counters).
	commits, groupBytes atomic.Int64
	// waitingHeld counts writers waiting in waitHeld: while there are any,
	// every deferred write applied asks for a checkpoint (see afterCommit).
	waitingHeld atomic.Int32
}

// commitPos says where a commit's journal records went: into segment seg
// in its use gen, to be released there, or into the index (indexed), to be
// deleted there.
type commitPos struct {
	seg     int
	gen     uint64
	indexed bool
}

// release tells the log that n journal records committed at p are durable
// in their data files, so recovery no longer needs them.
func (l *commitLog) release(p commitPos, n int) {
	if p.indexed || n == 0 {
		return
	}
	l.segMu.Lock()
	defer l.segMu.Unlock()
	s := l.segs[p.seg]
	if s.gen != p.gen || s.held < n {
		panic(fmt.Sprintf("objstore: commit log: releasing %d journal records of segment %d use %d, which holds %d in use %d", n, p.seg, p.gen, s.held, s.gen))
	}
	s.held -= n
	if s.held == 0 {
		s.mayFree()
		l.segCond.Broadcast()
	}
}

// abort stops the log after the store failed: a writer waiting for held
// journal records would otherwise wait forever.
func (l *commitLog) abort(err error) {
	l.mu.Lock()
	l.setErr(err)
	l.mu.Unlock()
	l.segMu.Lock()
	l.segCond.Broadcast()
	l.segMu.Unlock()
}

// setErr makes err (as an errCommitLog) the log's sticky error, unless it
// has one, and tells the writers waiting in the queue. Called with mu held.
func (l *commitLog) setErr(err error) {
	if l.err == nil {
		l.err = fmt.Errorf("%w: %v", errCommitLog, err)
		close(l.stopped)
	}
}

// failed returns the log's sticky error.
func (l *commitLog) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// waitHeld waits, with segMu held, until cond is false, asking the store to
// checkpoint while it is not.
func (l *commitLog) waitHeld(cond func() bool) error {
	for cond() {
		if err := l.failed(); err != nil {
			return err
		}
		l.heldWaits.Add(1)
		l.waitingHeld.Add(1)
		if l.onHeld != nil {
			l.onHeld()
		}
		l.segCond.Wait()
		l.waitingHeld.Add(-1)
	}
	return nil
}

func (l *commitLog) maxGroup() int64 { return l.segSize / logMaxGroupFrac }

// LogSegmentBytes is the size of each of the store's commit-log segments:
// the index's memtable size, less on a disk that was nearly full when the
// log was created.
func (s *Store) LogSegmentBytes() int64 { return s.log.segSize }

// openCommitLog opens (creating if missing) the log segments in dir,
// replays them into the index, flushes the index and starts a segment.
// segSize sizes the segments it creates. It returns the number of batches
// replayed.
func openCommitLog(fs vfs.FS, dir string, segSize int64, direct bool, apply func(*pebble.Batch) error, flush func() error, onHeld func()) (*commitLog, int, error) {
	l := &commitLog{fs: fs, segSize: segSize, align: logMinAlign, apply: apply, flush: flush, onHeld: onHeld,
		kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}), stopped: make(chan struct{})}
	l.segCond = sync.NewCond(&l.segMu)
	if err := l.openSegments(dir); err != nil {
		l.closeFiles()
		return nil, 0, err
	}
	n, err := l.replay()
	if err == nil {
		err = l.flush() // everything replayed is now in sstables
	}
	if err != nil {
		l.closeFiles()
		return nil, 0, err
	}
	if direct {
		l.openDirect()
	}
	cur := l.segs[l.cur]
	cur.state, cur.gen, cur.first = segActive, 1, l.seq
	if err := l.writeGroup(nil); err != nil { // its tail is itself
		l.closeFiles()
		return nil, 0, err
	}
	go l.flusher()
	return l, n, nil
}

// close stops the flusher and closes the segments. No commit may follow.
func (l *commitLog) close() {
	close(l.closing)
	<-l.done
	l.closeFiles()
	bufpool.Put(l.buf)
	l.buf = nil
}

func (l *commitLog) closeFiles() {
	for _, s := range l.segs {
		if s == nil {
			continue
		}
		if s.fd >= 0 {
			unix.Close(s.fd)
			s.fd = -1
		}
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}
}
