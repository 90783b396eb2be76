package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// objState is the working copy of one object while a Txn is applied.
type objState struct {
	coll, name string
	key        []byte

	exists      bool
	startExists bool
	startSize   uint64
	startFileID uint64 // the data file the object had, 0 if none
	rec         objRec
	// File-backed working state (rec.inline == false).
	newFile bool // rec.fileID was allocated by this txn; no committed data
	chunks  map[uint64]*chunk
	dirty   map[uint64][]byte // block -> full 4 KiB content
	// sums holds the checksums of dirty blocks a single write filled
	// whole, taken right after the copy while the block is in the CPU
	// cache: summing 4 MiB later, from memory, cost twice as much. Any
	// other change to a dirty block drops its entry.
	sums   map[uint64]uint32
	pooled *blockMapPair // maps from blockMaps, to go back (reserve)
	cut    uint64        // chunks >= cut were deleted by a truncate (if hasCut)
	hasCut bool
	// inlineUnverified: the committed inline data has not been checked yet.
	// It is checked only before being merged with new bytes, so a Put or
	// Delete can still replace a corrupt object (repair from a replica).
	inlineUnverified bool
	// keysSet: this txn set xattr or omap keys of the object, which the
	// committed state clearRange scans does not show yet.
	keysSet bool
	// recChanged: the txn created the object or changed its data or size,
	// so its record is rewritten. Xattr and omap changes leave the record
	// (and mtime, as in POSIX) alone: on every client write the OSD sets a
	// version xattr, and rewriting the record for it cost a memtable insert.
	recChanged bool
}

// reserve sizes the dirty block maps of an object with none yet for n
// blocks: grown one insert at a time, the maps of a 4 MiB write were
// rehashed eight times, 5% of an OSD's CPU under 4 MiB writes. Such maps
// are taken from blockMaps, and go back there when Apply returns.
func (st *objState) reserve(n int) {
	if len(st.dirty) != 0 || n <= 8 {
		return
	}
	if st.pooled == nil {
		st.pooled, _ = blockMaps.Get().(*blockMapPair)
		if st.pooled == nil {
			st.pooled = &blockMapPair{dirty: make(map[uint64][]byte, n), sums: make(map[uint64]uint32, n)}
		}
	}
	clear(st.pooled.dirty) // a truncate or put since may have left entries
	clear(st.pooled.sums)
	st.dirty, st.sums = st.pooled.dirty, st.pooled.sums
}

// blockMaps recycles the dirty-block maps of large writes. A map for the
// 1,024 blocks of a 4 MiB write, made afresh for each, came from fresh
// pages: the kernel zeroing them was 1.7% of an OSD's CPU under 4 MiB
// writes.
var blockMaps sync.Pool // of *blockMapPair

type blockMapPair struct {
	dirty map[uint64][]byte
	sums  map[uint64]uint32
}

// recycleMaps empties the pooled maps of a's objects and hands them back.
// Called when Apply returns: nothing of a's outlives it but the block
// slices the maps held.
func (a *applyCtx) recycleMaps() {
	for _, st := range a.objs {
		if p := st.pooled; p != nil {
			clear(p.dirty)
			clear(p.sums)
			st.pooled, st.dirty, st.sums = nil, nil, nil
			blockMaps.Put(p)
		}
	}
}

func (st *objState) verifyInline() error {
	if !st.inlineUnverified {
		return nil
	}
	for b := range st.rec.crcs {
		if inlineBlockCRC(st.rec.data, uint64(b)) != st.rec.crcs[b] {
			return &CorruptionError{Coll: st.coll, Name: st.name, Offset: uint64(b) * blockSize, Detail: "inline block checksum mismatch"}
		}
	}
	st.inlineUnverified = false
	return nil
}

type applyCtx struct {
	s        *Store
	batch    *pebble.Batch
	journal  *pebble.Batch // journal records, for the commit log only (or nil)
	objs     map[string]*objState
	order    []*objState
	delFiles []uint64
	now      int64
	// filled by finalize:
	deferred []deferredWrite
	direct   map[uint64]*dataFile // files written before commit
	unsynced map[uint64]bool      // of those, files with buffered writes, to sync
	newFiles []uint64
	punches  []punch  // old slots of copy-on-write overwrites, freed after the commit
	slabs    [][]byte // bufpool buffers of large writes, handed back when Apply returns
	// inPlace: the txn changes object data in one op, so no block is
	// written twice and large aligned data can serve as its own blocks.
	inPlace bool
	pos     commitPos // where the journal records went
}

