package objstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	iofs "io/fs"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

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
// Format. A segment is a sequence of groups, each starting at a multiple of
// the device's direct-IO alignment (never rewritten once written, so a torn
// write can only hit the group being written, which was not acknowledged):
//
//	magic(4) crc32c(4) seq(8) tail(8) len(4) align(4) | records (len bytes) | zero pad to align
//	record: n(4) | pebble batch representation (n bytes)
//
// The crc covers seq through the records. Groups are numbered without gaps
// across segments; a segment is written from its start, so its groups end
// at the first one that is invalid or does not follow its predecessor.
// tail is the number of the oldest group recovery needs; align, the
// alignment the group was written with (512 to 4096), says where the next
// one starts.
//
// Recovery. The index's flushed state is the effect of some prefix of the
// log, since batches are applied in log order. Every batch is a sequence of
// blind writes (set, delete, range delete of given values), so applying again
// any suffix of the log that reaches back at least to the flushed prefix ends
// in the state of the whole log. Open replays the groups from the newest
// group's tail to it, then flushes the index and starts a new segment. A
// segment is freed, and the tail moves past it, only after an index flush
// made every batch in it durable in sstables. A group missing between the
// tail and the newest group, or an intact group after a damaged one, is
// corruption: Open refuses the store rather than drop acknowledged writes.
//
// A batch too large for a group (a quarter of a segment) is committed
// behind an empty group whose tail is itself: flush, empty group, apply,
// flush.
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

const (
	logMagic        = 0xCA1C0106
	logHeaderLen    = 32
	logSegments     = 3
	logMaxGroupFrac = 4 // a group takes at most 1/4 of a segment
	logMinAlign     = 512
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

// logWaiter is one committer waiting for its batch's group.
type logWaiter struct {
	batch   *pebble.Batch
	journal *pebble.Batch // written to the log only, or nil
	held    int           // journal records the segment holds until released
	pos     commitPos     // where the journal went
	err     error
	lead    bool          // woken to lead, not done
	wake    chan struct{} // capacity 1
}

var waiterPool = sync.Pool{New: func() any { return &logWaiter{wake: make(chan struct{}, 1)} }}

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
	err     error // sticky: set by the first failed write or flush

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
	if l.err == nil {
		l.err = fmt.Errorf("%w: %v", errCommitLog, err)
	}
	l.mu.Unlock()
	l.segMu.Lock()
	l.segCond.Broadcast()
	l.segMu.Unlock()
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
		kick: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
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

// openSegments opens the segment files, creating missing ones. A segment
// is filled under a temporary name and renamed, so a crash never leaves a
// short one.
func (l *commitLog) openSegments(dir string) error {
	for i := range l.segs {
		p := l.fs.PathJoin(dir, fmt.Sprintf("commitlog-%d", i))
		l.segs[i] = &logSegment{path: p, fd: -1}
	}
	// Segments that exist keep their size (the disk's may have changed).
	var missing []*logSegment
	for i := len(l.segs) - 1; i >= 0; i-- {
		st, err := l.fs.Stat(l.segs[i].path)
		switch {
		case err == nil:
			l.segSize = st.Size()
		case errors.Is(err, iofs.ErrNotExist):
			missing = append(missing, l.segs[i])
		default:
			return fmt.Errorf("objstore: commit log: %w", err)
		}
	}
	if err := l.createSegments(missing); err != nil {
		return err
	}
	for _, seg := range l.segs {
		st, err := l.fs.Stat(seg.path)
		if err != nil {
			return fmt.Errorf("objstore: commit log: %w", err)
		}
		if st.Size() != l.segSize {
			return &CorruptionError{Detail: fmt.Sprintf("commit log segment %s is %d bytes, the others %d", seg.path, st.Size(), l.segSize)}
		}
		if seg.f, err = l.fs.OpenReadWrite(seg.path, vfs.WriteCategoryUnspecified); err != nil {
			return fmt.Errorf("objstore: open commit log: %w", err)
		}
	}
	if l.segSize < 4*logHeaderLen*logMaxGroupFrac || l.segSize%4096 != 0 {
		return &CorruptionError{Detail: fmt.Sprintf("commit log segments of %d bytes", l.segSize)}
	}
	if len(missing) == 0 {
		return nil
	}
	d, err := l.fs.OpenDir(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("objstore: sync %s: %w", dir, err)
	}
	return nil
}

// logMinSegment is the smallest segment createSegments falls back to.
const logMinSegment = 1 << 20

// createSegments creates the missing segments. A store without any (new,
// or upgraded from a format without the log) on a disk too full for
// segments of the wanted size gets smaller ones, down to logMinSegment,
// rather than not opening: an operator upgrading a nearly full OSD must
// still be able to start it and delete data. Smaller segments only mean
// more frequent index flushes.
func (l *commitLog) createSegments(missing []*logSegment) error {
	for {
		var err error
		var made []*logSegment
		for _, seg := range missing {
			if err = createSegment(l.fs, seg.path, l.segSize); err != nil {
				break
			}
			made = append(made, seg)
		}
		if err == nil || !errors.Is(err, ErrNoSpace) || len(missing) < logSegments || l.segSize/2 < logMinSegment {
			return err
		}
		for _, seg := range made {
			if e := l.fs.Remove(seg.path); e != nil {
				return fmt.Errorf("objstore: commit log: %w", e)
			}
		}
		l.segSize /= 2
	}
}

// createSegment writes a zero-filled segment of size bytes at path.
func createSegment(fs vfs.FS, path string, size int64) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("objstore: create commit log: %w", err)
	}
	err = fillZeros(f, size)
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		fs.Remove(tmp)
		if isNoSpace(err) {
			return fmt.Errorf("objstore: no room for the commit log (%d segments of %d bytes): %w", logSegments, size, ErrNoSpace)
		}
		return fmt.Errorf("objstore: create commit log: %w", err)
	}
	return nil
}

