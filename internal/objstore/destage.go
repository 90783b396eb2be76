package objstore

// The destager: moves the write-back area's blocks (writeback.go) to the
// data disk, in batches sorted by file and block, at a rate set by how
// full the area is.
//
// One pass: pick up to wbBatchBytes of blocks, file by file from where the
// last pass stopped; write each file's blocks into their live slots while
// holding the file's object lock (readers and writers of the object wait
// for a page-cache write, never for the disk); fdatasync the files; wait
// for the journal records of those files that were not yet checkpointed
// (a replay of an older record must never land over a destaged block whose
// key is gone); then delete, in one commit, the keys whose value is still
// the one written. A crash anywhere before that commit leaves the keys, and
// so the blocks, where they were.

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Tunables; tests shorten them.
var (
	// wbBatchBytes is what one pass destages at most.
	wbBatchBytes = int64(4 << 20)
	// wbIdlePause is the pause between passes while the area is below its
	// low watermark (a quarter full); it shrinks to nothing at the high
	// watermark (three quarters), and while the area is off (draining).
	wbIdlePause = time.Second
)

// destageHook, if set (by tests), runs at each step of a pass: "writing"
// (a file, outside its object lock), "written", "synced", "dropped".
var destageHook atomic.Pointer[func(step string)]

func destageStep(step string) {
	if h := destageHook.Load(); h != nil {
		(*h)(step)
	}
}

// setDestageHook sets destageHook (nil: none).
func setDestageHook(h func(step string)) {
	if h == nil {
		destageHook.Store(nil)
		return
	}
	destageHook.Store(&h)
}

// wbPick is a pass's work in one file.
type wbPick struct {
	fileID uint64
	shard  int
	blocks []uint64 // sorted
}

// wbDone is a block a pass wrote, with the generation of its W key's value.
type wbDone struct {
	fileID, block, gen uint64
}

func (s *Store) destager() {
	defer close(s.wb.done)
	t := time.NewTimer(s.wb.pause())
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-s.failedCh:
			return
		case <-t.C:
		case <-s.wb.kick:
		}
		pause := time.Duration(-1)
		if s.wb.blocks.Load() > 0 {
			_, err := s.destagePass()
			switch {
			case isNoSpace(err):
				// The blocks stay in the area, durable; try again later.
				s.wb.noSpace.Add(1)
				pause = wbIdlePause
			case err != nil:
				s.fail(err)
				return
			}
		}
		if pause < 0 {
			pause = s.wb.pause()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(pause)
	}
}

// catchingUp says the destager should move blocks as efficiently as it
// can: the area is past its low watermark, or draining.
func (wb *writeback) catchingUp() bool {
	return !wb.on.Load() || wb.dirty() > max(wb.area, wbMinArea)/4
}

// pause is how long the destager rests between passes: wbIdlePause below
// the low watermark, falling linearly to nothing at the high one.
func (wb *writeback) pause() time.Duration {
	d, area := wb.dirty(), max(wb.area, wbMinArea)
	low, high := area/4, area/4*3
	switch {
	case d == 0:
		return wbIdlePause
	case !wb.on.Load() || d >= high:
		return 0
	case d <= low:
		return wbIdlePause
	}
	return time.Duration(float64(wbIdlePause) * float64(high-d) / float64(high-low))
}

// destagePass runs one pass (see the top of this file) and returns the
// bytes it moved.
func (s *Store) destagePass() (int64, error) {
	s.wb.passMu.Lock()
	defer s.wb.passMu.Unlock()
	start := time.Now()
	picks := s.wb.pick(wbBatchBytes / blockSize)
	var done []wbDone
	var files []*dataFile
	defer func() {
		for _, df := range files {
			s.releaseFile(df)
		}
	}()
	journaled := false
	for _, p := range picks {
		df, d, pending, err := s.destageFile(p)
		if err != nil {
			return 0, err
		}
		if df != nil {
			files = append(files, df)
		}
		done = append(done, d...)
		journaled = journaled || pending
	}
	if len(done) == 0 {
		return 0, nil
	}
	destageStep("written")
	if err := s.syncDestaged(files); err != nil {
		return 0, err
	}
	destageStep("synced")
	if journaled {
		if err := s.journalBarrier(); err != nil {
			return 0, err
		}
	}
	n, err := s.dropDestaged(done)
	if err != nil {
		return 0, err
	}
	destageStep("dropped")
	s.wb.destaged.Add(n)
	s.wb.pace.synced(0, n, time.Since(start))
	return n, nil
}