// dirtyBlocks returns the blocks of dirty in ascending order. A large write
// dirties one run of blocks, which needs no sort: sorting the 1,024 blocks
// of each 4 MiB write was 1.2% of an OSD's CPU under 4 MiB writes.
func dirtyBlocks(dirty map[uint64][]byte) []uint64 {
	blocks := make([]uint64, 0, len(dirty))
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for b := range dirty {
		blocks = append(blocks, b)
		lo, hi = min(lo, b), max(hi, b)
	}
	if len(blocks) > 0 && hi-lo == uint64(len(blocks)-1) {
		for i := range blocks {
			blocks[i] = lo + uint64(i)
		}
		return blocks
	}
	slices.Sort(blocks)
	return blocks
}

// verifySums makes finalize recompute every checksum taken early (sums)
// and panic on a stale one; the package's tests set it.
var verifySums = false

type punch struct {
	fileID, off uint64
	n           int
}

type deferredWrite struct {
	seq, fileID, off uint64
	data             []byte
	written          bool // fresh blocks, in the page cache before the commit
}

// newJournal returns a's batch of journal records, creating it.
func (a *applyCtx) newJournal() *pebble.Batch {
	if a.journal == nil {
		a.journal = a.s.db.NewBatch()
	}
	return a.journal
}

// Apply applies t atomically; when it returns nil the transaction is durable.
// Concurrent Applies share the commit log's group writes, so N concurrent
// small transactions cost far fewer than N device writes.
func (s *Store) Apply(t *Txn) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if err := s.failure(); err != nil {
		return fmt.Errorf("objstore: store failed earlier, restart to replay the journal: %w", err)
	}
	if len(t.ops) == 0 {
		return nil
	}
	s.rc.busy()
	deleteOnly := true
	for i := range t.ops {
		switch t.ops[i].typ {
		case opDelete, opRmXattr, opOmapRm, opOmapRmRange:
		default:
			deleteOnly = false
		}
	}
	if err := s.checkSpace(2*int64(t.bytes)+4096, deleteOnly); err != nil {
		return err
	}
	defer s.lockObjects(t)()

	a := &applyCtx{s: s, batch: s.db.NewBatch(), objs: map[string]*objState{}, now: time.Now().UnixNano(),
		direct: map[uint64]*dataFile{}, unsynced: map[uint64]bool{}}
	defer a.recycleMaps()
	defer a.batch.Close()
	// Before the objects' locks go, whatever the outcome (see readCache).
	// File IDs start at 1: 0 is an object without a file (most of a small
	// write's objects), which has nothing cached.
	defer func() {
		for _, st := range a.order {
			if st.startFileID != 0 {
				s.rc.dropFile(st.startFileID)
			}
			if !st.rec.inline && st.rec.fileID != 0 && st.rec.fileID != st.startFileID {
				s.rc.dropFile(st.rec.fileID)
			}
		}
	}()
	defer func() {
		if a.journal != nil {
			a.journal.Close()
		}
		// Nothing outlives Apply that points into a slab: the batch and
		// the journal hold copies.
		for _, b := range a.slabs {
			bufpool.Put(b)
		}
	}()
	err := a.run(t)
	if err == nil {
		err = a.finalize()
	}
	if err == nil {
		err = a.syncDirect()
	}
	if err == nil {
		s.addToFilter(a.batch) // before the commit: see objFilter
		a.pos, err = s.log.commitJournal(a.batch, a.journal, len(a.deferred))
		if errors.Is(err, errCommitLog) {
			// The batch may be in the log and come back at the next
			// Open: leave everything it refers to in place.
			s.idx.reset()
			s.fail(err)
			return err
		}
		if err != nil {
			s.idx.reset()
			err = fmt.Errorf("objstore: commit: %w", err)
		} else {
			s.idx.committed(a.batch)
		}
	}
	if err != nil {
		a.abort()
		if isNoSpace(err) && !errors.Is(err, ErrNoSpace) {
			err = fmt.Errorf("objstore: osd disk full: %w (%v)", ErrNoSpace, err)
		}
		return err
	}
	a.afterCommit()
	return nil
}

func (a *applyCtx) run(t *Txn) error {
	dataOps := 0
	for i := range t.ops {
		switch t.ops[i].typ {
		case opWrite, opPut, opTruncate:
			dataOps++
		}
	}
	a.inPlace = dataOps == 1
	for i := range t.ops {
		o := &t.ops[i]
		st, err := a.state(o.coll, o.name)
		if err != nil {
			return err
		}
		if err := a.do(st, o); err != nil {
			return err
		}
	}
	return nil
}

func (a *applyCtx) state(coll, name string) (*objState, error) {
	k := objKey(coll, name)
	if st, ok := a.objs[string(k)]; ok {
		return st, nil
	}
	r, ok, err := a.s.loadRec(coll, name)
	if err != nil {
		return nil, err
	}
	st := &objState{coll: coll, name: name, key: k, exists: ok, startExists: ok, startSize: r.size, rec: r, inlineUnverified: ok && r.inline}
	if ok && !r.inline {
		st.startFileID = r.fileID
		st.chunks = map[uint64]*chunk{}
		st.dirty = map[uint64][]byte{}
		st.sums = map[uint64]uint32{}
	}
	a.objs[string(k)] = st
	a.order = append(a.order, st)
	return st, nil
}

