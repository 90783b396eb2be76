package objstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// Options configure Open.
type Options struct {
	Dir          string // bulk data directory (created if missing)
	MetaDir      string // pebble index + journal; "" means Dir+"/meta"
	FS           vfs.FS // nil means vfs.Default; all file IO goes through it
	ReserveBytes int64  // free space kept back; 0 = 64 MiB, <0 = no reserve check
	// CacheBytes sizes the index's caches (0: DefaultCacheBytes): half for
	// the records of objects and small objects' data (indexcache.go), half
	// for pebble's block cache. Small objects live in the index, so this is
	// also their read cache.
	CacheBytes int64
	// DataCacheBytes bounds the read cache of large reads (readcache.go),
	// in memory outside the Go heap. 0: DefaultDataCacheBytes, or a
	// sixteenth of the machine's memory if that is less; negative: none.
	DataCacheBytes int64
	// ReserveDataCache maps and faults in the read cache's memory, up to
	// its bound, right after Open, at idle priority, and keeps it
	// (readcache.go, Reserving): an OSD's store does, so that filling its
	// cache costs no page faults on the read path.
	ReserveDataCache bool
}

// DefaultDataCacheBytes is the read cache of large reads one store keeps at
// most by default.
const DefaultDataCacheBytes = 1 << 30

// dataCacheBytes is o's read cache bound, 0 for none.
func (o Options) dataCacheBytes() int64 {
	switch {
	case o.DataCacheBytes < 0:
		return 0
	case o.DataCacheBytes > 0:
		return o.DataCacheBytes
	}
	n := int64(DefaultDataCacheBytes)
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		n = min(n, int64(si.Totalram)*int64(si.Unit)/16)
	}
	return n
}

// Info describes an object.
type Info struct {
	Size  uint64
	Mtime time.Time
}

// KV is one omap entry.
type KV struct{ Key, Value []byte }

// Usage reports store and device usage.
type Usage struct {
	Objects        int64
	DataBytes      int64 // sum of logical object sizes
	TotalBytes     int64 // of the filesystem holding Dir (0 if unknown)
	FreeBytes      int64
	MetaTotalBytes int64 // of the filesystem holding MetaDir
	MetaFreeBytes  int64
	ReserveBytes   int64 // kept free on each: writes that would eat into it are refused
}

const (
	// formatVersion 2 added slot B (copy-on-write overwrites), 3 the commit
	// log (commitlog.go) in place of the index's own WAL: older stores are
	// upgraded on open, and older builds refuse newer versions.
	formatVersion  = 3
	defaultReserve = 64 << 20
	// DefaultCacheBytes is what one store's index caches take.
	DefaultCacheBytes = 256 << 20
	nShards           = 1024
	idBatch           = 1 << 16
	directMinBytes    = 128 << 10 // fresh extents and overwrites at least this big skip the journal
	slotBaseReal      = 1 << 42   // 4 TiB
	slotBaseMem       = 1 << 20

	maxOpenFilesCleanup = 4096
)

