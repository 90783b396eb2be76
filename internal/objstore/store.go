package objstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
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
	// WritebackBytes sizes the write-back area on the meta device
	// (writeback.go): small overwrites stay there, durable, until the
	// destager moves them to the data disk. 0: none, deferred writes go
	// through the journal to the data disk within a checkpoint.
	WritebackBytes int64
	// FlashCacheBytes sizes a read cache on the meta device for data
	// blocks read from the data disk (flashcache.go). 0: none. Only on the
	// real file system.
	FlashCacheBytes int64
	// SequentialCutoff is how many bytes a run of writes that each start
	// where the last one to the file ended may put in the write-back
	// area; later writes of the run bypass it (seqstream.go). 0:
	// DefaultSequentialCutoff; negative: no bypass.
	SequentialCutoff int64
	// StallTimeout is how long a commit-log write and sync, or a flush of
	// the index, may stay outstanding on the meta device before the store
	// fails as if it had returned an error (stall.go). 0:
	// DefaultStallTimeout; negative: never.
	StallTimeout time.Duration
}

// DefaultSequentialCutoff suits data disks that seek (hdd): a megabyte run
// is already written at their bandwidth.
const DefaultSequentialCutoff = 1 << 20

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
	rc   *readCache  // nil: none
	fc   *flashCache // on the meta device; nil: none
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
	// fsSyncs counts the checkpoints that synced the whole filesystem;
	// fileSyncs the data files checkpoints synced one by one.
	fsSyncs, fileSyncs atomic.Int64

	locks [nShards]sync.RWMutex

	idMu           sync.Mutex
	nextID, idHigh uint64

	jseq atomic.Uint64

	filesMu sync.Mutex
	files   map[uint64]*dataFile

	spaceMu sync.Mutex
	space   [2]spaceEntry

	pace     *pacer     // holds writers back while checkpoints fall behind (pacer.go)
	wb       *writeback // the write-back area (writeback.go); never nil
	ckMu     sync.Mutex
	applied  []appliedJ
	ckBytes  int64
	pending  map[uint64]int // fileID -> journal records not yet checkpointed
	ckRunMu  sync.Mutex     // one checkpoint at a time
	ckKick   chan struct{}
	ckDrops  sync.WaitGroup // checkpoints committing the deletion of their records
	ckSynced uint64         // checkpoints that synced records (under ckRunMu)
	// ckDropped is the last checkpoint whose records' deletion committed:
	// they commit in order (dropJournal).
	ckDropMu   sync.Mutex
	ckDropCond *sync.Cond
	ckDropped  uint64
	closing    chan struct{}
	ckDone     chan struct{}
	closeOnce  sync.Once

	rm *remover // unlinks dropped data files after their commit

	objects, dataBytes atomic.Int64

	failMu   sync.Mutex
	failed   error
	failedCh chan struct{} // closed with the first failure
	stalled  atomic.Bool   // the failure is the meta device's stall (stall.go)

	idx *indexCache // object records and checksum chunks recently looked up

	indexDamage atomic.Pointer[IndexCorruptionError] // first damage pebble reported (indexcheck.go)

	filter      atomic.Pointer[objFilter] // nil: disabled (see objFilter)
	filterSkips atomic.Int64              // lookups it answered (for tests)

	replayed    int          // journal records replayed by Open (for tests and logs)
	wbLoaded    int          // write-back blocks Open found (for tests)
	logReplayed int          // commit-log batches replayed by Open (for tests)
	cowWrites   atomic.Int64 // copy-on-write overwrites (for tests)
	inPlace     atomic.Int64 // blocks written from the caller's buffer (for tests)
	presummed   atomic.Int64 // of those, blocks whose checksum came with them (for tests)
}

// commit makes a batch durable (in the commit log) and visible.
func (s *Store) commit(b *pebble.Batch) error {
	return s.log.commit(b)
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
		close(s.failedCh)
	}
	s.failMu.Unlock()
	if s.log != nil {
		s.log.abort(err)
	}
	if s.pace != nil {
		s.pace.stop() // no checkpoint will lower its backlog now
	}
	if s.wb != nil {
		s.wb.pace.stop() // nor will the destager lower the area's
	}
}

// Failed is closed when the store fails (a write of its commit log, a
// checkpoint or a deferred write failed, or its meta device left a commit
// unanswered for Options.StallTimeout): it takes no more writes, and what
// reached its disk is replayed when it is opened again. Its owner stops
// serving (an OSD stops, so that its PGs go on without it); Err says why.
func (s *Store) Failed() <-chan struct{} { return s.failedCh }

// Err is the store's failure, nil while it has none.
func (s *Store) Err() error { return s.failure() }

func (s *Store) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

func shardOf(coll, name string) int {
	h := fnv.New32a()
	h.Write([]byte(coll))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int(h.Sum32() % nShards)
}

func (s *Store) rlock(coll, name string) func() {
	l := &s.locks[shardOf(coll, name)]
	l.RLock()
	return l.RUnlock
}

// lockObjects write-locks the shards of every object in t in a global order.
func (s *Store) lockObjects(t *Txn) func() {
	idx := make([]int, 0, len(t.ops))
	for i := range t.ops {
		o := &t.ops[i]
		idx = append(idx, shardOf(o.coll, o.name))
		if o.typ == opRename {
			idx = append(idx, shardOf(o.coll, string(o.key)))
		}
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

func checkName(coll, name string) error {
	if len(coll) == 0 || len(coll) > MaxNameLen || len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("objstore: name %q/%q: length must be 1..%d: %w", coll, name, MaxNameLen, ErrInvalid)
	}
	return nil
}

func notFound(coll, name string) error {
	return fmt.Errorf("objstore: object %q/%q: %w", coll, name, ErrNotFound)
}