// ensure makes the object exist (empty, inline) if it does not.
func (a *applyCtx) ensure(st *objState) error {
	if st.exists {
		return nil
	}
	id, err := a.s.allocID()
	if err != nil {
		return err
	}
	st.exists, st.recChanged = true, true
	st.rec = objRec{id: id, inline: true}
	st.chunks, st.dirty, st.sums, st.newFile, st.hasCut = nil, nil, nil, false, false
	return nil
}

// pointDeleteMax is how many keys clearRange deletes one by one before it
// writes a range tombstone instead.
const pointDeleteMax = 256

// clearRange deletes every key in [lo, hi). Few keys (the common case: an
// object without xattrs, a small omap) are deleted one by one:
// a range tombstone is cheap to write, but every one of them slows each later
// read until compaction drops it, and deleting thousands of objects piled
// them up until deletes ran at 55/s. Many keys, or keys this txn set itself
// (invisible to a scan of committed state), get one range tombstone.
func (a *applyCtx) clearRange(lo, hi []byte, uncommittedKeys bool) {
	if uncommittedKeys {
		a.batch.DeleteRange(lo, hi, nil)
		return
	}
	it, err := a.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		a.batch.DeleteRange(lo, hi, nil)
		return
	}
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		if len(keys) == pointDeleteMax {
			break
		}
		keys = append(keys, bytes.Clone(it.Key()))
	}
	err = it.Close()
	if err != nil || len(keys) == pointDeleteMax {
		a.batch.DeleteRange(lo, hi, nil)
		return
	}
	for _, k := range keys {
		a.batch.Delete(k, nil)
	}
}

// dropData forgets the object's content (keeping identity, xattrs and omap).
func (a *applyCtx) dropData(st *objState) {
	if !st.rec.inline && !st.newFile {
		a.clearRange(csumKey(st.rec.fileID, 0), csumKey(st.rec.fileID+1, 0), false)
		a.batch.Delete(idKey(tagFileRef, st.rec.fileID, nil), nil)
		a.delFiles = append(a.delFiles, st.rec.fileID)
	}
	st.rec.inline, st.rec.fileID, st.rec.size, st.rec.data, st.rec.crcs = true, 0, 0, nil, nil
	st.chunks, st.dirty, st.sums, st.newFile, st.hasCut = nil, nil, nil, false, false
	st.inlineUnverified = false
}

// toFile converts an inline object into one backed by a fresh data file.
func (a *applyCtx) toFile(st *objState) error {
	if err := st.verifyInline(); err != nil {
		return err
	}
	id, err := a.s.allocID()
	if err != nil {
		return err
	}
	data := st.rec.data
	st.rec.inline, st.rec.fileID, st.rec.data, st.rec.crcs = false, id, nil, nil
	st.newFile = true
	st.chunks = map[uint64]*chunk{}
	st.dirty = map[uint64][]byte{}
	st.sums = map[uint64]uint32{}
	st.hasCut = false
	// Only non-zero blocks need storing; the rest stay sparse.
	for b := uint64(0); b*blockSize < uint64(len(data)); b++ {
		blk := make([]byte, blockSize)
		copy(blk, data[b*blockSize:])
		st.dirty[b] = blk
		a.setPresent(st, b, true)
	}
	return nil
}

