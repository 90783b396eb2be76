package objstore

// The write-back area: small overwrites kept on the meta device until the
// destager (destage.go) moves them to the data disk.
//
// Without it a deferred write's blocks go into a journal record and, right
// after the commit, into the data file's page cache, which the checkpointer
// syncs within a second: sustained small random writes then run at the
// data disk's sync rate (pacer.go). With Options.WritebackBytes set, a
// deferred write sets one index key per block instead,
//
//	'W' fileID(8) block(8) -> the block's whole 4 KiB
//
// in the transaction's own batch, next to the checksum chunk that already
// holds the block's new checksum: the one commit-log write that makes the
// transaction durable makes the blocks durable, on the meta device, and the
// data file is not touched. A later overwrite of the block replaces its key
// (merging for free), and the keys sort by file and block (the destager's
// order for free).
//
// A W key is authoritative over the block's slot in the data file until it
// is deleted: every read of a data-file block (readBlocks, the partial-block
// read of applyCtx.block, and so scrubs and the read cache, which read
// through them) takes the block from its W key when it has one. The store
// keeps the W keys' blocks in memory by file (wbFile, rebuilt at Open by a
// scan of the W range), so reads of files without any pay one atomic load.
//
// Who changes W keys, and the guards that keep them right:
//   - A writer sets them (deferred writes while the area is on, and any
//     rewrite of a block that has one while it is on) or deletes them
//     (while it is off: the block is journaled as without the area, and its
//     key deleted in the same batch; copy-on-write overwrites of blocks
//     that have one; deletes, Put-over and truncates drop a file's keys with
//     a range deletion). It holds the object's lock, and holds guard for
//     reading from before its commit until the in-memory view shows it.
//   - The destager reads a block's value, generation (a number each set of
//     the key gets) and live slot while it holds the object's lock, and
//     writes the value there after letting the lock go: readers keep
//     reading the key meanwhile, writers that only set keys go on, and a
//     writer that would write the file's blocks itself waits for it
//     (waitDestage). It syncs the file, and then, holding guard for
//     writing, deletes the keys whose generation is still the one it
//     wrote: a newer value set meanwhile is never deleted, and is destaged
//     again later.
//
// Back-pressure: the dirty bytes are a pacer's backlog (pacer.go) with
// fixed watermarks: below three quarters of the area writes pass, between
// there and full they are admitted at a rate that falls from twice to half
// the measured destage rate, and at full they wait for the destager.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

const (
	tagWriteback = 'W' // W fileID(8) block(8) -> 4 KiB block (writeback.go)
	// wbMinArea is the least area the watermarks assume: an area of a few
	// blocks would hold every writer at once.
	wbMinArea = 16 * blockSize
)

// wbKey is the W key of block b of data file fileID.
func wbKey(fileID, b uint64) []byte {
	k := make([]byte, 17)
	k[0] = tagWriteback
	binary.BigEndian.PutUint64(k[1:], fileID)
	binary.BigEndian.PutUint64(k[9:], b)
	return k
}

// decodeWBKey parses a W key.
func decodeWBKey(k []byte) (fileID, b uint64, err error) {
	if len(k) != 17 || k[0] != tagWriteback {
		return 0, 0, fmt.Errorf("bad write-back key %x", k)
	}
	fileID, b = binary.BigEndian.Uint64(k[1:]), binary.BigEndian.Uint64(k[9:])
	if fileID == 0 || b >= MaxObjectSize/blockSize {
		return 0, 0, fmt.Errorf("write-back key %x out of range", k)
	}
	return fileID, b, nil
}

// WritebackStats describe a store's write-back area.
type WritebackStats struct {
	On          bool    // new small writes go into the area; false: it drains
	AreaBytes   int64   // Options.WritebackBytes
	DirtyBytes  int64   // blocks in the area, not yet on the data disk
	Files       int     // data files with blocks in the area
	Written     int64   // bytes written into the area since Open
	Bypassed    int64   // bytes of sequential runs that went past it since Open
	Destaged    int64   // bytes moved to the data disk since Open
	DestageRate float64 // bytes a second the destager moves (moving average; 0 until measured)
	PacedWrites int64   // writes the area's back-pressure slowed or held
}

// wbFile is the in-memory view of one data file's W keys.
type wbFile struct {
	shard  int               // lock shard of the object owning the file; -1 until Open finds it
	blocks map[uint64]uint64 // block -> generation of its W key's value
}

