package objstore

// Where a transaction's new blocks go (doc.go, "Why one design fits"):
// straight into fresh blocks, copy-on-write into the other slot, or
// through the journal; and the writes and syncs that must precede the
// commit.

import (
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// finalize turns the working objects into batch entries, writes fresh
// extents straight to their files and queues the rest as journal records.
func (a *applyCtx) finalize() error {
	for _, st := range a.order {
		if !st.exists || !st.recChanged {
			continue
		}
		st.rec.mtime = a.now
		if st.rec.inline && st.inlineUnverified {
			a.batch.Set(st.key, st.rec.encode(), nil) // its data and checksums as committed
			continue
		}
		if st.rec.inline {
			nb := nblocks(st.rec.size)
			st.rec.crcs = make([]uint32, nb)
			for b := uint64(0); b < nb; b++ {
				st.rec.crcs[b] = inlineBlockCRC(st.rec.data, b)
			}
			a.batch.Set(st.key, st.rec.encode(), nil)
			continue
		}
		if err := a.finalizeFile(st); err != nil {
			return err
		}
	}
	return nil
}

// finalizeFile lays out the dirty blocks of an object with a data file,
// one run of consecutive blocks at a time, and sets its checksum chunks
// and record.
func (a *applyCtx) finalizeFile(st *objState) error {
	s := a.s
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
		if err := a.layOut(st, fid, blocks[i:j], journaled); err != nil {
			return err
		}
		i = j
	}
	if invariantsOn {
		checkChunks(st)
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
	return nil
}

// layOut writes the consecutive dirty blocks ext of an object's file
// where they go (see the file's comment) and sets their checksums.
// journaled: the file has journal records not yet deleted.
func (a *applyCtx) layOut(st *objState, fid uint64, ext []uint64, journaled bool) error {
	s := a.s
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
		if !st.newFile {
			s.wb.waitDestage(fid) // see destageFile
		}
		if invariantsOn {
			a.checkDirectTarget(st, fid, ext, false)
		}
		setSlots(st, ext, false)
		if err := a.writeDirect(fid, s.phys(ext[0], false), buf, !st.newFile); err != nil {
			return err
		}
	case known && oneSlot && !journaled && big && (ext[len(ext)-1]+1)*blockSize <= s.slotBase:
		// Copy-on-write: the other slot is not live, so write it,
		// let the commit flip the blocks to it, then free the old.
		s.wb.waitDestage(fid)
		if invariantsOn {
			a.checkDirectTarget(st, fid, ext, !inB)
		}
		setSlots(st, ext, !inB)
		if err := a.writeDirect(fid, s.phys(ext[0], !inB), buf, true); err != nil {
			return err
		}
		a.punches = append(a.punches, punch{fileID: fid, off: s.phys(ext[0], inB), n: len(buf)})
		a.dropWB(fid, ext)
		s.cowWrites.Add(1)
	default:
		return a.journalExtent(st, fid, ext, buf, fresh)
	}
	return nil
}

// journalExtent queues the blocks ext, whose content is buf, as journal
// records, rewritten where they live after the commit; fresh ones (no
// committed state uses them) go to the page cache now.
func (a *applyCtx) journalExtent(st *objState, fid uint64, ext []uint64, buf []byte, fresh bool) error {
	s := a.s
	if s.wb.on.Load() && !s.wb.seq.continues(fid, ext) {
		a.writeBack(st, fid, ext, buf)
		return nil
	}
	s.wb.waitDestage(fid) // written in place below: see destageFile
	a.dropWB(fid, ext)    // journaled now, so the blocks' W keys must go
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
		if invariantsOn {
			checkJournalRecord(off, part)
		}
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
	return nil
}

// writeBack puts the blocks ext, whose content is buf, into the write-back
// area (writeback.go): one W key each, in the batch. They keep their slot,
// which the destager writes them to.
func (a *applyCtx) writeBack(st *objState, fid uint64, ext []uint64, buf []byte) {
	shard := shardOf(st.coll, st.name)
	for k, b := range ext {
		setSlots(st, ext[k:k+1], liveInB(st, b))
		a.batch.Set(wbKey(fid, b), buf[k*blockSize:(k+1)*blockSize], nil)
		a.wb = append(a.wb, wbChange{kind: wbSet, fileID: fid, block: b, shard: shard})
	}
}

// dropWB deletes the W keys of the blocks ext that have one: they are
// written elsewhere by this transaction, so the keys' older content must
// not stay authoritative.
func (a *applyCtx) dropWB(fid uint64, ext []uint64) {
	if !a.s.wb.hasFile(fid) {
		return
	}
	for _, b := range ext {
		if a.s.wb.holds(fid, b) {
			a.batch.Delete(wbKey(fid, b), nil)
			a.wb = append(a.wb, wbChange{kind: wbDel, fileID: fid, block: b})
		}
	}
}

// dirtyBlocks returns the blocks of dirty in ascending order. A large write
// dirties one run of blocks, which needs no sort: sorting the 1,024 blocks
// of each 4 MiB write would be work every large write pays for nothing.
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
// and panic on a stale one; the package's tests set it, and so does
// -tags invariants.
var verifySums = invariantsOn

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