// openDirect opens each segment for O_DIRECT|O_DSYNC writes, aligned to
// what the filesystem asks (512 bytes on most disks: a 4 KiB batch then
// takes 4.5 KiB of log, not 8). Without it, writes go through the page
// cache and each is synced.
func (l *commitLog) openDirect() {
	for _, s := range l.segs {
		fd, err := unix.Open(s.path, unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, s := range l.segs {
				if s.fd >= 0 {
					unix.Close(s.fd)
					s.fd = -1
				}
			}
			return
		}
		s.fd = fd
	}
	l.align = 4096
	var st unix.Statx_t
	if unix.Statx(l.segs[0].fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st) == nil &&
		st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align >= logMinAlign && st.Dio_offset_align <= 4096 &&
		st.Dio_mem_align <= 4096 && 4096%st.Dio_offset_align == 0 {
		l.align = int64(st.Dio_offset_align)
	}
}

// logGroup is one intact group found on disk.
type logGroup struct {
	seg       int
	off       int64
	seq, tail uint64
	body      []byte // header and records
}

// decodeLogGroup checks the group at the start of b (header and records;
// the padding need not be there) and returns its records' batches. It
// fails on anything but a whole, intact group.
func decodeLogGroup(b []byte) (seq, tail uint64, recs [][]byte, n int, err error) {
	if len(b) < logHeaderLen || binary.BigEndian.Uint32(b) != logMagic {
		return 0, 0, nil, 0, errors.New("no group")
	}
	ln := binary.BigEndian.Uint32(b[24:])
	if uint64(ln) > uint64(len(b)-logHeaderLen) {
		return 0, 0, nil, 0, errors.New("group runs past the segment")
	}
	n = logHeaderLen + int(ln)
	if crc32.Checksum(b[8:n], castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return 0, 0, nil, 0, errors.New("group checksum mismatch")
	}
	seq, tail = binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])
	if a := binary.BigEndian.Uint32(b[28:]); tail > seq || a < logMinAlign || a > 4096 || a&(a-1) != 0 {
		return 0, 0, nil, 0, errors.New("bad group header")
	}
	for r := b[logHeaderLen:n]; len(r) > 0; {
		if len(r) < 4 || uint64(binary.BigEndian.Uint32(r)) > uint64(len(r)-4) {
			return 0, 0, nil, 0, errors.New("record runs past its group")
		}
		k := binary.BigEndian.Uint32(r)
		recs = append(recs, r[4:4+k])
		r = r[4+k:]
	}
	return seq, tail, recs, n, nil
}

