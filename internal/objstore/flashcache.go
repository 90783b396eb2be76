package objstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// flashCache is a read cache on the meta device (flash) for data blocks the
// store read from its data disk, as ZFS's L2ARC sits under the ARC: when an
// OSD's hot data outgrows memory, a block read from the disk once is read
// from flash the next time, at flash latency instead of a seek. It holds
// only copies: the data file stays the truth, every block read from flash
// is checked against the checksum the index holds, and a block that fails
// (or a flash error) is read from the disk as if it had not been cached.
//
// Layout: one preallocated file, Options.FlashCacheBytes long, of 4 KiB
// slots used as a ring: a new block takes the slot after the last one
// filled, and the block that was there leaves the cache (first in, first
// out: no bookkeeping on hits, and flash written sequentially). The index
// of what is where lives in memory (a map entry and a slot record per
// cached block); a clean close saves it for the next Open (flashindex.go),
// and the cache starts empty after a crash.
//
// What is admitted: blocks of reads of flashAdmitMax or less that went to
// the data disk. Larger reads run at the disk's bandwidth already, and a
// sequential pass (a backup, a scrub) would wash out the hot set. Scrubs
// read past the cache, so they check the disk.
//
// Filling is asynchronous: a reader hands the block to the cache's writer
// (a bounded queue; a fill that finds it full is dropped) and returns. The
// slot is listed at once but serves reads only once its write is done.
//
// Invariant: a block the cache serves equals the current content of its
// file's block. Fills happen under the object's read lock and Apply drops
// the blocks its writes change (dropBlocks, dropFile) under the write lock,
// so no fill races a change of the same block. Every change of a slot's
// owner bumps its generation: a read takes the generation before reading
// the slot and checks it after (a seqlock), so a slot the ring gives to
// another block under a reader is a miss, never that block's bytes.
type flashCache struct {
	f     *os.File
	slots uint32

	mu     sync.Mutex
	files  map[uint64]map[uint64]uint32 // data file → block → slot
	owner  []slotOwner                  // by slot
	head   uint32                       // the next slot to fill
	dead   bool                         // after an IO error: every lookup misses
	failed string                       // what turned it off (dead), for the operator
	closed bool                         // by close: no more fills

	fills   chan fill
	done    chan struct{}
	scratch sync.Pool // *[]byte: aligned blocks for reads

	hits, misses, filled, dropped, errs atomic.Int64
	queued                              atomic.Int64 // fills handed to the writer, not yet written

	restored   int64  // blocks the saved index brought back (set at Open)
	restoreErr string // why a saved index was not used
}

// slotOwner says which block a slot holds; gen changes with every owner.
type slotOwner struct {
	fileID, block uint64
	gen           uint32
	used, ready   bool
}

// fill is a block waiting for the writer: data in an aligned buffer.
type fill struct {
	slot, gen uint32
	data      []byte
}

const (
	flashAdmitMax   = 256 << 10 // reads up to this size fill the cache
	flashFillQueue  = 4096      // fills waiting for the writer (16 MiB)
	flashWriteBatch = 256       // fills the writer takes at once
	flashCacheFile  = "flashcache"
)

// FlashCacheStats is the flash read cache's state and totals since Open.
type FlashCacheStats struct {
	Bytes   int64 // the cache's size (0: none)
	Used    int64 // bytes of blocks it holds
	Hits    int64 // blocks read from flash
	Misses  int64 // blocks looked up and read from the data disk
	Filled  int64 // blocks written to flash
	Dropped int64 // fills dropped with the writer's queue full
	Errors  int64 // flash IO errors and blocks that failed their checksum
	// Failed says why the cache turned itself off ("": it is on): the
	// first flash IO error. The data disk serves every read since.
	Failed string
	// Restored is how many blocks the index saved by the last clean close
	// brought back at Open (flashindex.go); RestoreErr why a saved index
	// was not used ("": none was found, or it was).
	Restored   int64
	RestoreErr string
}