func (a *applyCtx) do(st *objState, o *op) error {
	switch o.typ {
	case opDelete:
		if !st.exists {
			return nil
		}
		a.dropData(st)
		id := st.rec.id
		a.clearRange(idKey(tagXattr, id, nil), idKey(tagXattr, id+1, nil), st.keysSet)
		a.clearRange(idKey(tagOmap, id, nil), idKey(tagOmap, id+1, nil), st.keysSet)
		a.batch.Delete(st.key, nil)
		st.exists = false
		st.rec = objRec{}
		return nil
	case opRmXattr, opOmapRm, opOmapRmRange:
		if !st.exists {
			return nil // nothing to remove; do not create
		}
	default:
		if err := a.ensure(st); err != nil {
			return err
		}
	}
	switch o.typ {
	case opSetXattr, opRmXattr, opOmapSet, opOmapRm, opOmapRmRange:
	default:
		st.recChanged = true
	}
	id := st.rec.id
	switch o.typ {
	case opCreate:
	case opSetXattr:
		st.keysSet = true
		a.batch.Set(idKey(tagXattr, id, o.key), o.data, nil)
	case opRmXattr:
		a.batch.Delete(idKey(tagXattr, id, o.key), nil)
	case opOmapSet:
		st.keysSet = true
		a.batch.Set(idKey(tagOmap, id, o.key), o.data, nil)
	case opOmapRm:
		a.batch.Delete(idKey(tagOmap, id, o.key), nil)
	case opOmapRmRange:
		hi := idKey(tagOmap, id+1, nil)
		if o.hasEnd {
			hi = idKey(tagOmap, id, o.end)
		}
		lo := idKey(tagOmap, id, o.key)
		if string(lo) < string(hi) {
			a.clearRange(lo, hi, st.keysSet)
		}
	case opPut:
		a.dropData(st)
		if len(o.data) <= InlineMax {
			st.rec.data = append([]byte{}, o.data...)
			st.rec.size = uint64(len(o.data))
			return nil
		}
		if err := a.toFile(st); err != nil {
			return err
		}
		return a.writeFile(st, 0, o.data, o.sums)
	case opWrite:
		end := o.off + uint64(len(o.data))
		if st.rec.inline {
			if err := st.verifyInline(); err != nil {
				return err
			}
			if end <= InlineMax {
				if end > st.rec.size {
					st.rec.data = append(st.rec.data, make([]byte, end-st.rec.size)...)
					st.rec.size = end
				}
				copy(st.rec.data[o.off:], o.data)
				return nil
			}
			if err := a.toFile(st); err != nil {
				return err
			}
		}
		return a.writeFile(st, o.off, o.data, o.sums)
	case opTruncate:
		return a.truncate(st, o.off)
	}
	return nil
}

func (a *applyCtx) chunk(st *objState, c uint64) (*chunk, error) {
	if ch, ok := st.chunks[c]; ok {
		return ch, nil
	}
	var ch *chunk
	switch {
	case st.newFile:
		ch = &chunk{}
	case st.hasCut && c >= st.cut:
		ch = &chunk{origUnknown: true}
	default:
		v, err := a.s.getIndexed(csumKey(st.rec.fileID, c))
		if errors.Is(err, pebble.ErrNotFound) {
			ch = &chunk{}
		} else if err != nil {
			return nil, err
		} else if ch, err = decodeChunk(v); err != nil {
			return nil, &CorruptionError{Coll: st.coll, Name: st.name, Offset: c * chunkBlocks * blockSize, Detail: err.Error()}
		}
	}
	st.chunks[c] = ch
	return ch, nil
}

func (a *applyCtx) setPresent(st *objState, b uint64, on bool) error {
	ch, err := a.chunk(st, b/chunkBlocks)
	if err != nil {
		return err
	}
	if on {
		ch.bits |= 1 << (b % chunkBlocks)
	} else {
		ch.bits &^= 1 << (b % chunkBlocks)
	}
	ch.dirty = true
	return nil
}

// block returns the current content of block b for modification, verifying
// committed data before it is merged with new bytes.
func (a *applyCtx) block(st *objState, b uint64) ([]byte, error) {
	if d, ok := st.dirty[b]; ok {
		return d, nil
	}
	blk := make([]byte, blockSize)
	ch, err := a.chunk(st, b/chunkBlocks)
	if err != nil {
		return nil, err
	}
	if !ch.present(b % chunkBlocks) {
		return blk, nil
	}
	df, err := a.s.openFile(st.rec.fileID)
	if err != nil {
		return nil, err
	}
	n, err := df.f.ReadAt(blk, int64(a.s.phys(b, ch.inB(b%chunkBlocks))))
	a.s.releaseFile(df)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("objstore: read %q/%q: %w", st.coll, st.name, err)
	}
	clear(blk[n:])
	if blockCRC(blk) != ch.crc[b%chunkBlocks] {
		return nil, &CorruptionError{Coll: st.coll, Name: st.name, Offset: b * blockSize, Detail: "data block checksum mismatch"}
	}
	return blk, nil
}