// readGroup returns the intact group at off of segment i, if there is one.
func (l *commitLog) readGroup(i int, off int64) (logGroup, bool, error) {
	seg := l.segs[i]
	var hdr [logHeaderLen]byte
	if _, err := seg.f.ReadAt(hdr[:], off); err != nil {
		return logGroup{}, false, fmt.Errorf("objstore: read commit log %s: %w", seg.path, err)
	}
	ln := int64(binary.BigEndian.Uint32(hdr[24:]))
	if binary.BigEndian.Uint32(hdr[:]) != logMagic || ln > l.segSize-off-logHeaderLen {
		return logGroup{}, false, nil
	}
	b := make([]byte, logHeaderLen+ln)
	if _, err := seg.f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return logGroup{}, false, fmt.Errorf("objstore: read commit log %s: %w", seg.path, err)
	}
	seq, tail, _, _, err := decodeLogGroup(b)
	if err != nil {
		return logGroup{}, false, nil
	}
	return logGroup{seg: i, off: off, seq: seq, tail: tail, body: b}, true, nil
}

// groupSize is the bytes g takes in its segment, padding included.
func groupSize(g logGroup) int64 {
	return roundUp(int64(len(g.body)), int64(binary.BigEndian.Uint32(g.body[28:])))
}

// scanSegment returns the unbroken run of groups at the start of segment
// i, and where it ends.
func (l *commitLog) scanSegment(i int) ([]logGroup, int64, error) {
	var out []logGroup
	off := int64(0)
	for off+logHeaderLen <= l.segSize {
		g, ok, err := l.readGroup(i, off)
		if err != nil {
			return nil, 0, err
		}
		if !ok || len(out) > 0 && g.seq != out[len(out)-1].seq+1 {
			break
		}
		out = append(out, g)
		off += groupSize(g)
	}
	return out, off, nil
}

