package objstore

// Opening a store: format an empty one, replay the commit log (Open, via
// openCommitLog) and the journal into the data files, remove orphaned
// files, count the objects and build the filter of object keys; and Close.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Open opens (formatting if empty) the store, replays the journal and removes
// orphaned data files before returning.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, invalidf("objstore: Options.Dir is empty")
	}
	realFS := o.FS == nil
	o = o.withDefaults()
	s := newStore(o, realFS)
	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	if realFS {
		fss, err := openFSSyncer(o.Dir)
		if err != nil {
			return nil, err
		}
		s.fsSync = fss
	}
	opened := false
	defer func() {
		if !opened && s.fsSync != nil {
			s.fsSync.close()
		}
	}()
	s.idx = newIndexCache(o.CacheBytes / 2)
	if n := o.dataCacheBytes(); n > 0 {
		s.rc = newReadCache(n)
	}
	if err := s.openIndexAndLog(realFS); err != nil {
		return nil, err
	}
	if o.FlashCacheBytes > 0 && realFS {
		fc, err := openFlashCache(o.MetaDir, o.FlashCacheBytes)
		if err != nil {
			s.closeFiles()
			s.log.close()
			s.db.Close()
			return nil, err
		}
		s.fc = fc
		fc.restore(o.MetaDir, s.replayed == 0)
	}
	if err := s.startChecked(); err != nil {
		s.fc.close("")
		s.closeFiles()
		s.log.close()
		s.db.Close()
		return nil, err
	}
	go s.checkpointer()
	go s.destager()
	if t := o.stallTimeout(); t > 0 {
		go s.watchStalls(t)
	}
	s.rm = newRemover(s.fs, s.spaceFreed)
	opened = true
	if o.ReserveDataCache {
		s.rc.reserve()
	}
	return s, nil
}

// withDefaults fills in what o leaves to the store. A store on the real
// file system (FS nil) uses vfs.Default, or the tests' testDefaultFS.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
		if testDefaultFS != nil {
			o.FS = testDefaultFS
		}
	}
	if o.MetaDir == "" {
		o.MetaDir = o.FS.PathJoin(o.Dir, "meta")
	}
	if o.ReserveBytes == 0 {
		o.ReserveBytes = defaultReserve
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	return o
}

// newStore is a store of options o with nothing opened yet. On the real
// file system it writes with O_DIRECT and a block's slot B lies
// slotBaseReal past slot A; on a file system in memory, slotBaseMem.
func newStore(o Options, realFS bool) *Store {
	s := &Store{
		opts:     o,
		fs:       o.FS,
		dataDir:  o.FS.PathJoin(o.Dir, "data"),
		files:    map[uint64]*dataFile{},
		pending:  map[uint64]int{},
		ckKick:   make(chan struct{}, 1),
		closing:  make(chan struct{}),
		failedCh: make(chan struct{}),
		ckDone:   make(chan struct{}),
		wb:       newWriteback(o.WritebackBytes, o.SequentialCutoff),
	}
	s.ckDropCond = sync.NewCond(&s.ckDropMu)
	s.directIO.Store(realFS)
	s.slotBase = slotBaseReal
	if !realFS {
		s.slotBase = slotBaseMem
	}
	return s
}

// openIndexAndLog opens the index and its write-ahead log, the commit log,
// which it replays into the index. On the real file system the log's
// segments are the size of the index's memtables (see memTableSize).
func (s *Store) openIndexAndLog(realFS bool) error {
	o := s.opts
	mt := memTableSize(s.fs, o.MetaDir)
	db, err := s.openIndex(o.CacheBytes-o.CacheBytes/2, mt)
	if err != nil {
		return err
	}
	s.db = db
	segSize := testLogSegment
	if realFS {
		segSize = int64(mt)
	}
	apply := func(b *pebble.Batch) error { return db.Apply(b, pebble.NoSync) }
	s.log, s.logReplayed, err = openCommitLog(s.fs, o.MetaDir, segSize, realFS, apply, db.Flush, s.kickCheckpoint)
	if err != nil {
		db.Close()
		return err
	}
	s.pace = newPacer(s.log.segSize)
	return nil
}

// makeDirs creates Dir and MetaDir, and makes their directory entries
// durable, up to the root.
func (s *Store) makeDirs() error {
	for _, d := range []string{s.opts.Dir, s.opts.MetaDir} {
		if err := s.fs.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("objstore: create %s: %w", d, err)
		}
		for p := d; ; {
			if err := s.syncDir(p); err != nil {
				return err
			}
			parent := s.fs.PathDir(p)
			if parent == p || parent == "" || parent == "." {
				break
			}
			p = parent
		}
	}
	return nil
}

