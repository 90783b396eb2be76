package objstore

// The background checkpointer: it makes applied deferred writes durable
// in their data files, lets the commit log reuse their records' space and
// then deletes the records.

import (
	"fmt"
	"time"
)

type appliedJ struct {
	seq, fileID uint64
	n           int
	pos         commitPos // where its record was committed
	ck          uint64    // the checkpoint that synced it (syncJournal), from 1
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
	start := time.Now()
	wholeFS, err := s.syncFiles(batch)
	if err != nil {
		return nil, err
	}
	var n int64
	for _, j := range batch {
		n += int64(j.n)
	}
	s.pace.synced(n, n+s.writtenDuring(wholeFS, n), time.Since(start))
	s.ckSynced++
	held := map[commitPos]int{}
	for i, j := range batch {
		held[j.pos]++
		batch[i].ck = s.ckSynced
	}
	for p, n := range held {
		s.log.release(p, n)
	}
	return batch, nil
}

// writtenDuring estimates what a checkpoint's sync of n bytes wrote
// besides them: a sync of the whole filesystem also writes back the
// deferred writes applied while it ran (as many as n, counted at most).
func (s *Store) writtenDuring(wholeFS bool, n int64) int64 {
	if !wholeFS {
		return 0
	}
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	return min(s.ckBytes, n)
}

// syncFiles makes the applied deferred writes of batch durable in their
// data files: one filesystem sync when they touch many files (syncfs.go),
// else a fdatasync of each. It says which.
func (s *Store) syncFiles(batch []appliedJ) (wholeFS bool, err error) {
	files := map[uint64]bool{}
	for _, j := range batch {
		files[j.fileID] = true
	}
	if s.fsSync != nil && len(files) >= syncfsMinFiles {
		s.fsSyncs.Add(1)
		return true, s.fsSync.sync()
	}
	return false, s.syncEach(files)
}

// syncEach fdatasyncs each of files that still exists.
func (s *Store) syncEach(files map[uint64]bool) error {
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
		s.fileSyncs.Add(1)
		err := df.f.SyncData()
		s.releaseFile(df)
		if err != nil {
			return fmt.Errorf("objstore: checkpoint sync of file %016x: %w", id, err)
		}
	}
	return nil
}

// dropJournal deletes the journal records of synced deferred writes: from
// the log's view of the journal, or from the index for records that went
// there. Until then the records' files take no direct writes (see
// hasPending), since a replay of the records would overwrite them.
//
// Checkpoints drop their records in the order they synced them: a later
// checkpoint may hold a newer record of a block whose older record an
// earlier one holds, and if the newer record's deletion were durable
// before the older one's, a crash then would replay the older record over
// the newer data, which the index's checksum no longer matches.
func (s *Store) dropJournal(batch []appliedJ) error {
	ck := batch[0].ck
	s.ckDropMu.Lock()
	for s.ckDropped+1 < ck {
		s.ckDropCond.Wait()
	}
	s.ckDropMu.Unlock()
	defer func() {
		s.ckDropMu.Lock()
		s.ckDropped = ck
		s.ckDropCond.Broadcast()
		s.ckDropMu.Unlock()
	}()
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

// kickCheckpoint asks the checkpointer to run now.
func (s *Store) kickCheckpoint() {
	select {
	case s.ckKick <- struct{}{}:
	default:
	}
}

func (s *Store) hasPending(fid uint64) bool {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	return s.pending[fid] > 0
}

// Tunables; tests shorten them to exercise checkpoints under load.
var (
	checkpointInterval = 500 * time.Millisecond
	journalKickBytes   = int64(16 << 20)
)