// Store is the object store of one OSD. All methods are safe for concurrent use.
type Store struct {
	opts Options
	fs   vfs.FS
	rc   *readCache // nil: none
	// directIO: large fresh extents are written with O_DIRECT (directio.go);
	// on only for the real filesystem, off once it refuses O_DIRECT.
	directIO atomic.Bool
	// slotBase is where slot B of every data file starts (see chunk): far
	// past any object on a real filesystem, where the gap is a sparse hole;
	// small for the in-memory FS of the tests, which stores holes as bytes.
	slotBase uint64
	// noCachestat, noDsync: the kernel has no cachestat, no RWF_DSYNC (directio.go).
	noCachestat, noDsync atomic.Bool
	db                   *pebble.DB
	log                  *commitLog // every change to db goes through it
	dataDir              string
	// fsSync syncs Dir's filesystem for checkpoints of many files
	// (syncfs.go); nil for the in-memory FS of the tests.
	fsSync *fsSyncer
	// fsSyncs counts the checkpoints that synced the whole filesystem.
	fsSyncs atomic.Int64

	locks [nShards]sync.RWMutex

	idMu           sync.Mutex
	nextID, idHigh uint64

	jseq atomic.Uint64

	filesMu sync.Mutex
	files   map[uint64]*dataFile

	spaceMu sync.Mutex
	space   [2]spaceEntry

	ckMu      sync.Mutex
	applied   []appliedJ
	ckBytes   int64
	pending   map[uint64]int // fileID -> journal records not yet checkpointed
	ckRunMu   sync.Mutex     // one checkpoint at a time
	ckKick    chan struct{}
	ckDrops   sync.WaitGroup // checkpoints committing the deletion of their records
	closing   chan struct{}
	ckDone    chan struct{}
	closeOnce sync.Once

	rm *remover // unlinks dropped data files after their commit

	objects, dataBytes atomic.Int64

	failMu sync.Mutex
	failed error

	idx *indexCache // object records and checksum chunks recently looked up

	indexDamage atomic.Pointer[IndexCorruptionError] // first damage pebble reported (indexcheck.go)

	filter      atomic.Pointer[objFilter] // nil: disabled (see objFilter)
	filterSkips atomic.Int64              // lookups it answered (for tests)

	replayed    int          // journal records replayed by Open (for tests and logs)
	logReplayed int          // commit-log batches replayed by Open (for tests)
	cowWrites   atomic.Int64 // copy-on-write overwrites (for tests)
	inPlace     atomic.Int64 // blocks written from the caller's buffer (for tests)
	presummed   atomic.Int64 // of those, blocks whose checksum came with them (for tests)
}

type appliedJ struct {
	seq, fileID uint64
	n           int
	pos         commitPos // where its record was committed
}

type spaceEntry struct {
	at    time.Time
	free  int64
	total int64
	known bool
}

type dataFile struct {
	f    vfs.File
	refs int
	dead bool

	directOnce sync.Once
	direct     int           // O_DIRECT descriptor, or -1 (directio.go)
	readBefore atomic.Uint64 // regionBits of the large reads that missed the cache
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "objstore/pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("objstore/pebble: "+format, args...))
}

