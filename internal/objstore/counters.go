package objstore

// Counters are the store's running totals since it opened, for an OSD's
// metrics: how commits are batched into synced log writes, how often
// checkpoints sync data files, and how the caches fare.
type Counters struct {
	LogWrites    int64 // synced writes of the commit log (one group each)
	LogCommits   int64 // commits those writes carried: LogCommits/LogWrites is the batch size
	LogBytes     int64 // bytes those writes carried, padding included
	LogSwitches  int64 // moves to the next log segment
	FSSyncs      int64 // checkpoints that synced the whole filesystem (syncfs)
	FileSyncs    int64 // data files checkpoints synced one by one
	IndexHits    int64 // index lookups answered from memory
	IndexMisses  int64
	DataHits     int64 // large reads answered from the data cache
	DataMisses   int64
	CopyOnWrites int64 // overwrites written to a fresh slot, not in place
	PacedWrites  int64 // writes the pacer slowed or held (pacer.go)
	PacedNanos   int64 // the time they lost to it
	// Now, not totals: bytes of small writes applied and not yet synced
	// to the data disk, and the rate checkpoints sync them at (bytes a
	// second, 0 until measured).
	Unsynced, SyncRate int64
}

// Counters returns the store's totals now.
func (s *Store) Counters() Counters {
	c := Counters{FSSyncs: s.fsSyncs.Load(), FileSyncs: s.fileSyncs.Load(), CopyOnWrites: s.cowWrites.Load()}
	if l := s.log; l != nil {
		c.LogWrites, c.LogCommits, c.LogBytes, c.LogSwitches = l.groups.Load(), l.commits.Load(), l.groupBytes.Load(), l.wraps.Load()
	}
	if s.idx != nil {
		c.IndexHits, c.IndexMisses = s.idx.hits.Load(), s.idx.misses.Load()
	}
	if p := s.pace; p != nil {
		c.PacedWrites, c.PacedNanos, c.Unsynced = p.paced.Load(), p.waitedNs.Load(), p.backlog.Load()
		p.mu.Lock()
		c.SyncRate = int64(p.rate)
		p.mu.Unlock()
	}
	if s.rc != nil {
		c.DataHits, c.DataMisses = s.rc.hits.Load(), s.rc.misses.Load()
	}
	return c
}