// openIndex opens the index (pebble) in MetaDir, with a block cache of
// cacheBytes and memtables of mt bytes.
func (s *Store) openIndex(cacheBytes int64, mt uint64) (*pebble.DB, error) {
	cache := pebble.NewCache(cacheBytes)
	defer cache.Unref() // the DB holds its own reference
	po := &pebble.Options{
		FS:           indexFS{FS: s.fs},
		Logger:       quietLogger{},
		MemTableSize: mt,
		Cache:        cache,
		DisableWAL:   true, // the commit log is the WAL (commitlog.go)
		// Damage is refused at Open and reported by VerifyIndex, not a
		// crash of whichever goroutine met it (indexcheck.go).
		EventListener: &pebble.EventListener{DataCorruption: s.noteIndexCorruption, BackgroundError: s.noteBackgroundError},
	}
	// Object data (inline objects, journal records) rarely compresses;
	// decompressing it cost every small read CPU for no space saved.
	for i := range po.Levels {
		po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		// Most writes look up a record that does not exist yet (a new
		// object): a bloom filter answers those without reading blocks.
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	var db *pebble.DB
	err := s.guardIndex(func() (err error) { db, err = pebble.Open(s.opts.MetaDir, po); return err })
	switch {
	case err == nil:
		return db, nil
	case IsCorruption(err):
		return nil, err
	case errors.Is(err, os.ErrNotExist): // its MANIFEST names files that are gone
		return nil, s.damaged(err)
	default:
		return nil, fmt.Errorf("objstore: open index in %s: %w", s.opts.MetaDir, err)
	}
}

// memTableSize is 64 MiB, less on a small disk: the commit log takes three
// segments of the memtable's size (and pebble's WAL files took 140 MiB of
// a 160 MiB disk, leaving room for a handful of objects).
func memTableSize(fs vfs.FS, dir string) uint64 {
	const largest, smallest = 64 << 20, 4 << 20
	du, err := fs.GetDiskUsage(dir)
	if err != nil || du.TotalBytes == 0 {
		return largest
	}
	// Whole MiBs: the log's segments must be multiples of 4 KiB.
	return max(smallest, min(du.TotalBytes/64, largest)) &^ (1<<20 - 1)
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "objstore/pebble: "+format+"\n", args...)
}

func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("objstore/pebble: "+format, args...))
}

// startChecked runs start, refusing a store whose index is damaged: one
// that pebble reported while start read it, or whose sstables do not open.
func (s *Store) startChecked() error {
	if err := s.guardIndex(s.start); err != nil {
		return err
	}
	return s.checkTables(context.Background(), false)
}

func (s *Store) start() error {
	v, err := s.get(keySuperblock)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		if err := s.checkNoData(); err != nil {
			return err
		}
		if err := s.format(); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		ver, n := binary.Uvarint(v)
		if n <= 0 {
			return fmt.Errorf("objstore: unreadable superblock in %s", s.opts.MetaDir)
		}
		if ver < 1 || ver > formatVersion {
			return fmt.Errorf("objstore: on-disk format version %d in %s is not supported by this build (supports 1 to %d)", ver, s.opts.MetaDir, formatVersion)
		}
		if ver != formatVersion {
			if err := s.setDurable(keySuperblock, binary.AppendUvarint(nil, formatVersion)); err != nil {
				return err
			}
		}
	}
	if err := s.checkIdentity(); err != nil {
		return err
	}
	if v, err := s.get(keyIDHigh); err == nil && len(v) == 8 {
		s.idHigh = binary.BigEndian.Uint64(v)
	} else if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	s.nextID = s.idHigh
	if err := s.replayJournal(); err != nil {
		return err
	}
	if err := s.loadWriteback(); err != nil {
		return err
	}
	if err := s.removeOrphans(); err != nil {
		return err
	}
	if err := s.countObjects(); err != nil {
		return err
	}
	return s.dropOrphanWB()
}

func (s *Store) format() error {
	for i := 0; i < 256; i++ {
		if err := s.fs.MkdirAll(s.fanDir(uint64(i)), 0o755); err != nil {
			return fmt.Errorf("objstore: format: %w", err)
		}
	}
	for i := 0; i < 256; i++ {
		if err := s.syncDir(s.fanDir(uint64(i))); err != nil {
			return err
		}
	}
	if err := s.syncDir(s.dataDir); err != nil {
		return err
	}
	if err := s.syncDir(s.opts.Dir); err != nil {
		return err
	}
	return s.setDurable(keySuperblock, binary.AppendUvarint(nil, formatVersion))
}

// setDurable sets the superblock in the index's sstables, not only in the
// commit log: a build that predates the log reads the version there, and
// must refuse the store rather than open it without its newest commits.
func (s *Store) setDurable(key, value []byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(key, value, nil)
	if err := s.commit(b); err != nil {
		return err
	}
	return s.db.Flush()
}

func (s *Store) syncDir(path string) error {
	d, err := s.fs.OpenDir(path)
	if err != nil {
		return fmt.Errorf("objstore: open dir %s: %w", path, err)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return fmt.Errorf("objstore: sync dir %s: %w", path, err)
	}
	return nil
}