// Open opens (formatting if empty) the store, replays the journal and removes
// orphaned data files before returning.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, invalidf("objstore: Options.Dir is empty")
	}
	realFS := o.FS == nil
	if realFS {
		o.FS = vfs.Default
	}
	if o.MetaDir == "" {
		o.MetaDir = o.FS.PathJoin(o.Dir, "meta")
	}
	if o.ReserveBytes == 0 {
		o.ReserveBytes = defaultReserve
	}
	s := &Store{
		opts:    o,
		fs:      o.FS,
		dataDir: o.FS.PathJoin(o.Dir, "data"),
		files:   map[uint64]*dataFile{},
		pending: map[uint64]int{},
		ckKick:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		ckDone:  make(chan struct{}),
	}
	s.directIO.Store(realFS)
	s.slotBase = slotBaseReal
	if !realFS {
		s.slotBase = slotBaseMem
	}
	for _, d := range []string{o.Dir, o.MetaDir} {
		if err := s.fs.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("objstore: create %s: %w", d, err)
		}
		// Make the directory entries themselves durable, up to the root.
		for p := d; ; {
			if err := s.syncDir(p); err != nil {
				return nil, err
			}
			parent := s.fs.PathDir(p)
			if parent == p || parent == "" || parent == "." {
				break
			}
			p = parent
		}
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
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	s.idx = newIndexCache(o.CacheBytes / 2)
	if n := o.dataCacheBytes(); n > 0 {
		s.rc = newReadCache(n)
	}
	cache := pebble.NewCache(o.CacheBytes - o.CacheBytes/2)
	defer cache.Unref() // the DB holds its own reference
	mt := memTableSize(s.fs, o.MetaDir)
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
	// decompressing it cost a tenth of an OSD's CPU on small reads.
	for i := range po.Levels {
		po.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
		// Most writes look up a record that does not exist yet (a new
		// object): a bloom filter answers those without reading blocks.
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	var db *pebble.DB
	err := s.guardIndex(func() (err error) { db, err = pebble.Open(o.MetaDir, po); return err })
	switch {
	case err == nil:
	case IsCorruption(err):
		return nil, err
	case errors.Is(err, os.ErrNotExist): // its MANIFEST names files that are gone
		return nil, s.damaged(err)
	default:
		return nil, fmt.Errorf("objstore: open index in %s: %w", o.MetaDir, err)
	}
	s.db = db
	segSize := testLogSegment
	if realFS {
		segSize = int64(mt)
	}
	apply := func(b *pebble.Batch) error { return db.Apply(b, pebble.NoSync) }
	kick := func() {
		select {
		case s.ckKick <- struct{}{}:
		default:
		}
	}
	s.log, s.logReplayed, err = openCommitLog(s.fs, o.MetaDir, segSize, realFS, apply, db.Flush, kick)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := s.startChecked(); err != nil {
		s.closeFiles()
		s.log.close()
		db.Close()
		return nil, err
	}
	go s.checkpointer()
	s.rm = newRemover(s.fs, s.spaceFreed)
	opened = true
	if o.ReserveDataCache {
		s.rc.reserve()
	}
	return s, nil
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
	if v, err := s.get(keyIDHigh); err == nil && len(v) == 8 {
		s.idHigh = binary.BigEndian.Uint64(v)
	} else if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	s.nextID = s.idHigh
	if err := s.replayJournal(); err != nil {
		return err
	}
	if err := s.removeOrphans(); err != nil {
		return err
	}
	return s.countObjects()
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

// commit makes a batch durable (in the commit log) and visible.
func (s *Store) commit(b *pebble.Batch) error {
	return s.log.commit(b)
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

func (s *Store) fanDir(fileID uint64) string {
	return s.fs.PathJoin(s.dataDir, fmt.Sprintf("%02x", fileID&0xff))
}

func (s *Store) filePath(fileID uint64) string {
	return s.fs.PathJoin(s.fanDir(fileID), fmt.Sprintf("%016x", fileID))
}

// get returns a copy of the value at key.
func (s *Store) get(key []byte) ([]byte, error) {
	v, c, err := s.db.Get(key)
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	c.Close()
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

func (s *Store) has(key []byte) (bool, error) {
	_, err := s.get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
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

// addToFilter adds the object keys batch sets to the filter, before the
// batch commits (see objFilter).
func (s *Store) addToFilter(batch *pebble.Batch) {
	f := s.filter.Load()
	if f == nil {
		return
	}
	r := batch.Reader()
	for {
		kind, k, _, ok, err := r.Next()
		if err != nil {
			// Built here, so legible; if not, stop trusting the filter.
			s.filter.Store(nil)
			return
		}
		if !ok {
			break
		}
		if kind == pebble.InternalKeyKindSet && len(k) > 0 && k[0] == tagObject {
			f.add(k)
		}
	}
	if f.overfull() {
		s.filter.CompareAndSwap(f, nil)
	}
}

// Close checkpoints the journal and closes the store.
func (s *Store) Close() error {
	err := errors.New("objstore: already closed")
	s.closeOnce.Do(func() {
		close(s.closing)
		<-s.ckDone
		done, e := s.syncJournal()
		s.ckDrops.Wait()
		err = e
		if err == nil && len(done) > 0 {
			err = s.dropJournal(done)
		}
		s.rm.close()
		s.closeFiles()
		s.rc.close()
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

func (s *Store) closeFiles() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	for id, df := range s.files {
		df.close()
		delete(s.files, id)
	}
}

// openFile returns a referenced handle to a data file, creating it if absent.
func (s *Store) openFile(id uint64) (*dataFile, error) {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if df, ok := s.files[id]; ok {
		df.refs++
		return df, nil
	}
	if len(s.files) >= maxOpenFilesCleanup {
		for k, df := range s.files {
			if df.refs == 0 {
				df.close()
				delete(s.files, k)
			}
		}
	}
	f, err := s.fs.OpenReadWrite(s.filePath(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("objstore: open data file %016x: %w", id, err)
	}
	df := &dataFile{f: f, refs: 1, direct: -1}
	s.files[id] = df
	return df, nil
}

func (s *Store) releaseFile(df *dataFile) {
	if df == nil {
		return
	}
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	df.refs--
	if df.dead && df.refs == 0 {
		df.close()
	}
}

// dropFile forgets a data file's handle and has the file removed (see
// remover).
func (s *Store) dropFile(id uint64) {
	s.filesMu.Lock()
	if df, ok := s.files[id]; ok {
		delete(s.files, id)
		df.dead = true
		if df.refs == 0 {
			df.close()
		}
	}
	s.filesMu.Unlock()
	s.rm.remove(s.fs, s.filePath(id))
	if s.rm == nil {
		s.spaceFreed()
	}
}

func (s *Store) allocID() (uint64, error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	if s.nextID >= s.idHigh {
		hw := s.idHigh + idBatch
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], hw)
		batch := s.db.NewBatch()
		batch.Set(keyIDHigh, b[:], nil)
		err := s.commit(batch)
		batch.Close()
		if err != nil {
			return 0, err
		}
		s.idHigh = hw
	}
	s.nextID++
	return s.nextID, nil
}

// fail stops the store: every later Apply fails, and so does the commit
// log (a writer waiting there for a checkpoint would wait forever).
func (s *Store) fail(err error) {
	s.failMu.Lock()
	if s.failed == nil {
		s.failed = err
	}
	s.failMu.Unlock()
	if s.log != nil {
		s.log.abort(err)
	}
}

func (s *Store) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// checkSpace refuses a write that would eat into the reserve. Free space is
// sampled at most every 100 ms and debited by what we admit in between.
// Every unlink of a data file makes it sample again, and before refusing it
// waits for the unlinks under way (remover): space a delete freed is never
// withheld from the writer after it.
func (s *Store) checkSpace(need int64, deleteOnly bool) error {
	if s.opts.ReserveBytes < 0 {
		return nil
	}
	err := s.trySpace(need, deleteOnly)
	if err != nil && s.rm.busy() {
		s.rm.drain()
		err = s.trySpace(need, deleteOnly)
	}
	return err
}

// spaceFreed makes the next checkSpace sample free space again: a data
// file was unlinked.
func (s *Store) spaceFreed() {
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	for i := range s.space {
		s.space[i].at = time.Time{}
	}
}

// trySpace is one check of checkSpace.
func (s *Store) trySpace(need int64, deleteOnly bool) error {
	reserve := s.opts.ReserveBytes
	if deleteOnly {
		reserve = 0
	}
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	now := time.Now()
	for i, dir := range []string{s.opts.Dir, s.opts.MetaDir} {
		e := s.sampleSpace(i, dir, now)
		if !e.known {
			continue
		}
		if e.free-need < reserve {
			return fmt.Errorf("objstore: osd disk full: %d bytes free on %s, need %d, reserve %d: %w", e.free, dir, need, reserve, ErrNoSpace)
		}
	}
	for i := range s.space {
		s.space[i].free -= need
	}
	return nil
}

// sampleSpace returns what is known of the free space of dir (the i-th of
// Dir and MetaDir), sampled again if the last sample is too old. The caller
// holds spaceMu.
func (s *Store) sampleSpace(i int, dir string, now time.Time) *spaceEntry {
	e := &s.space[i]
	if now.Sub(e.at) > spaceCacheValidity {
		du, err := s.fs.GetDiskUsage(dir)
		e.at = now
		e.known = err == nil
		e.free, e.total = int64(du.AvailBytes), int64(du.TotalBytes)
	}
	return e
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func shardOf(coll, name string) int {
	h := fnv.New32a()
	h.Write([]byte(coll))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int(h.Sum32() % nShards)
}

func checkName(coll, name string) error {
	if len(coll) == 0 || len(coll) > MaxNameLen || len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("objstore: name %q/%q: length must be 1..%d: %w", coll, name, MaxNameLen, ErrInvalid)
	}
	return nil
}

func notFound(coll, name string) error {
	return fmt.Errorf("objstore: object %q/%q: %w", coll, name, ErrNotFound)
}

// getIndexed is get for an object record or checksum chunk, through the
// index cache; the caller holds the object's shard lock (see indexCache).
func (s *Store) getIndexed(key []byte) ([]byte, error) {
	if v, ok := s.idx.get(key); ok {
		return v, nil
	}
	v, err := s.get(key)
	if err == nil {
		s.idx.fill(key, v)
	}
	return v, err
}

// loadRec reads an object record; caller holds the object's shard lock.
func (s *Store) loadRec(coll, name string) (objRec, bool, error) {
	key := objKey(coll, name)
	if f := s.filter.Load(); f != nil && !f.mayContain(key) {
		s.filterSkips.Add(1)
		return objRec{}, false, nil
	}
	v, err := s.getIndexed(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return objRec{}, false, nil
	}
	if err != nil {
		return objRec{}, false, err
	}
	r, err := decodeObjRec(v)
	if err != nil {
		return objRec{}, false, &CorruptionError{Coll: coll, Name: name, Detail: err.Error()}
	}
	return r, true, nil
}

func (s *Store) rlock(coll, name string) func() {
	l := &s.locks[shardOf(coll, name)]
	l.RLock()
	return l.RUnlock
}

// Read returns up to length bytes at off (length 0 = to the end). Every block
// returned is checksum-verified.
func (s *Store) Read(coll, name string, off, length uint64) ([]byte, error) {
	data, _, err := s.ReadInfo(coll, name, off, length)
	return data, err
}

// ReadInfo is Read that also returns the object's Info, from the same
// lookup of its record (a read of a small object is then one index lookup).
// It reads past the read cache: scrubs use it to check the disk.
func (s *Store) ReadInfo(coll, name string, off, length uint64) ([]byte, Info, error) {
	data, info, _, _, err := s.read(coll, name, off, length, false)
	return data, info, err
}

// ReadShared is ReadInfo for a client's read: a large read at a block
// boundary is answered from the store's read cache if it holds it, and
// fills the cache if not (readcache.go). data and sums are the caller's to
// read, not to modify, until it calls release (never nil), once. sums, for
// a large read at a block boundary, are the crc32c of each whole 4 KiB
// block of data, as checked: a sender can checksum its frame without
// reading the data again.
func (s *Store) ReadShared(coll, name string, off, length uint64) (data []byte, info Info, sums []uint32, release func(), err error) {
	return s.read(coll, name, off, length, true)
}

func (s *Store) read(coll, name string, off, length uint64, cached bool) (data []byte, info Info, sums []uint32, release func(), err error) {
	if err := checkName(coll, name); err != nil {
		return nil, Info{}, nil, nil, err
	}
	s.rc.busy()
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return nil, Info{}, nil, nil, err
	}
	if !ok {
		return nil, Info{}, nil, nil, notFound(coll, name)
	}
	info = Info{Size: r.size, Mtime: time.Unix(0, r.mtime)}
	end := r.size
	if length > 0 && off < r.size && length < r.size-off {
		end = off + length
	}
	// Only reads the cache takes look at it: a small read costs no lock.
	if cached && s.rc != nil && !r.inline && off < r.size && off%blockSize == 0 && readClass(int(end-off)) >= 0 {
		k := readKey{fileID: r.fileID, off: off, end: end}
		if e := s.rc.get(k); e != nil {
			return e.data, info, e.sums, e.release, nil
		}
		fb, lb := off/blockSize, (end-1)/blockSize
		n := int(lb-fb+1) * blockSize
		if e := s.rc.alloc(k, n); e != nil {
			sums := make([]uint32, lb-fb+1)
			if err := s.readBlocks(coll, name, r.fileID, fb, lb, e.buf[:n], sums); err != nil {
				e.release()
				return nil, Info{}, nil, nil, err
			}
			e.data = e.buf[: end-off : end-off]
			sums = sums[:len(e.data)/blockSize]
			s.rc.add(k, e, sums)
			return e.data, info, sums, e.release, nil
		}
	}
	data, pooled, sums, err := s.readRec(coll, name, &r, off, length)
	if err != nil {
		return nil, Info{}, nil, nil, err
	}
	if pooled == nil {
		return data, info, sums, noRelease, nil // small reads: no closure to allocate
	}
	return data, info, sums, func() { bufpool.Put(pooled) }, nil
}

// noRelease is the release of a read whose buffer nothing takes back.
var noRelease = func() {}

// readRec reads [off, off+length) of the object whose record is r, into a
// bufpool buffer (returned as pooled) if the read is large, with its blocks'
// checksums if it starts at a block (see ReadPooled).
func (s *Store) readRec(coll, name string, r *objRec, off, length uint64) (data, pooled []byte, sums []uint32, err error) {
	if off >= r.size {
		return []byte{}, nil, nil, nil
	}
	end := r.size
	if length > 0 && length < r.size-off {
		end = off + length
	}
	fb, lb := off/blockSize, (end-1)/blockSize
	if r.inline {
		for b := fb; b <= lb; b++ {
			if inlineBlockCRC(r.data, b) != r.crcs[b] {
				return nil, nil, nil, &CorruptionError{Coll: coll, Name: name, Offset: b * blockSize, Detail: "inline block checksum mismatch"}
			}
		}
		return r.data[off:end:end], nil, nil, nil
	}
	var buf []byte
	if n := (lb - fb + 1) * blockSize; n >= directReadMin {
		// Aligned, so the read can bypass the page cache.
		buf = bufpool.Get(int(n))
		pooled = buf
		if off%blockSize == 0 {
			sums = make([]uint32, lb-fb+1)
		}
	} else {
		buf = make([]byte, n)
	}
	if err := s.readBlocks(coll, name, r.fileID, fb, lb, buf, sums); err != nil {
		bufpool.Put(pooled)
		return nil, nil, nil, err
	}
	base := fb * blockSize
	data = buf[off-base : end-base : end-base]
	if sums != nil {
		sums = sums[:len(data)/blockSize] // whole blocks of data only
	}
	return data, pooled, sums, nil
}

// readBlocks fills buf with verified blocks fb..lb of a data file, zeros
// for blocks never written, and sums (if not nil) with their checksums.
func (s *Store) readBlocks(coll, name string, fileID, fb, lb uint64, buf []byte, sums []uint32) error {
	chunks, err := s.loadChunks(coll, name, fileID, fb/chunkBlocks, lb/chunkBlocks)
	if err != nil {
		return err
	}
	present := func(b uint64) (uint32, bool) {
		c := chunks[b/chunkBlocks]
		if c == nil || !c.present(b%chunkBlocks) {
			return 0, false
		}
		return c.crc[b%chunkBlocks], true
	}
	inB := func(b uint64) bool { return chunks[b/chunkBlocks].inB(b % chunkBlocks) }
	var df *dataFile
	defer func() { s.releaseFile(df) }()
	for b := fb; b <= lb; {
		if _, ok := present(b); !ok {
			clear(buf[(b-fb)*blockSize : (b-fb+1)*blockSize]) // buf may be recycled
			if sums != nil {
				sums[b-fb] = zeroBlockCRC
			}
			b++
			continue
		}
		// One file read per run of present blocks in the same slot.
		e := b
		for e+1 <= lb {
			if _, ok := present(e + 1); !ok || inB(e+1) != inB(b) {
				break
			}
			e++
		}
		if df == nil {
			if df, err = s.openFile(fileID); err != nil {
				return err
			}
		}
		seg := buf[(b-fb)*blockSize : (e-fb+1)*blockSize]
		n, err := s.readSegment(df, fileID, seg, s.phys(b, inB(b)))
		if err != nil && err != io.EOF {
			return fmt.Errorf("objstore: read %q/%q: %w", coll, name, err)
		}
		clear(seg[n:])
		for x := b; x <= e; x++ {
			want, _ := present(x)
			blk := buf[(x-fb)*blockSize : (x-fb+1)*blockSize]
			if blockCRC(blk) != want {
				return &CorruptionError{Coll: coll, Name: name, Offset: x * blockSize, Detail: "data block checksum mismatch"}
			}
			if sums != nil {
				sums[x-fb] = want
			}
		}
		b = e + 1
	}
	return nil
}

// loadChunks returns the checksum chunks first..last of a data file that
// exist. One chunk (every read up to 256 KiB that is aligned) is a point
// lookup, much cheaper than an iterator.
func (s *Store) loadChunks(coll, name string, fileID, first, last uint64) (map[uint64]*chunk, error) {
	chunks := map[uint64]*chunk{}
	bad := &CorruptionError{Coll: coll, Name: name, Detail: "bad checksum chunk"}
	if first == last {
		v, err := s.getIndexed(csumKey(fileID, first))
		if errors.Is(err, pebble.ErrNotFound) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		c, err := decodeChunk(v)
		if err != nil {
			return nil, bad
		}
		chunks[first] = c
		return chunks, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: csumKey(fileID, first),
		UpperBound: csumKey(fileID, last+1),
	})
	if err != nil {
		return nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		c, err := decodeChunk(it.Value())
		if err != nil || len(k) != 13 {
			it.Close()
			return nil, bad
		}
		chunks[uint64(binary.BigEndian.Uint32(k[9:]))] = c
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return chunks, nil
}

// phys is the file offset of block b in slot A or B.
func (s *Store) phys(b uint64, slotB bool) uint64 {
	if slotB {
		return s.slotBase + b*blockSize
	}
	return b * blockSize
}

// Stat returns the object's size and modification time.
func (s *Store) Stat(coll, name string) (Info, error) {
	if err := checkName(coll, name); err != nil {
		return Info{}, err
	}
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return Info{}, err
	}
	if !ok {
		return Info{}, notFound(coll, name)
	}
	return Info{Size: r.size, Mtime: time.Unix(0, r.mtime)}, nil
}

// DataPath returns the object's bulk data file, if it has one.
func (s *Store) DataPath(coll, name string) (string, bool) {
	if checkName(coll, name) != nil {
		return "", false
	}
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil || !ok || r.inline {
		return "", false
	}
	return s.filePath(r.fileID), true
}

func (s *Store) objID(coll, name string) (uint64, error) {
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, notFound(coll, name)
	}
	return r.id, nil
}

// GetXattr returns one extended attribute.
func (s *Store) GetXattr(coll, name, key string) ([]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	v, err := s.get(idKey(tagXattr, id, []byte(key)))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("objstore: xattr %q of %q/%q: %w", key, coll, name, ErrNotFound)
	}
	return v, err
}

// Xattrs returns all extended attributes of the object.
func (s *Store) Xattrs(coll, name string) (map[string][]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	_, err = s.scan(idKey(tagXattr, id, nil), idKey(tagXattr, id+1, nil), 0, func(k, v []byte) {
		out[string(k[9:])] = bytes.Clone(v)
	})
	return out, err
}

// scan calls fn for keys in [lo, hi) and reports whether more than limit
// (if > 0) keys exist.
func (s *Store) scan(lo, hi []byte, limit int, fn func(k, v []byte)) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return false, err
	}
	n := 0
	more := false
	for it.First(); it.Valid(); it.Next() {
		if limit > 0 && n == limit {
			more = true
			break
		}
		fn(it.Key(), it.Value())
		n++
	}
	return more, it.Close()
}