// writeback is a store's write-back area (see the top of this file).
type writeback struct {
	area int64
	on   atomic.Bool

	guard sync.RWMutex // writers changing W keys: read; the destager's deletions: write

	mu     sync.RWMutex
	files  map[uint64]*wbFile
	gen    uint64       // the last generation handed out (under mu)
	blocks atomic.Int64 // W keys, for the read path's quick check

	pace     *pacer // back-pressure; its backlog is the dirty bytes
	seq      seqStreams
	kick     chan struct{}
	done     chan struct{}
	destaged atomic.Int64
	written  atomic.Int64
	noSpace  atomic.Int64 // passes the data disk refused for space
	passMu   sync.Mutex   // one destage pass at a time
	ioMu     sync.Mutex
	ioCond   *sync.Cond // on ioMu: broadcast when the destager finishes a file's writes
	writing  uint64     // the file the destager writes outside its object lock, 0 if none
	cursor   uint64     // the destager's next file (under passMu)
}

func newWriteback(area, seqCutoff int64) *writeback {
	wb := &writeback{area: area, files: map[uint64]*wbFile{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	wb.seq.cutoff = seqCutoff
	if seqCutoff == 0 {
		wb.seq.cutoff = DefaultSequentialCutoff
	}
	wb.on.Store(area > 0)
	wb.ioCond = sync.NewCond(&wb.ioMu)
	high := max(area, wbMinArea)
	p := &pacer{maxHigh: high, fixedLow: high / 4 * 3}
	p.cond = sync.NewCond(&p.mu)
	p.low.Store(p.fixedLow)
	wb.pace = p
	return wb
}

// wbChange is a change of W keys a transaction's batch makes, applied to
// the in-memory view after its commit, in batch order.
type wbChange struct {
	kind          int // wbSet, wbDel, wbCut (blocks from b on), wbDrop (the file)
	fileID, block uint64
	shard         int
}

const (
	wbSet = iota
	wbDel
	wbCut
	wbDrop
)

// dirty is the area's bytes in use.
func (wb *writeback) dirty() int64 { return wb.blocks.Load() * blockSize }

// hasFile says whether data file fid has W keys. The caller holds the
// lock of the file's object, so only the destager may remove them meanwhile.
func (wb *writeback) hasFile(fid uint64) bool {
	if wb.blocks.Load() == 0 {
		return false
	}
	wb.mu.RLock()
	defer wb.mu.RUnlock()
	return wb.files[fid] != nil
}

// holds says whether block b of file fid has a W key.
func (wb *writeback) holds(fid, b uint64) bool {
	if wb.blocks.Load() == 0 {
		return false
	}
	wb.mu.RLock()
	defer wb.mu.RUnlock()
	f := wb.files[fid]
	if f == nil {
		return false
	}
	_, ok := f.blocks[b]
	return ok
}

// blocksIn returns the blocks of fid in [fb, lb] that have W keys, nil if
// none: the read path's one question.
func (wb *writeback) blocksIn(fid, fb, lb uint64) map[uint64]bool {
	if wb.blocks.Load() == 0 {
		return nil
	}
	wb.mu.RLock()
	defer wb.mu.RUnlock()
	f := wb.files[fid]
	if f == nil {
		return nil
	}
	var out map[uint64]bool
	if lb-fb+1 < uint64(len(f.blocks)) {
		for b := fb; b <= lb; b++ {
			if _, ok := f.blocks[b]; ok {
				if out == nil {
					out = map[uint64]bool{}
				}
				out[b] = true
			}
		}
		return out
	}
	for b := range f.blocks {
		if b >= fb && b <= lb {
			if out == nil {
				out = map[uint64]bool{}
			}
			out[b] = true
		}
	}
	return out
}

// note applies a committed batch's W changes to the in-memory view.
func (wb *writeback) note(changes []wbChange) {
	var delta int64
	wb.mu.Lock()
	for _, c := range changes {
		f := wb.files[c.fileID]
		switch c.kind {
		case wbSet:
			if f == nil {
				f = &wbFile{shard: c.shard, blocks: map[uint64]uint64{}}
				wb.files[c.fileID] = f
			}
			if _, ok := f.blocks[c.block]; !ok {
				delta++
			}
			wb.gen++
			f.blocks[c.block] = wb.gen
		case wbDel:
			if f != nil {
				if _, ok := f.blocks[c.block]; ok {
					delete(f.blocks, c.block)
					delta--
				}
			}
		case wbCut:
			if f != nil {
				for b := range f.blocks {
					if b >= c.block {
						delete(f.blocks, b)
						delta--
					}
				}
			}
		case wbDrop:
			if f != nil {
				delta -= int64(len(f.blocks))
				clear(f.blocks)
			}
		}
		if f != nil && len(f.blocks) == 0 {
			delete(wb.files, c.fileID)
		}
	}
	wb.mu.Unlock()
	wb.account(delta)
}

// account adds delta blocks to the area's use and tells waiting writers
// when it shrank.
func (wb *writeback) account(delta int64) {
	wb.blocks.Add(delta)
	wb.pace.backlog.Add(delta * blockSize)
	if delta < 0 {
		wb.pace.synced(0, 0, 0)
	}
}

// kickDestage asks the destager to run now.
func (wb *writeback) kickDestage() {
	select {
	case wb.kick <- struct{}{}:
	default:
	}
}

// mayWriteBack says whether t may put blocks into the area: it writes
// less than a direct write's minimum somewhere, or not at block boundaries.
func mayWriteBack(t *Txn) bool {
	for i := range t.ops {
		o := &t.ops[i]
		if o.typ == opWrite && (len(o.data) < directMinBytes || o.off%blockSize != 0 || len(o.data)%blockSize != 0) {
			return true
		}
	}
	return false
}

// Writeback returns the state of the store's write-back area.
func (s *Store) Writeback() WritebackStats {
	wb := s.wb
	st := WritebackStats{On: wb.on.Load(), AreaBytes: wb.area, DirtyBytes: wb.dirty(), Destaged: wb.destaged.Load(), Written: wb.written.Load(),
		Bypassed: wb.seq.bypassed.Load(), PacedWrites: wb.pace.paced.Load()}
	wb.mu.RLock()
	st.Files = len(wb.files)
	wb.mu.RUnlock()
	wb.pace.mu.Lock()
	st.DestageRate = wb.pace.rate
	wb.pace.mu.Unlock()
	return st
}

// ErrNoWritebackArea is SetWriteback(true) on a store opened without an
// area (Options.WritebackBytes 0).
var ErrNoWritebackArea = errors.New("objstore: the store has no write-back area (WritebackBytes is 0)")

// SetWriteback turns the area on or off. Off, no new write goes into it,
// and the destager moves what it holds to the data disk as fast as it can
// (like bcache's detach; Writeback().DirtyBytes says when it is empty); on
// resumes. It does not persist: Open starts with the area on if
// WritebackBytes is set, and drains an area it finds while it is 0.
func (s *Store) SetWriteback(on bool) error {
	if on && s.wb.area <= 0 {
		return ErrNoWritebackArea
	}
	s.wb.on.Store(on)
	s.wb.kickDestage()
	return nil
}

// waitDrained waits until the area is empty or d passed; for tests.
func (s *Store) waitDrained(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.wb.blocks.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		s.wb.kickDestage()
		time.Sleep(time.Millisecond)
	}
	return true
}

// sortedBlocks returns f's blocks in order. Called with wb.mu held.
func (f *wbFile) sortedBlocks() []uint64 {
	out := make([]uint64, 0, len(f.blocks))
	for b := range f.blocks {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// loadWriteback rebuilds the in-memory view of the area from the index's
// W keys (Open). Their owners' lock shards are filled in by countObjects
// (ownedBy); dropOrphanWB then deletes the keys of files no object owns.
func (s *Store) loadWriteback() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagWriteback}, UpperBound: []byte{tagWriteback + 1}})
	if err != nil {
		return err
	}
	var changes []wbChange
	for it.First(); it.Valid(); it.Next() {
		fid, b, err := decodeWBKey(it.Key())
		if err == nil && len(it.Value()) != blockSize {
			err = fmt.Errorf("write-back block %d of file %016x holds %d bytes", b, fid, len(it.Value()))
		}
		if err != nil {
			it.Close()
			return &CorruptionError{Detail: err.Error()}
		}
		changes = append(changes, wbChange{kind: wbSet, fileID: fid, block: b, shard: -1})
	}
	if err := it.Close(); err != nil {
		return err
	}
	s.wb.note(changes)
	s.wbLoaded = len(changes)
	return nil
}

// ownedBy records that the object whose record key is key owns data file
// fid, if fid has W keys (Open's countObjects).
func (wb *writeback) ownedBy(fid uint64, key []byte) {
	f := wb.files[fid]
	if f == nil || len(key) < 1 {
		return
	}
	coll, rest, ok := unesc(key[1:])
	if !ok {
		return
	}
	name, _, ok := unesc(rest)
	if ok {
		f.shard = shardOf(coll, name)
	}
}

// dropOrphanWB deletes the W keys of files no object owns. A committed
// batch never leaves such keys (it drops a file's keys with the file);
// this keeps a damaged index from sending the destager into a file that
// is gone.
func (s *Store) dropOrphanWB() error {
	var drop []wbChange
	b := s.db.NewBatch()
	defer b.Close()
	for fid, f := range s.wb.files {
		if f.shard < 0 {
			b.DeleteRange(wbKey(fid, 0), wbKey(fid+1, 0), nil)
			drop = append(drop, wbChange{kind: wbDrop, fileID: fid})
		}
	}
	if len(drop) == 0 {
		return nil
	}
	if err := s.commit(b); err != nil {
		return err
	}
	s.wb.note(drop)
	return nil
}