// writeFile writes data at off; sums, if not nil, are the crc32c of data's
// whole blocks (see Txn.WriteSummed).
func (a *applyCtx) writeFile(st *objState, off uint64, data []byte, sums []uint32) error {
	end := off + uint64(len(data))
	if len(data) > 0 {
		fb, lb := off/blockSize, (end-1)/blockSize
		st.reserve(int(lb - fb + 1))
		// Fully covered blocks share one allocation. If the txn writes
		// data in this op alone, nothing else in the txn writes these
		// blocks and they are only read, so they are the caller's data as
		// it lies: direct writes take large data that way if it is aligned
		// (proto and the txn encoding align large payloads), and a small
		// overwrite is journaled from it without a copy of its own.
		var slab []byte
		fullLo, fullHi := (off+blockSize-1)/blockSize*blockSize, end/blockSize*blockSize
		var own []byte
		if a.inPlace && fullHi > fullLo && (fullHi < fullLo+directMinBytes || aligned(data[fullLo-off:])) {
			// Unaligned small runs cost a direct write the same copy
			// into an aligned buffer as a slab of their own would.
			own = data[fullLo-off : fullHi-off]
		}
		for b := fb; b <= lb; b++ {
			bs := b * blockSize
			lo, hi := max(off, bs)-bs, min(end, bs+blockSize)-bs
			var blk []byte
			if lo == 0 && hi == blockSize {
				if d, ok := st.dirty[b]; ok {
					blk = d
				} else if own != nil {
					blk = own[bs-fullLo:][:blockSize]
					a.s.inPlace.Add(1)
					if sums != nil && off%blockSize == 0 {
						// Taken as the data arrived, in the CPU cache:
						// reading it again here ran from memory.
						st.sums[b] = sums[(bs-off)/blockSize]
						a.s.presummed.Add(1)
					} else {
						st.sums[b] = blockCRC(blk)
					}
					st.dirty[b] = blk
					if err := a.setPresent(st, b, true); err != nil {
						return err
					}
					continue
				} else {
					if len(slab) == 0 {
						// Aligned when large: a direct write then needs no copy.
						if n := (lb - b + 1) * blockSize; n >= directMinBytes {
							slab = bufpool.Get(int(n))
							a.slabs = append(a.slabs, slab)
						} else {
							slab = make([]byte, n)
						}
					}
					// Keep the capacity so finalize can see that
					// neighbouring blocks are contiguous and skip a copy.
					blk, slab = slab[:blockSize], slab[blockSize:]
				}
			} else {
				var err error
				if blk, err = a.block(st, b); err != nil {
					return err
				}
			}
			copy(blk[lo:hi], data[bs+lo-off:bs+hi-off])
			if lo == 0 && hi == blockSize {
				st.sums[b] = blockCRC(blk)
			} else {
				delete(st.sums, b)
			}
			st.dirty[b] = blk
			if err := a.setPresent(st, b, true); err != nil {
				return err
			}
		}
	}
	st.rec.size = max(st.rec.size, end)
	return nil
}

func (a *applyCtx) truncate(st *objState, size uint64) error {
	if st.rec.inline {
		if err := st.verifyInline(); err != nil {
			return err
		}
		if size <= InlineMax {
			if size < st.rec.size {
				st.rec.data = st.rec.data[:size]
			} else {
				st.rec.data = append(st.rec.data, make([]byte, size-st.rec.size)...)
			}
			st.rec.size = size
			return nil
		}
		if err := a.toFile(st); err != nil {
			return err
		}
	}
	if size <= InlineMax {
		// Small again: move the remaining bytes inline and free the file.
		keep := min(size, st.rec.size)
		data := make([]byte, size)
		for b := uint64(0); b*blockSize < keep; b++ {
			blk, err := a.block(st, b)
			if err != nil {
				return err
			}
			copy(data[b*blockSize:keep], blk)
		}
		a.dropData(st)
		st.rec.data, st.rec.size = data, size
		return nil
	}
	if size < st.rec.size {
		first := nblocks(size) // first block wholly past the new end
		if size%blockSize != 0 {
			b := size / blockSize
			blk, err := a.block(st, b)
			if err != nil {
				return err
			}
			ch, err := a.chunk(st, b/chunkBlocks)
			if err != nil {
				return err
			}
			if ch.present(b % chunkBlocks) {
				clear(blk[size%blockSize:])
				st.dirty[b] = blk
				delete(st.sums, b)
			}
		}
		for b := range st.dirty {
			if b >= first {
				delete(st.dirty, b)
				delete(st.sums, b)
			}
		}
		c0 := first / chunkBlocks
		if first%chunkBlocks != 0 {
			ch, err := a.chunk(st, c0)
			if err != nil {
				return err
			}
			ch.bits &= (1 << (first % chunkBlocks)) - 1
			ch.dirty = true
			c0++
		}
		for c := range st.chunks {
			if c >= c0 {
				delete(st.chunks, c)
			}
		}
		if !st.newFile && (!st.hasCut || c0 < st.cut) {
			st.cut, st.hasCut = c0, true
		}
	}
	st.rec.size = size
	return nil
}

