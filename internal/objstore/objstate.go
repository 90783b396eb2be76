package objstore

// The working copy of one object while a transaction is applied, and
// what each op does to it: data and size change in the working copy until
// finalize (finalize.go) lays them out; xattr, omap and key deletions go
// into the transaction's batch at once.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

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
	// While it holds, the data is as committed, and finalize keeps its
	// committed checksums (recomputed, they would vouch for bytes never
	// checked: a rename or create of a damaged object).
	inlineUnverified bool
	// keysSet: this txn set xattr or omap keys of the object, which the
	// committed state clearRange scans does not show yet.
	keysSet bool
	// recChanged: the txn created the object or changed its data or size,
	// so its record is rewritten. Xattr and omap changes leave the record
	// (and mtime, as in POSIX) alone: on every client write the OSD sets a
	// version xattr, and rewriting the record for it cost a memtable insert.
	recChanged bool
	// shrunk: a truncate of this txn cut the object's data, or a put
	// replaced it, so the flash read cache drops its whole file, not only
	// the dirty blocks.
	shrunk bool
}

// reserve sizes the dirty block maps of an object with none yet for n
// blocks: grown one insert at a time, the maps of a 4 MiB write would be
// rehashed eight times on every write. Such maps
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
// pages, which the kernel had to zero for every write.
var blockMaps sync.Pool // of *blockMapPair

type blockMapPair struct {
	dirty map[uint64][]byte
	sums  map[uint64]uint32
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

// do runs op o on st, the working copy of its object: the index changes go
// into the batch, data into the record or, for a file, into the blocks
// finalize lays out. An op that removes something from an object that does
// not exist does nothing; any other creates the object first.
func (a *applyCtx) do(st *objState, o *op) error {
	switch o.typ {
	case opDelete:
		a.delete(st)
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
		// Keys only: the record, and its mtime, stay as they were.
		a.keyOp(st, o)
		return nil
	}
	st.recChanged = true
	switch o.typ {
	case opPut:
		st.shrunk = true
		return a.put(st, o)
	case opWrite:
		return a.write(st, o)
	case opTruncate:
		return a.truncate(st, o.off)
	}
	return nil // opCreate: ensure did it
}

// delete removes st's object: its data, xattrs, omap and record.
func (a *applyCtx) delete(st *objState) {
	if !st.exists {
		return
	}
	a.dropData(st)
	id := st.rec.id
	a.clearRange(idKey(tagXattr, id, nil), idKey(tagXattr, id+1, nil), st.keysSet)
	a.clearRange(idKey(tagOmap, id, nil), idKey(tagOmap, id+1, nil), st.keysSet)
	a.batch.Delete(st.key, nil)
	st.exists = false
	st.rec = objRec{}
}

// rename gives from's object the name to (Txn.Rename): to's record takes
// from's, and with its object ID and file ID the xattrs, omap, checksums
// and data follow, so nothing but the two records is written. What to held
// goes first, as a delete. Txn.Validate put the rename before any other
// op on either object, so both working copies are as committed.
func (a *applyCtx) rename(from *objState, to string) error {
	if !from.exists {
		return notFound(from.coll, from.name)
	}
	dst, err := a.state(from.coll, to)
	if err != nil {
		return err
	}
	a.delete(dst)
	dst.exists, dst.recChanged, dst.rec = true, true, from.rec
	dst.inlineUnverified = from.inlineUnverified
	dst.chunks, dst.dirty, dst.sums, dst.newFile, dst.hasCut = nil, nil, nil, false, false
	if !dst.rec.inline {
		dst.chunks, dst.dirty, dst.sums = map[uint64]*chunk{}, map[uint64][]byte{}, map[uint64]uint32{}
	}
	a.batch.Delete(from.key, nil)
	from.exists, from.rec = false, objRec{}
	from.chunks, from.dirty, from.sums = nil, nil, nil
	return nil
}

// keyOp runs an xattr or omap op of st's existing object.
func (a *applyCtx) keyOp(st *objState, o *op) {
	id := st.rec.id
	switch o.typ {
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
	}
}

// put replaces st's data with o's: inline up to InlineMax, else in a file.
func (a *applyCtx) put(st *objState, o *op) error {
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
}

// write writes o's data at its offset: into an inline object while it
// stays within InlineMax (its blocks checked first, since they are kept),
// else into its file, moving an inline object to one.
func (a *applyCtx) write(st *objState, o *op) error {
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
	if size < st.rec.size {
		st.shrunk = true
	}
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
		if err := a.cutFile(st, size); err != nil {
			return err
		}
	}
	st.rec.size = size
	return nil
}

// cutFile shrinks a file-backed object to size bytes (still above
// InlineMax): blocks past the end leave the write-back area, the dirty
// set and the checksum chunks, the last block is zeroed past the end, and
// the chunks cut off are deleted at finalize (st.cut).
func (a *applyCtx) cutFile(st *objState, size uint64) error {
	first := nblocks(size) // first block wholly past the new end
	if fid := st.rec.fileID; !st.newFile && a.s.wb.hasFile(fid) {
		a.batch.DeleteRange(wbKey(fid, first), wbKey(fid+1, 0), nil)
		a.wb = append(a.wb, wbChange{kind: wbCut, fileID: fid, block: first})
	}
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
	return nil
}

// dropData forgets the object's content (keeping identity, xattrs and omap).
func (a *applyCtx) dropData(st *objState) {
	if !st.rec.inline && !st.newFile {
		if fid := st.rec.fileID; a.s.wb.hasFile(fid) {
			a.batch.DeleteRange(wbKey(fid, 0), wbKey(fid+1, 0), nil)
			a.wb = append(a.wb, wbChange{kind: wbDrop, fileID: fid})
		}
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
	if a.s.wb.holds(st.rec.fileID, b) {
		if ok, err := a.s.readWB(st.coll, st.name, st.rec.fileID, b, blk, ch.crc[b%chunkBlocks]); ok || err != nil {
			return blk, err
		}
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

// pointDeleteMax is how many keys clearRange deletes one by one before it
// writes a range tombstone instead.
const pointDeleteMax = 256

// clearRange deletes every key in [lo, hi). Few keys (the common case: an
// object without xattrs, a small omap) are deleted one by one:
// a range tombstone is cheap to write, but every one of them slows each later
// read until compaction drops it, and deleting thousands of objects piled
// them up until deletes crawled. Many keys, or keys this txn set itself
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