// OmapGet returns one omap value.
func (s *Store) OmapGet(coll, name string, key []byte) ([]byte, error) {
	if err := checkName(coll, name); err != nil {
		return nil, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, err
	}
	v, err := s.get(idKey(tagOmap, id, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("objstore: omap key %q of %q/%q: %w", key, coll, name, ErrNotFound)
	}
	return v, err
}

// OmapList returns omap entries in [start, end) (nil end = no end), sorted,
// at most limit of them (limit <= 0 = all), and whether more remain.
func (s *Store) OmapList(coll, name string, start, end []byte, limit int) ([]KV, bool, error) {
	if err := checkName(coll, name); err != nil {
		return nil, false, err
	}
	defer s.rlock(coll, name)()
	id, err := s.objID(coll, name)
	if err != nil {
		return nil, false, err
	}
	hi := idKey(tagOmap, id+1, nil)
	if end != nil {
		hi = idKey(tagOmap, id, end)
	}
	lo := idKey(tagOmap, id, start)
	var kvs []KV
	if bytes.Compare(lo, hi) >= 0 {
		return kvs, false, nil
	}
	more, err := s.scan(lo, hi, limit, func(k, v []byte) {
		kvs = append(kvs, KV{Key: bytes.Clone(k[9:]), Value: bytes.Clone(v)})
	})
	return kvs, more, err
}

// List returns object names in coll greater than after, sorted, at most limit
// (limit <= 0 = all), and whether more remain.
func (s *Store) List(coll string, after string, limit int) ([]string, bool, error) {
	if len(coll) == 0 || len(coll) > MaxNameLen {
		return nil, false, fmt.Errorf("objstore: collection %q: %w", coll, ErrInvalid)
	}
	prefix := collPrefix(coll)
	lo := prefix
	if after != "" {
		lo = appendEsc(bytes.Clone(prefix), after)
		lo = append(lo, 0) // the successor of after's key
	}
	var names []string
	var bad bool
	more, err := s.scan(lo, collEnd(coll), limit, func(k, _ []byte) {
		n, rest, ok := unesc(k[len(prefix):])
		if !ok || len(rest) != 0 {
			bad = true
			return
		}
		names = append(names, n)
	})
	if err == nil && bad {
		err = &CorruptionError{Coll: coll, Detail: "bad object key"}
	}
	return names, more, err
}

// Collections returns every collection that holds at least one object.
func (s *Store) Collections() ([]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tagObject}, UpperBound: []byte{tagObject + 1}})
	if err != nil {
		return nil, err
	}
	var out []string
	for valid := it.First(); valid; {
		c, _, ok := unesc(it.Key()[1:])
		if !ok {
			it.Close()
			return nil, &CorruptionError{Detail: "bad object key"}
		}
		out = append(out, c)
		valid = it.SeekGE(collEnd(c))
	}
	return out, it.Close()
}