// syncDestaged makes a pass's writes durable. Below the low watermark
// (the area under a quarter full) it fdatasyncs each file: a gentle
// trickle that leaves the data disk, and whatever shares it, to others.
// Above it (or while the area drains) it syncs the filesystem once when
// the pass touched many files, as a checkpoint does (syncfs.go): many
// times the bytes per second of the disk, at the price of a burst of
// writeback.
func (s *Store) syncDestaged(files []*dataFile) error {
	if s.fsSync != nil && len(files) >= syncfsMinFiles && s.wb.catchingUp() {
		s.fsSyncs.Add(1)
		if err := s.fsSync.sync(); err != nil {
			return fmt.Errorf("objstore: destage sync: %w", err)
		}
		return nil
	}
	for _, df := range files {
		if err := df.f.SyncData(); err != nil {
			return fmt.Errorf("objstore: destage sync: %w", err)
		}
	}
	return nil
}

// pick chooses up to max blocks to destage, file by file in file order
// from the cursor on, wrapping around.
func (wb *writeback) pick(max int64) []wbPick {
	wb.mu.RLock()
	ids := make([]uint64, 0, len(wb.files))
	for id := range wb.files {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	i, _ := slices.BinarySearch(ids, wb.cursor)
	ids = append(ids[i:], ids[:i]...)
	var picks []wbPick
	for _, id := range ids {
		if max <= 0 {
			break
		}
		f := wb.files[id]
		bs := f.sortedBlocks()
		if int64(len(bs)) > max {
			bs = bs[:max]
		}
		max -= int64(len(bs))
		picks = append(picks, wbPick{fileID: id, shard: f.shard, blocks: bs})
		wb.cursor = id + 1
	}
	wb.mu.RUnlock()
	return picks
}

// destageFile writes the picked blocks of one file that still have W keys
// into their live slots. It returns the file (referenced, to sync), the
// blocks written, and whether the file has journal records not yet
// checkpointed.
//
// What to write, and where, is read under the object's lock; the writes
// run after it is released, so neither readers (the keys stay
// authoritative until dropDestaged) nor writers that only set keys wait
// for the data disk. Writers that would write the file's data blocks
// themselves wait for these writes first (waitDestage), or a write of
// theirs could be overwritten by an older value.
func (s *Store) destageFile(p wbPick) (df *dataFile, done []wbDone, pending bool, err error) {
	runs, df, done, pending, err := s.destageSnapshot(p)
	if err != nil || df == nil {
		return nil, nil, false, err
	}
	defer s.wb.endDestage(p.fileID)
	destageStep("writing")
	for _, r := range runs {
		if _, err := df.f.WriteAt(r.buf, int64(r.off)); err != nil {
			s.releaseFile(df)
			return nil, nil, false, fmt.Errorf("objstore: destage into file %016x: %w", p.fileID, err)
		}
	}
	return df, done, pending, nil
}

// wbRun is a run of blocks destageFile writes at file offset off.
type wbRun struct {
	off uint64
	buf []byte
}

// destageSnapshot reads, under the object's lock, the blocks of p that
// still have W keys, their generations and their slots, opens the file,
// and marks it as being destaged (endDestage unmarks it). df is nil when
// there is nothing to write.
func (s *Store) destageSnapshot(p wbPick) (runs []wbRun, df *dataFile, done []wbDone, pending bool, err error) {
	if p.shard < 0 {
		return nil, nil, nil, false, nil // no object owns it: Open deletes such keys
	}
	s.locks[p.shard].Lock()
	defer s.locks[p.shard].Unlock()
	done = s.wb.current(p)
	if len(done) == 0 {
		return nil, nil, nil, false, nil
	}
	pending = s.hasPending(p.fileID)
	name := fmt.Sprintf("file %016x", p.fileID)
	chunks, err := s.loadChunks("", name, p.fileID, done[0].block/chunkBlocks, done[len(done)-1].block/chunkBlocks)
	if err != nil {
		return nil, nil, nil, false, err
	}
	for i := 0; i < len(done); {
		j, buf, slotB, err := s.destageRun(name, chunks, done, i)
		if err != nil {
			return nil, nil, nil, false, err
		}
		runs = append(runs, wbRun{off: s.phys(done[i].block, slotB), buf: buf})
		i = j
	}
	if df, err = s.openFile(p.fileID); err != nil {
		return nil, nil, nil, false, err
	}
	s.wb.beginDestage(p.fileID)
	return runs, df, done, pending, nil
}

// beginDestage marks file fid as being written by the destager; the
// caller holds the file's object lock.
func (wb *writeback) beginDestage(fid uint64) {
	wb.ioMu.Lock()
	wb.writing = fid
	wb.ioMu.Unlock()
}

// endDestage unmarks it and wakes the writers waiting for it.
func (wb *writeback) endDestage(fid uint64) {
	wb.ioMu.Lock()
	wb.writing = 0
	wb.ioCond.Broadcast()
	wb.ioMu.Unlock()
}

// waitDestage returns once the destager is not writing file fid. A writer
// that holds fid's object lock calls it before it writes any of fid's data
// blocks itself; the destager cannot start on fid again until it lets the
// lock go.
func (wb *writeback) waitDestage(fid uint64) {
	wb.ioMu.Lock()
	for wb.writing == fid {
		wb.ioCond.Wait()
	}
	wb.ioMu.Unlock()
}

// destageRun gathers the values of done[i:j], the longest run of
// consecutive blocks in one slot from i, each checked against its
// checksum.
func (s *Store) destageRun(name string, chunks map[uint64]*chunk, done []wbDone, i int) (j int, buf []byte, slotB bool, err error) {
	for j = i; j < len(done); j++ {
		b := done[j].block
		c := chunks[b/chunkBlocks]
		if c == nil || !c.present(b%chunkBlocks) {
			return 0, nil, false, fmt.Errorf("objstore: %s: block %d has a write-back key but no checksum", name, b)
		}
		inB := c.inB(b % chunkBlocks)
		if j > i && (b != done[j-1].block+1 || inB != slotB) {
			break
		}
		slotB = inB
		v, err := s.get(wbKey(done[j].fileID, b))
		if err != nil {
			return 0, nil, false, fmt.Errorf("objstore: %s: write-back block %d: %w", name, b, err)
		}
		if len(v) != blockSize || blockCRC(v) != c.crc[b%chunkBlocks] {
			return 0, nil, false, &CorruptionError{Coll: "", Name: name, Offset: b * blockSize, Detail: "write-back block checksum mismatch"}
		}
		buf = append(buf, v...)
	}
	return j, buf, slotB, nil
}

// current returns the blocks of p that still have W keys, with their
// generations. The caller holds the file's object lock.
func (wb *writeback) current(p wbPick) []wbDone {
	wb.mu.RLock()
	defer wb.mu.RUnlock()
	f := wb.files[p.fileID]
	if f == nil {
		return nil
	}
	var out []wbDone
	for _, b := range p.blocks {
		if g, ok := f.blocks[b]; ok {
			out = append(out, wbDone{fileID: p.fileID, block: b, gen: g})
		}
	}
	return out
}

// dropDestaged deletes, in one commit, the W keys of done whose value is
// still the one destaged, and returns their bytes.
func (s *Store) dropDestaged(done []wbDone) (int64, error) {
	wb := s.wb
	wb.guard.Lock()
	defer wb.guard.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	var del []wbChange
	wb.mu.RLock()
	for _, d := range done {
		if f := wb.files[d.fileID]; f != nil && f.blocks[d.block] == d.gen {
			b.Delete(wbKey(d.fileID, d.block), nil)
			del = append(del, wbChange{kind: wbDel, fileID: d.fileID, block: d.block})
		}
	}
	wb.mu.RUnlock()
	if len(del) == 0 {
		return 0, nil
	}
	if err := s.commit(b); err != nil {
		return 0, fmt.Errorf("objstore: destage commit: %w", err)
	}
	wb.note(del)
	return int64(len(del)) * blockSize, nil
}

// journalBarrier returns once every journal record applied before it was
// called has been synced to its file and its deletion committed.
func (s *Store) journalBarrier() error {
	if err := s.checkpoint(); err != nil {
		return err
	}
	s.ckRunMu.Lock()
	n := s.ckSynced
	s.ckRunMu.Unlock()
	for {
		s.ckDropMu.Lock()
		ok := s.ckDropped >= n
		s.ckDropMu.Unlock()
		if ok {
			return nil
		}
		if err := s.failure(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}