// finalize turns the working objects into batch entries, writes fresh
// extents straight to their files and queues the rest as journal records.
func (a *applyCtx) finalize() error {
	s := a.s
	for _, st := range a.order {
		if !st.exists || !st.recChanged {
			continue
		}
		st.rec.mtime = a.now
		if st.rec.inline {
			nb := nblocks(st.rec.size)
			st.rec.crcs = make([]uint32, nb)
			for b := uint64(0); b < nb; b++ {
				st.rec.crcs[b] = inlineBlockCRC(st.rec.data, b)
			}
			a.batch.Set(st.key, st.rec.encode(), nil)
			continue
		}
		fid := st.rec.fileID
		if st.newFile {
			df, err := s.openFile(fid)
			if err != nil {
				return err
			}
			a.newFiles = append(a.newFiles, fid)
			a.direct[fid] = df
			a.unsynced[fid] = true
			a.batch.Set(idKey(tagFileRef, fid, nil), idKey(0, st.rec.id, nil)[1:], nil)
		}
		if st.hasCut {
			// Checksum chunks of this txn are set below, after these deletes.
			a.clearRange(csumKey(fid, st.cut), csumKey(fid+1, 0), st.newFile)
		}
		blocks := dirtyBlocks(st.dirty)
		s.ckMu.Lock()
		journaled := s.pending[fid] > 0
		s.ckMu.Unlock()
		for i := 0; i < len(blocks); {
			j := i + 1
			for j < len(blocks) && blocks[j] == blocks[j-1]+1 {
				j++
			}
			ext := blocks[i:j]
			i = j
			// What the extent's blocks hold in the committed state: nothing
			// (fresh), or live copies all in one slot (inB)?
			fresh, known, oneSlot, seen, inB := true, true, true, false, false
			for _, b := range ext {
				ch, bit := st.chunks[b/chunkBlocks], uint64(1)<<(b%chunkBlocks)
				if ch.origUnknown {
					fresh, known = false, false
					break
				}
				if ch.orig&bit == 0 {
					continue
				}
				fresh = false
				bB := ch.origSlotB&bit != 0
				oneSlot = oneSlot && (!seen || bB == inB)
				inB, seen = bB, true
			}
			contiguous := true
			for k, b := range ext {
				blk := st.dirty[b]
				ch := st.chunks[b/chunkBlocks]
				sum, ok := st.sums[b]
				if !ok {
					sum = blockCRC(blk)
				} else if verifySums && sum != blockCRC(blk) {
					panic(fmt.Sprintf("objstore: early checksum of block %d of %q/%q is stale", b, st.coll, st.name))
				}
				ch.crc[b%chunkBlocks] = sum
				ch.dirty = true
				if k > 0 {
					prev := st.dirty[ext[k-1]]
					contiguous = contiguous && cap(prev) > blockSize && &prev[:blockSize+1][blockSize] == &blk[0]
				}
			}
			var buf []byte
			if first := st.dirty[ext[0]]; contiguous && cap(first) >= len(ext)*blockSize {
				buf = first[:len(ext)*blockSize]
			} else {
				buf = make([]byte, 0, len(ext)*blockSize)
				for _, b := range ext {
					buf = append(buf, st.dirty[b]...)
				}
			}
			big := len(buf) >= directMinBytes
			switch {
			case st.newFile || (fresh && !journaled && big):
				// Into blocks no committed state uses: straight to slot A.
				setSlots(st, ext, false)
				if err := a.writeDirect(fid, s.phys(ext[0], false), buf, !st.newFile); err != nil {
					return err
				}
			case known && oneSlot && !journaled && big && (ext[len(ext)-1]+1)*blockSize <= s.slotBase:
				// Copy-on-write: the other slot is not live, so write it,
				// let the commit flip the blocks to it, then free the old.
				setSlots(st, ext, !inB)
				if err := a.writeDirect(fid, s.phys(ext[0], !inB), buf, true); err != nil {
					return err
				}
				a.punches = append(a.punches, punch{fileID: fid, off: s.phys(ext[0], inB), n: len(buf)})
				s.cowWrites.Add(1)
			default:
				// Deferred: each block is rewritten where it lives (fresh
				// ones in slot A), by one journal record per same-slot run.
				for k := 0; k < len(ext); {
					slot := liveInB(st, ext[k])
					m := k + 1
					for m < len(ext) && liveInB(st, ext[m]) == slot {
						m++
					}
					part, off := buf[k*blockSize:m*blockSize], s.phys(ext[k], slot)
					setSlots(st, ext[k:m], slot)
					k = m
					if fresh {
						// No committed state uses fresh blocks and no read
						// touches them, so they go to the page cache now,
						// where the filesystem reserves their space: a full
						// disk fails the transaction before its commit.
						if err := a.writeFresh(fid, off, part); err != nil {
							return err
						}
					}
					// Encoded straight into the batch: the record is the
					// largest thing an overwrite allocates.
					seq := s.jseq.Add(1)
					key := journalKey(seq)
					jo := a.newJournal().SetDeferred(len(key), jrecHeader+len(part))
					copy(jo.Key, key)
					(&jrec{fileID: fid, off: off, data: part}).encodeTo(jo.Value)
					if err := jo.Finish(); err != nil {
						return err
					}
					// part stays as it is until Apply returns (slabs go
					// back to the pool only then).
					a.deferred = append(a.deferred, deferredWrite{seq: seq, fileID: fid, off: off, data: part, written: fresh})
				}
			}
		}
		for c, ch := range st.chunks {
			if !ch.dirty {
				continue
			}
			if ch.bits == 0 {
				a.batch.Delete(csumKey(fid, c), nil)
			} else {
				a.batch.Set(csumKey(fid, c), ch.encode(), nil)
			}
		}
		a.batch.Set(st.key, st.rec.encode(), nil)
	}
	return nil
}