// replayJournal re-applies deferred writes that may not have reached their
// data files. Replay is idempotent: records only hold whole blocks, are
// applied in commit order, and records of dropped files are skipped.
func (s *Store) replayJournal() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagJournal}, UpperBound: []byte{tagJournal + 1}})
	if err != nil {
		return err
	}
	touched := map[uint64]*dataFile{}
	defer func() {
		for id := range touched {
			s.releaseFile(touched[id])
		}
	}()
	var maxSeq uint64
	var n int
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			it.Close()
			return fmt.Errorf("objstore: bad journal key %x", k)
		}
		maxSeq = binary.BigEndian.Uint64(k[1:])
		j, err := decodeJrec(it.Value())
		if err != nil {
			it.Close()
			return &CorruptionError{Detail: fmt.Sprintf("journal record %d: %v", maxSeq, err)}
		}
		n++
		df, ok := touched[j.fileID]
		if !ok {
			live, err := s.has(idKey(tagFileRef, j.fileID, nil))
			if err != nil {
				it.Close()
				return err
			}
			if !live {
				touched[j.fileID] = nil
				continue
			}
			if df, err = s.openFile(j.fileID); err != nil {
				it.Close()
				return err
			}
			touched[j.fileID] = df
		}
		if df == nil {
			continue
		}
		if _, err := df.f.WriteAt(j.data, int64(j.off)); err != nil {
			it.Close()
			return fmt.Errorf("objstore: journal replay into file %016x: %w", j.fileID, err)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	s.jseq.Store(maxSeq)
	s.replayed = n
	if n == 0 {
		return nil
	}
	for id, df := range touched {
		if df == nil {
			continue
		}
		if err := df.f.SyncData(); err != nil {
			return fmt.Errorf("objstore: journal replay sync of file %016x: %w", id, err)
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	b.DeleteRange([]byte{tagJournal}, []byte{tagJournal + 1}, nil)
	return s.commit(b)
}

// removeOrphans deletes data files no object refers to: files written for a
// transaction that never committed, or whose removal after commit was cut
// short by a crash.
func (s *Store) removeOrphans() error {
	for i := 0; i < 256; i++ {
		dir := s.fanDir(uint64(i))
		names, err := s.fs.List(dir)
		if err != nil {
			return fmt.Errorf("objstore: list %s: %w", dir, err)
		}
		for _, n := range names {
			id, err := strconv.ParseUint(n, 16, 64)
			if err != nil || len(n) != 16 {
				continue
			}
			live, err := s.has(idKey(tagFileRef, id, nil))
			if err != nil {
				return err
			}
			if !live {
				if err := s.fs.Remove(s.fs.PathJoin(dir, n)); err != nil {
					return fmt.Errorf("objstore: remove orphan: %w", err)
				}
			}
		}
	}
	return nil
}

func (s *Store) countObjects() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagObject}, UpperBound: []byte{tagObject + 1}})
	if err != nil {
		return err
	}
	var n, b int64
	seed := maphash.MakeSeed()
	var hashes []uint64 // for the filter, sized once n is known
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		if len(v) >= recHeaderLen {
			b += int64(binary.BigEndian.Uint64(v[10:]))
		}
		switch {
		case n < filterMaxKeys:
			hashes = append(hashes, filterHash(seed, it.Key()))
		case n == filterMaxKeys:
			hashes = nil // too many objects for a filter: see filterMaxKeys
		}
		if len(v) >= recHeaderLen && v[1]&recFlagInline == 0 && len(s.wb.files) > 0 {
			s.wb.ownedBy(binary.BigEndian.Uint64(v[26:]), it.Key())
		}
		n++
	}
	s.objects.Store(n)
	s.dataBytes.Store(b)
	if err := it.Close(); err != nil {
		return err
	}
	if n <= filterMaxKeys {
		f := newObjFilter(n, seed)
		for _, h := range hashes {
			f.addHash(h)
		}
		s.filter.Store(f)
	}
	return nil
}

// Close checkpoints the journal and closes the store. A store whose meta
// device stopped answering (stall.go) is not waited for: Close stops its
// background work and returns its failure at once.
func (s *Store) Close() error {
	if s.stalled.Load() {
		return s.closeStalled()
	}
	err := errors.New("objstore: already closed")
	s.closeOnce.Do(func() {
		close(s.closing)
		s.pace.stop()
		s.wb.pace.stop()
		<-s.wb.done
		<-s.ckDone
		done, e := s.syncJournal()
		s.ckDrops.Wait()
		err = e
		if err == nil && len(done) > 0 {
			err = s.dropJournal(done)
		}
		if s.stalled.Load() {
			err = s.failure() // the device stopped answering meanwhile: see closeStalled
			return
		}
		s.rm.close()
		s.closeFiles()
		s.rc.close()
		saveDir := ""
		if err == nil {
			saveDir = s.opts.MetaDir // every change is in the data files
		}
		s.fc.close(saveDir)
		if s.fsSync != nil {
			s.fsSync.close()
		}
		s.log.close()
		if e := s.db.Close(); err == nil {
			err = e
		}
	})
	return err
}