// openFlashCache creates (or reuses) the cache file of size bytes in dir.
func openFlashCache(dir string, size int64) (*flashCache, error) {
	slots := size / blockSize
	if slots < 1 || slots > 1<<32-1 {
		return nil, fmt.Errorf("objstore: a flash read cache of %d bytes: want 4 KiB to 16 TiB", size)
	}
	path := filepath.Join(dir, flashCacheFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if err != nil {
		return nil, fmt.Errorf("objstore: flash read cache %s: %w (the --meta-dir file system must support O_DIRECT)", path, err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, slots*blockSize); err != nil {
		f.Close()
		return nil, fmt.Errorf("objstore: flash read cache %s: reserving %d bytes: %w (make it smaller or free space on the meta device)", path, slots*blockSize, err)
	}
	c := &flashCache{
		f: f, slots: uint32(slots),
		files: map[uint64]map[uint64]uint32{},
		owner: make([]slotOwner, slots),
		fills: make(chan fill, flashFillQueue),
		done:  make(chan struct{}),
	}
	c.scratch.New = func() any { b := bufpool.Aligned(blockSize); return &b }
	go c.writer()
	return c, nil
}

// flashBeforeRead, if set, runs between a read's lookup and its read of
// the slot (tests: the ring reusing the slot there).
var flashBeforeRead func()

// read fills dst with block b of file fileID if the cache holds it, checked
// against want.
func (c *flashCache) read(fileID, b uint64, dst []byte, want uint32) bool {
	slot, gen, ok := c.lookup(fileID, b)
	if !ok {
		c.misses.Add(1)
		return false
	}
	p := c.scratch.Get().(*[]byte)
	defer c.scratch.Put(p)
	if flashBeforeRead != nil {
		flashBeforeRead()
	}
	n, err := unix.Pread(int(c.f.Fd()), *p, int64(slot)*blockSize)
	if err == nil && n != blockSize {
		err = fmt.Errorf("short read of %d bytes", n)
	}
	if err != nil {
		c.fail("read", err)
		return false
	}
	if !c.still(slot, gen) {
		c.misses.Add(1)
		return false
	}
	if blockCRC(*p) != want {
		c.errs.Add(1)
		c.drop(fileID, b)
		return false
	}
	copy(dst, *p)
	c.hits.Add(1)
	return true
}

func (c *flashCache) lookup(fileID, b uint64) (slot, gen uint32, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return 0, 0, false
	}
	slot, ok = c.files[fileID][b]
	if !ok || !c.owner[slot].ready {
		return 0, 0, false
	}
	return slot, c.owner[slot].gen, true
}

// still reports whether slot has kept the owner of generation gen.
func (c *flashCache) still(slot, gen uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.dead && c.owner[slot].gen == gen
}

// admit hands block b of file fileID (data, as read and checked) to the
// writer, unless the cache has it already or the writer is behind.
func (c *flashCache) admit(fileID, b uint64, data []byte) {
	buf := bufpool.Aligned(blockSize)
	copy(buf, data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.closed {
		return
	}
	if _, ok := c.files[fileID][b]; ok {
		return
	}
	slot := c.head
	c.evict(slot)
	o := &c.owner[slot]
	o.gen++
	o.fileID, o.block, o.used, o.ready = fileID, b, true, false
	c.queued.Add(1)
	select {
	case c.fills <- fill{slot: slot, gen: o.gen, data: buf}:
	default:
		c.queued.Add(-1)
		c.dropped.Add(1)
		o.used = false
		return
	}
	c.head = (c.head + 1) % c.slots
	m := c.files[fileID]
	if m == nil {
		m = map[uint64]uint32{}
		c.files[fileID] = m
	}
	m[b] = slot
}

// evict takes slot's block out of the index (c.mu held).
func (c *flashCache) evict(slot uint32) {
	o := &c.owner[slot]
	if !o.used {
		return
	}
	if m := c.files[o.fileID]; m != nil && m[o.block] == slot {
		delete(m, o.block)
		if len(m) == 0 {
			delete(c.files, o.fileID)
		}
	}
	o.gen++
	o.used, o.ready = false, false
}

// drop takes block b of file fileID out of the cache.
func (c *flashCache) drop(fileID, b uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slot, ok := c.files[fileID][b]; ok {
		c.evict(slot)
	}
}

// dropBlocks takes blocks fb..lb of file fileID out of the cache.
func (c *flashCache) dropBlocks(fileID, fb, lb uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.files[fileID]
	if m == nil {
		return
	}
	if lb-fb >= uint64(len(m)) { // fewer entries than blocks: walk the entries
		for b, slot := range m {
			if b >= fb && b <= lb {
				c.evict(slot)
			}
		}
		return
	}
	for b := fb; b <= lb; b++ {
		if slot, ok := m[b]; ok {
			c.evict(slot)
		}
	}
}

// dropFile takes every block of file fileID out of the cache.
func (c *flashCache) dropFile(fileID uint64) {
	c.dropBlocks(fileID, 0, ^uint64(0))
}

// writer writes queued fills to their slots, consecutive slots in one
// write, and lists them as ready.
func (c *flashCache) writer() {
	defer close(c.done)
	batch := make([]fill, 0, flashWriteBatch)
	for f := range c.fills {
		batch = append(batch[:0], f)
	more:
		for len(batch) < flashWriteBatch {
			select {
			case f, ok := <-c.fills:
				if !ok {
					break more
				}
				batch = append(batch, f)
			default:
				break more
			}
		}
		c.writeBatch(batch)
		c.queued.Add(-int64(len(batch)))
	}
}

func (c *flashCache) writeBatch(batch []fill) {
	slices.SortStableFunc(batch, func(a, b fill) int { return int(a.slot) - int(b.slot) })
	iov := make([][]byte, 0, len(batch))
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].slot == batch[j-1].slot+1 {
			j++
		}
		iov = iov[:0]
		for _, f := range batch[i:j] {
			iov = append(iov, f.data)
		}
		n, err := unix.Pwritev(int(c.f.Fd()), iov, int64(batch[i].slot)*blockSize)
		if err == nil && n != (j-i)*blockSize {
			err = errors.New("short write")
		}
		if err != nil {
			c.fail("write", err)
			return
		}
		c.mu.Lock()
		for _, f := range batch[i:j] {
			if o := &c.owner[f.slot]; o.gen == f.gen {
				o.ready = true
			}
		}
		c.mu.Unlock()
		c.filled.Add(int64(j - i))
		i = j
	}
}