// liveInB reports whether block b's committed copy lives in slot B (blocks
// without one, and blocks of chunks cut by this txn, are written to slot A).
func liveInB(st *objState, b uint64) bool {
	ch, bit := st.chunks[b/chunkBlocks], uint64(1)<<(b%chunkBlocks)
	return ch.orig&ch.origSlotB&bit != 0
}

// setSlots records where the new content of blocks ext lives.
func setSlots(st *objState, ext []uint64, inB bool) {
	for _, b := range ext {
		ch, bit := st.chunks[b/chunkBlocks], uint64(1)<<(b%chunkBlocks)
		if inB {
			ch.slotB |= bit
		} else {
			ch.slotB &^= bit
		}
		ch.dirty = true
	}
}

// writeDirect writes whole blocks at file offset off before the commit.
// With dsync the write itself is made durable (see writeUncached); new files
// are synced as a whole instead, which also makes their inode durable.
func (a *applyCtx) writeDirect(fid, off uint64, buf []byte, dsync bool) error {
	df := a.direct[fid]
	if df == nil {
		var err error
		if df, err = a.s.openFile(fid); err != nil {
			return err
		}
		a.direct[fid] = df
	}
	// Allocate the extent first: ENOSPC then fails the write before any
	// byte lands, and ext4 has less to do under the fdatasync.
	if err := df.f.Preallocate(int64(off), int64(len(buf))); err != nil && isNoSpace(err) {
		return fmt.Errorf("objstore: osd disk full allocating %d bytes: %w", len(buf), ErrNoSpace)
	}
	ok, durable, err := a.s.writeUncached(df, fid, off, buf, dsync)
	if !durable {
		a.unsynced[fid] = true
	}
	if ok || err != nil {
		return err
	}
	if _, err := df.f.WriteAt(buf, int64(off)); err != nil {
		return fmt.Errorf("objstore: write data file %016x: %w", fid, err)
	}
	return nil
}

// writeFresh writes a deferred write's fresh blocks to the page cache before
// the commit (see the deferred case of finalize).
func (a *applyCtx) writeFresh(fid, off uint64, data []byte) error {
	df, err := a.s.openFile(fid)
	if err != nil {
		return err
	}
	defer a.s.releaseFile(df)
	if _, err := df.f.WriteAt(data, int64(off)); err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("objstore: osd disk full writing %d bytes: %w", len(data), ErrNoSpace)
		}
		return fmt.Errorf("objstore: write data file %016x: %w", fid, err)
	}
	return nil
}

// syncDirect makes direct writes and new files durable before the commit
// that references them.
func (a *applyCtx) syncDirect() error {
	for fid, df := range a.direct {
		if !a.unsynced[fid] {
			continue // written with RWF_DSYNC: durable with the metadata that finds it
		}
		if err := df.f.SyncData(); err != nil {
			return fmt.Errorf("objstore: sync data file %016x: %w", fid, err)
		}
	}
	dirs := map[string]bool{}
	for _, fid := range a.newFiles {
		dirs[a.s.fanDir(fid)] = true
	}
	for d := range dirs {
		if err := a.s.syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// abort undoes side effects of a transaction that did not commit.
func (a *applyCtx) abort() {
	for _, df := range a.direct {
		a.s.releaseFile(df)
	}
	for _, fid := range a.newFiles {
		a.s.dropFile(fid)
	}
}

func (a *applyCtx) afterCommit() {
	s := a.s
	for _, p := range a.punches {
		punchHole(a.direct[p.fileID].f, p.off, p.n)
	}
	for _, df := range a.direct {
		s.releaseFile(df)
	}
	// Deferred writes land in the page cache while the object locks are
	// still held, so readers never see the old bytes.
	var done []appliedJ
	var nbytes int64
	for _, w := range a.deferred {
		var err error
		if !w.written {
			var df *dataFile
			if df, err = s.openFile(w.fileID); err == nil {
				_, err = df.f.WriteAt(w.data, int64(w.off))
				s.releaseFile(df)
			}
		}
		if err != nil {
			// The record stays in the journal and is replayed on restart.
			s.fail(fmt.Errorf("objstore: deferred write to file %016x: %w", w.fileID, err))
			continue
		}
		done = append(done, appliedJ{seq: w.seq, fileID: w.fileID, n: len(w.data), pos: a.pos})
		nbytes += int64(len(w.data))
	}
	if len(a.deferred) > 0 {
		s.ckMu.Lock()
		for _, w := range a.deferred {
			s.pending[w.fileID]++
		}
		s.applied = append(s.applied, done...)
		s.ckBytes += nbytes
		// A writer waiting for the log to release records (the ones
		// just added, perhaps) needs a checkpoint now, whatever the
		// bytes: it asked for one before these were here.
		kick := s.ckBytes > journalKickBytes || s.log.waitingHeld.Load() > 0
		s.ckMu.Unlock()
		if kick {
			select {
			case s.ckKick <- struct{}{}:
			default:
			}
		}
	}
	for _, fid := range a.delFiles {
		s.dropFile(fid)
	}
	for _, st := range a.order {
		var d int64
		if st.exists {
			d += int64(st.rec.size)
		}
		if st.startExists {
			d -= int64(st.startSize)
		}
		s.dataBytes.Add(d)
		if st.exists && !st.startExists {
			s.objects.Add(1)
		} else if !st.exists && st.startExists {
			s.objects.Add(-1)
		}
	}
}

func (s *Store) checkpointer() {
	defer close(s.ckDone)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
		case <-s.ckKick:
		}
		done, err := s.syncJournal()
		if err != nil {
			s.fail(err)
			continue
		}
		if len(done) > 0 {
			// Not on this goroutine: the commit may queue behind a writer
			// that waits for the next checkpoint to release its segment.
			s.ckDrops.Add(1)
			go func() {
				defer s.ckDrops.Done()
				if err := s.dropJournal(done); err != nil {
					s.fail(err)
				}
			}()
		}
	}
}

