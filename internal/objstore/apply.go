package objstore

// Applying a transaction: Apply locks its objects, runs its ops on working
// copies of them (objstate.go), lays out their blocks (finalize.go),
// commits one batch through the commit log, and then does what the commit
// allows (afterCommit).

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

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
	pos     commitPos  // where the journal records went
	wb      []wbChange // W keys the batch sets or deletes (writeback.go)
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
	if err := s.checkSpace(2*int64(t.bytes)+4096, deletesOnly(t)); err != nil {
		return err
	}
	s.pace.admit(int64(t.bytes), s.kickCheckpoint)
	if s.wb.on.Load() && mayWriteBack(t) {
		s.wb.pace.admit(int64(t.bytes), s.wb.kickDestage)
	}
	defer s.lockObjects(t)()

	a := &applyCtx{s: s, batch: s.db.NewBatch(), objs: map[string]*objState{}, now: time.Now().UnixNano(),
		direct: map[uint64]*dataFile{}, unsynced: map[uint64]bool{}}
	defer a.recycleMaps()
	defer a.batch.Close()
	defer a.release()
	err := a.run(t)
	if err == nil {
		err = a.finalize()
	}
	if err == nil {
		err = a.syncDirect()
	}
	if err == nil && len(a.wb) > 0 {
		// Until afterCommit has noted the W changes (see writeback.go).
		s.wb.guard.RLock()
		defer s.wb.guard.RUnlock()
	}
	if err == nil {
		if err = a.commit(); errors.Is(err, errCommitLog) {
			return err
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

// deletesOnly says t only removes: the space check lets it use the
// reserve, since removing is how a full disk gets room again.
func deletesOnly(t *Txn) bool {
	for i := range t.ops {
		switch t.ops[i].typ {
		case opDelete, opRmXattr, opOmapRm, opOmapRmRange:
		default:
			return false
		}
	}
	return true
}

// release hands back what the Apply took, whatever its outcome, before the
// objects' locks go: the journal batch, the slabs (nothing outlives Apply
// that points into one: the batch and the journal hold copies), and the
// read cache's entries of every data file it touched (see readCache).
func (a *applyCtx) release() {
	if a.journal != nil {
		a.journal.Close()
	}
	for _, b := range a.slabs {
		bufpool.Put(b)
	}
	// File IDs start at 1: 0 is an object without a file (most of a small
	// write's objects), which has nothing cached.
	for _, st := range a.order {
		if st.startFileID != 0 {
			a.s.rc.dropFile(st.startFileID)
			a.dropFlash(st)
		}
		if !st.rec.inline && st.rec.fileID != 0 && st.rec.fileID != st.startFileID {
			a.s.rc.dropFile(st.rec.fileID)
		}
	}
}

// dropFlash takes what st's transaction changed of its object's file out
// of the flash read cache: the blocks it wrote, or the whole file if the
// object was cut, replaced or removed. New files have nothing cached.
func (a *applyCtx) dropFlash(st *objState) {
	fc := a.s.fc
	if fc == nil {
		return
	}
	if st.shrunk || !st.exists || st.rec.inline || st.rec.fileID != st.startFileID {
		fc.dropFile(st.startFileID)
		return
	}
	for b := range st.dirty {
		fc.dropBlocks(st.startFileID, b, b)
	}
}

// commit writes the batch and journal records to the commit log, applies
// the batch to the index and keeps the index cache equal to it. A commit-log
// failure fails the store and is returned as it is: the batch may be in the
// log and come back at the next Open, so the caller must leave everything
// it refers to in place.
func (a *applyCtx) commit() error {
	s := a.s
	s.addToFilter(a.batch) // before the commit: see objFilter
	var err error
	a.pos, err = s.log.commitJournal(a.batch, a.journal, len(a.deferred))
	if errors.Is(err, errCommitLog) {
		s.idx.reset()
		s.fail(err)
		return err
	}
	if err != nil {
		s.idx.reset()
		return fmt.Errorf("objstore: commit: %w", err)
	}
	s.idx.committed(a.batch)
	if invariantsOn {
		s.checkCommitted(a.batch)
	}
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
		if o.typ == opRename {
			err = a.rename(st, string(o.key))
		} else {
			err = a.do(st, o)
		}
		if err != nil {
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
	if len(a.wb) > 0 {
		s.wb.note(a.wb)
		for _, c := range a.wb {
			if c.kind == wbSet {
				s.wb.written.Add(blockSize)
			}
		}
	}
	for _, p := range a.punches {
		if injectIO != nil && injectIO(ioPunch, s.filePath(p.fileID)) != nil {
			continue // as punchHole ignores a failed punch
		}
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
		s.pace.applied(nbytes)
		// A writer waiting for the log to release records (the ones
		// just added, perhaps) needs a checkpoint now, whatever the
		// bytes: it asked for one before these were here.
		kick := s.ckBytes > min(journalKickBytes, s.pace.kickBytes()) || s.log.waitingHeld.Load() > 0
		s.ckMu.Unlock()
		if kick {
			s.kickCheckpoint()
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