// fail stops the cache after a flash IO error (what: read or write): the
// data disk serves every read from now on.
func (c *flashCache) fail(what string, err error) {
	c.errs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dead {
		c.failed = fmt.Sprintf("%s of %s: %v", what, c.f.Name(), err)
	}
	c.dead = true
	clear(c.files)
}

// close stops the writer (fills in its queue are written first) and closes
// the file; the file stays for the next Open to reuse. With saveDir, a
// cache still on saves its index there for the next Open (flashindex.go);
// failing to is no error of the store's: the next Open starts empty.
func (c *flashCache) close(saveDir string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.closed = true
	close(c.fills)
	dead := c.dead
	c.mu.Unlock()
	<-c.done
	if saveDir != "" && !dead {
		c.saveIndex(saveDir)
	}
	c.f.Close()
}

func (c *flashCache) stats() FlashCacheStats {
	if c == nil {
		return FlashCacheStats{}
	}
	c.mu.Lock()
	used := int64(0)
	for _, m := range c.files {
		used += int64(len(m))
	}
	failed := c.failed
	c.mu.Unlock()
	return FlashCacheStats{
		Bytes: int64(c.slots) * blockSize, Used: used * blockSize,
		Hits: c.hits.Load(), Misses: c.misses.Load(), Filled: c.filled.Load(),
		Dropped: c.dropped.Load(), Errors: c.errs.Load(), Failed: failed,
		Restored: c.restored, RestoreErr: c.restoreErr,
	}
}

// FlashCache returns the flash read cache's state (zero without one).
func (s *Store) FlashCache() FlashCacheStats { return s.fc.stats() }