// Usage reports object counts and free space.
func (s *Store) Usage() (Usage, error) {
	u := Usage{Objects: s.objects.Load(), DataBytes: s.dataBytes.Load(), ReserveBytes: max(s.opts.ReserveBytes, 0)}
	if du, err := s.fs.GetDiskUsage(s.opts.Dir); err == nil {
		u.TotalBytes, u.FreeBytes = int64(du.TotalBytes), int64(du.AvailBytes)
	} else if !errors.Is(err, vfs.ErrUnsupported) {
		return u, err
	}
	if du, err := s.fs.GetDiskUsage(s.opts.MetaDir); err == nil {
		u.MetaTotalBytes, u.MetaFreeBytes = int64(du.TotalBytes), int64(du.AvailBytes)
	} else if !errors.Is(err, vfs.ErrUnsupported) {
		return u, err
	}
	return u, nil
}

// lockObjects write-locks the shards of every object in t in a global order.
func (s *Store) lockObjects(t *Txn) func() {
	idx := make([]int, 0, len(t.ops))
	for i := range t.ops {
		idx = append(idx, shardOf(t.ops[i].coll, t.ops[i].name))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.locks[i].Lock()
	}
	return func() {
		for _, i := range idx {
			s.locks[i].Unlock()
		}
	}
}

// Tunables; tests shorten them to exercise checkpoints under load.
var (
	checkpointInterval = 500 * time.Millisecond
	journalKickBytes   = int64(16 << 20)
	spaceCacheValidity = 100 * time.Millisecond
)