// syncFiles makes the applied deferred writes of batch durable in their
// data files: one filesystem sync when they touch many files (syncfs.go),
// else a fdatasync of each.
func (s *Store) syncFiles(batch []appliedJ) error {
	files := map[uint64]bool{}
	for _, j := range batch {
		files[j.fileID] = true
	}
	if s.fsSync != nil && len(files) >= syncfsMinFiles {
		s.fsSyncs.Add(1)
		return s.fsSync.sync()
	}
	for id := range files {
		s.filesMu.Lock()
		df, ok := s.files[id]
		if ok {
			df.refs++
		}
		s.filesMu.Unlock()
		if !ok {
			// Either dropped (object deleted or replaced) or its handle was
			// evicted; fsync through a new handle flushes the same pages.
			live, err := s.has(idKey(tagFileRef, id, nil))
			if err != nil {
				return err
			}
			if !live {
				continue
			}
			if df, err = s.openFile(id); err != nil {
				return err
			}
		}
		err := df.f.SyncData()
		s.releaseFile(df)
		if err != nil {
			return fmt.Errorf("objstore: checkpoint sync of file %016x: %w", id, err)
		}
	}
	return nil
}

// checkpoint makes applied deferred writes durable in their data files and
// then drops their journal records.
func (s *Store) checkpoint() error {
	done, err := s.syncJournal()
	if err != nil || len(done) == 0 {
		return err
	}
	return s.dropJournal(done)
}

// syncJournal makes the applied deferred writes durable in their data files
// and tells the commit log that recovery no longer needs their records. It
// returns them, for dropJournal.
func (s *Store) syncJournal() ([]appliedJ, error) {
	s.ckRunMu.Lock()
	defer s.ckRunMu.Unlock()
	s.ckMu.Lock()
	batch := s.applied
	s.applied = nil
	s.ckBytes = 0
	s.ckMu.Unlock()
	if len(batch) == 0 {
		return nil, nil
	}
	if err := s.syncFiles(batch); err != nil {
		return nil, err
	}
	held := map[commitPos]int{}
	for _, j := range batch {
		held[j.pos]++
	}
	for p, n := range held {
		s.log.release(p, n)
	}
	return batch, nil
}

// dropJournal deletes the journal records of synced deferred writes: from
// the log's view of the journal, or from the index for records that went
// there. Until then the records' files take no direct writes (see
// hasPending), since a replay of the records would overwrite them.
func (s *Store) dropJournal(batch []appliedJ) error {
	b := s.db.NewBatch()
	defer b.Close()
	j := s.db.NewBatch()
	defer j.Close()
	for _, r := range batch {
		if r.pos.indexed {
			b.Delete(journalKey(r.seq), nil)
		} else {
			j.Delete(journalKey(r.seq), nil)
		}
	}
	if j.Empty() {
		j = nil
	}
	if _, err := s.log.commitJournal(b, j, 0); err != nil {
		return fmt.Errorf("objstore: checkpoint commit: %w", err)
	}
	s.ckMu.Lock()
	for _, j := range batch {
		if s.pending[j.fileID]--; s.pending[j.fileID] <= 0 {
			delete(s.pending, j.fileID)
		}
	}
	s.ckMu.Unlock()
	return nil
}