// laterGroup looks for an intact group numbered after newest in segment i
// from off on: one there means a damaged group hid it from the scan.
func (l *commitLog) laterGroup(i int, off int64, newest uint64) (uint64, bool, error) {
	const chunk = 1 << 20
	buf := make([]byte, chunk+logHeaderLen)
	for ; off+logHeaderLen <= l.segSize; off += chunk {
		n, err := l.segs[i].f.ReadAt(buf[:min(int64(len(buf)), l.segSize-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, fmt.Errorf("objstore: read commit log %s: %w", l.segs[i].path, err)
		}
		for o := 0; o+logHeaderLen <= n && o < chunk; o += logMinAlign {
			if binary.BigEndian.Uint32(buf[o:]) != logMagic || binary.BigEndian.Uint64(buf[o+8:]) <= newest {
				continue
			}
			if g, ok, err := l.readGroup(i, off+int64(o)); err != nil || ok && g.seq > newest {
				return g.seq, ok, err
			}
		}
	}
	return 0, false, nil
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

// replay applies the groups from the newest one's tail to it (see the
// type's doc), and leaves cur and seq where the next group goes: at the
// start of the segment after the newest group's.
func (l *commitLog) replay() (int, error) {
	bySeq := map[uint64]logGroup{}
	ends := make([]int64, len(l.segs))
	var newest logGroup
	for i := range l.segs {
		run, end, err := l.scanSegment(i)
		if err != nil {
			return 0, err
		}
		ends[i] = end
		for _, g := range run {
			bySeq[g.seq] = g
			if g.seq > newest.seq {
				newest = g
			}
		}
	}
	for i := range l.segs {
		if seq, ok, err := l.laterGroup(i, ends[i], newest.seq); err != nil {
			return 0, err
		} else if ok {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log %s: a damaged group hides group %d, an acknowledged commit", l.segs[i].path, seq)}
		}
	}
	if newest.seq == 0 {
		l.cur, l.seq = 0, 1
		return 0, nil
	}
	n := 0
	for seq := newest.tail; seq <= newest.seq; seq++ {
		g, ok := bySeq[seq]
		if !ok {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d, needed to recover up to group %d, is missing or damaged", seq, newest.seq)}
		}
		_, _, recs, _, err := decodeLogGroup(g.body)
		if err != nil {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d: %v", seq, err)}
		}
		for _, r := range recs {
			b := new(pebble.Batch)
			if err := b.SetRepr(r); err != nil {
				return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d: %v", seq, err)}
			}
			if err := l.apply(b); err != nil {
				return 0, fmt.Errorf("objstore: commit log replay: %w", err)
			}
			n++
		}
	}
	l.cur = (newest.seg + 1) % logSegments
	l.seq = newest.seq + 1
	return n, nil
}

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
	defer waiterPool.Put(w)
	w.batch, w.journal, w.held, w.pos, w.err, w.lead = b, journal, held, commitPos{}, nil, false
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return commitPos{}, err
	}
	l.queue = append(l.queue, w)
	if l.leading {
		l.mu.Unlock()
		<-w.wake
		if !w.lead {
			w.batch, w.journal = nil, nil
			return w.pos, w.err
		}
		l.mu.Lock()
	}
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
		}
		if err != nil && l.err == nil {
			l.err = fmt.Errorf("%w: %v", errCommitLog, err)
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
	size := int64(logHeaderLen)
	n := 0
	for n < len(l.queue) {
		s := l.queue[n].size()
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
	if len(group) == 1 && logHeaderLen+group[0].size() > l.maxGroup() {
		w := group[0]
		w.pos.indexed = true
		return l.commitLarge(w.batch, w.journal)
	}
	if err := l.writeGroup(group); err != nil {
		return err
	}
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
func (l *commitLog) commitLarge(b, journal *pebble.Batch) error {
	l.large.Add(1)
	if err := l.flush(); err != nil {
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
	if err := l.apply(b); err != nil {
		return err
	}
	if journal != nil {
		if err := l.apply(journal); err != nil {
			return err
		}
	}
	return l.flush()
}

// writeGroup writes one group, durably. Only the leader calls it.
func (l *commitLog) writeGroup(group []*logWaiter) error {
	n := int64(logHeaderLen)
	for _, g := range group {
		n += g.size()
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
	if err := l.segs[l.cur].writeDurable(b, l.off); err != nil {
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
	return nil
}

// encodeLogGroup appends group number seq, holding recs, to dst, padded to
// align.
func encodeLogGroup(dst []byte, seq, tail uint64, align uint32, recs [][]byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, logMagic)
	dst = binary.BigEndian.AppendUint32(dst, 0) // crc, below
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint64(dst, tail)
	dst = binary.BigEndian.AppendUint32(dst, 0) // length, below
	dst = binary.BigEndian.AppendUint32(dst, align)
	for _, r := range recs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
	b := dst[start:]
	binary.BigEndian.PutUint32(b[24:], uint32(len(b)-logHeaderLen))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
	pad := int(roundUp(int64(len(b)), int64(align))) - len(b)
	dst = slices.Grow(dst, pad)
	n := len(dst)
	dst = dst[:n+pad]
	clear(dst[n:])
	return dst
}

func (s *logSegment) writeDurable(b []byte, off int64) error {
	if s.fd < 0 {
		if _, err := s.f.WriteAt(b, off); err != nil {
			return err
		}
		return s.f.SyncData()
	}
	if injectIO != nil {
		if err := injectIO(ioLogWrite, s.path); err != nil {
			return fmt.Errorf("write %s: %w", s.path, err)
		}
	}
	for done := 0; done < len(b); {
		n, err := unix.Pwrite(s.fd, b[done:], off+int64(done))
		if err != nil {
			return fmt.Errorf("write %s: %w", s.path, err)
		}
		if n <= 0 {
			return fmt.Errorf("write %s: no progress", s.path)
		}
		done += n
	}
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
		err := l.flush()
		l.segMu.Lock()
		if err != nil {
			l.mu.Lock()
			if l.err == nil {
				l.err = fmt.Errorf("%w: index flush: %v", errCommitLog, err)
			}
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
