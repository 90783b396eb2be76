package objstore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/bits"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readCache keeps the data of recent large reads (a whole 4 MiB object, a
// 1 MiB stretch of a volume) as they were checked, in memory of its own, so
// that a read asked for again is answered from there: no disk read or
// page-cache copy, no checksum pass (the block checksums are kept with the
// data), and the reply is sent from the cached bytes as they lie. Under
// 1 MiB volume reads from the page cache, the copy out of it and the
// checksums were the largest parts of an OSD's CPU; large reads that miss the page cache go
// to the disk (directio.go), whatever the machine's free memory.
//
// An entry is the answer to one read: the same data file, offset and end.
// Clients repeat their reads in the same shape (an object read whole, a
// volume in the gateway's request sizes), and an entry then needs no
// assembling from pieces: the reply is one slice of it.
//
// The memory is mapped outside the Go heap, in power-of-two buffers from
// readCacheMin to readCacheMax bytes that are recycled, and bounded by
// maxBytes (buffers still being sent after their entry left count too):
// on the heap, a gigabyte of cache would let the collector (at GOGC=400)
// grow the process by four more before it ran.
//
// Reserving (an OSD's store does). Memory a process touches for the first
// time costs the kernel a zeroing of every page, and a VM whose host backs
// guest memory lazily a trip through the hypervisor too: that can cost more
// CPU than reading the same data from the disk. Filling
// a gigabyte as reads came made the first random pass over 4 MiB objects
// slower than reading them from the disk. A reserving cache maps its
// buffers up to the bound, every page faulted in, whenever its store has
// been idle for a moment, on a thread of idle priority, and keeps them for
// the life of the process: its memory is taken once, predictably, soon
// after the start, and never on the read path or in competition with the
// store's own work (done alongside 4 MiB writes, it slowed them). Under
// unbroken load the cache fills as reads come, as
// without. A read's first miss fills the cache whenever a buffer is free,
// at no cost (the read goes into that buffer instead of a pooled one), but
// never evicts for it, so a single pass fills empty room and leaves what is
// cached alone. Reserving stops while the machine has less than a quarter
// of its memory available.
//
// Invariant: every listed entry equals the current content of its file's
// range. It holds because entries are filled only by a reader holding the
// owning object's shard lock (a data file belongs to one object, and file
// IDs are never reused), and Apply drops every entry of each data file an
// object of its transaction had or has before it releases the objects'
// write locks, whatever the outcome. Scrubs read past the cache, so they
// check the disk.
type readCache struct {
	maxBytes int64

	mu     sync.Mutex
	m      map[readKey]*cachedRead
	byFile map[uint64][]*cachedRead
	lru    cachedRead // sentinel: lru.next is the newest entry, lru.prev the oldest
	mapped int64      // bytes of buffers, listed, in use or free
	free   [readCacheClasses][][]byte
	// freeBytes: bytes of the buffers in free; at most maxBytes/8 unless
	// the cache keeps its memory.
	freeBytes int64
	keep      bool // reserving: freed buffers stay mapped
	closed    bool // by close: reserving stops

	stopReserve chan struct{}  // closed by close
	reserving   sync.WaitGroup // the reserving goroutine
	ops         atomic.Uint64  // reads and transactions of the store (busy)
	counting    atomic.Bool    // while reserving: busy counts
	quiet       time.Duration  // reserveQuiet (tests shorten or lengthen it)
	// memory reports the machine's available and total memory; reserving
	// stops below a quarter available (tests replace it).
	memory func() (available, total int64, ok bool)

	// seen remembers reads that missed once (hashes of their keys,
	// direct-mapped): a read takes memory or evicts for the cache on its
	// second miss only, as the ARC keeps blocks seen twice; its first miss
	// fills only a buffer that is free already. A pass that reads
	// everything once (a backup, a scrub of a volume, a sequential
	// benchmark) then neither pushes out what is read again nor pays for
	// memory it would not use: memory a process touches for the first
	// time costs the kernel a zeroing of every page, and a fresh VM more
	// than memory it had used before.
	seen     []atomic.Uint64
	seenSeed maphash.Seed

	listed       atomic.Int64 // entries in m
	hits, misses atomic.Int64
}

// readKey names a read: [off, end) of a data file, off block-aligned.
type readKey struct{ fileID, off, end uint64 }

// cachedRead is the data of one read in a buffer of the cache's.
type cachedRead struct {
	key  readKey
	buf  []byte // the whole buffer, of a size class
	data []byte // buf[:end-off]
	sums []uint32
	// refs: one for the cache while the entry is listed, one for each
	// reader still using data. The buffer is recycled at zero.
	refs       atomic.Int32
	prev, next *cachedRead
	c          *readCache
}

const (
	readCacheMin     = directReadMin // smaller reads stay in the page cache
	readCacheMax     = 4 << 20
	readCacheClasses = 6 // 128 KiB .. 4 MiB
)

func newReadCache(maxBytes int64) *readCache {
	c := &readCache{maxBytes: maxBytes, m: map[readKey]*cachedRead{}, byFile: map[uint64][]*cachedRead{},
		seen: make([]atomic.Uint64, max(1024, maxBytes/readCacheMin)), seenSeed: maphash.MakeSeed(), memory: machineMemory, quiet: reserveQuiet}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// class is the size class of an n-byte read, or -1 if it is not cached.
func readClass(n int) int {
	if n < readCacheMin || n > readCacheMax {
		return -1
	}
	return bits.Len(uint(n-1)) - bits.Len(uint(readCacheMin-1))
}

// get returns the entry for k with a reference for the caller, or nil.
func (c *readCache) get(k readKey) *cachedRead {
	if c == nil || c.listed.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	e := c.m[k]
	if e != nil {
		e.refs.Add(1)
		c.unlink(e)
		c.pushFront(e)
	}
	c.mu.Unlock()
	if e == nil {
		c.misses.Add(1)
	} else {
		c.hits.Add(1)
	}
	return e
}

// secondMiss reports whether k missed before (and remembers that it did).
func (c *readCache) secondMiss(k readKey) bool {
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], k.fileID)
	binary.LittleEndian.PutUint64(b[8:], k.off)
	binary.LittleEndian.PutUint64(b[16:], k.end)
	h := maphash.Bytes(c.seenSeed, b[:])
	slot := &c.seen[(h>>32)%uint64(len(c.seen))]
	h |= 1 // 0 marks an empty slot
	if slot.Load() == h {
		return true
	}
	slot.Store(h)
	return false
}

// alloc returns an unlisted entry with a buffer for read k of n bytes and
// one reference (the caller's), or nil if the read is not cached: too small
// or large, its first miss with no buffer free, or no room (every buffer
// is being sent).
func (c *readCache) alloc(k readKey, n int) *cachedRead {
	cl := readClass(n)
	if c == nil || cl < 0 {
		return nil
	}
	second := c.secondMiss(k)
	size := int64(readCacheMin) << cl
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := c.takeFree(cl)
	for buf == nil {
		if !second {
			return nil // a first miss takes no memory it would have to fault in or free
		}
		if c.mapped+size <= c.maxBytes {
			b, err := mapBuffer(int(size), false)
			if err != nil {
				return nil
			}
			c.mapped += size
			buf = b
			break
		}
		// Over the bound: first give back a free buffer of another size,
		// then take the oldest entry's (its buffer comes free once no
		// reply is being sent from it).
		if c.unmapOne() {
			continue
		}
		if c.lru.prev == &c.lru {
			return nil // every buffer is being sent
		}
		c.evict(c.lru.prev)
		buf = c.takeFree(cl)
	}
	e := &cachedRead{buf: buf, data: buf[:n], c: c}
	e.refs.Store(1)
	return e
}

// takeFree returns a free buffer of class cl, cutting a larger one into
// pieces of that class if none is free, or nil. Called with mu held.
func (c *readCache) takeFree(cl int) []byte {
	size := readCacheMin << cl
	for j := cl; j < readCacheClasses; j++ {
		l := c.free[j]
		if len(l) == 0 {
			continue
		}
		b := l[len(l)-1]
		c.free[j] = l[:len(l)-1]
		c.freeBytes -= int64(len(b))
		for len(b) > size {
			c.free[cl] = append(c.free[cl], b[len(b)-size:len(b):len(b)])
			c.freeBytes += int64(size)
			b = b[: len(b)-size : len(b)-size]
		}
		return b
	}
	return nil
}

// add lists e, filled with the checked content of k and its block
// checksums, under the shard lock of the object owning k's file. If k is
// listed already (two readers missed at once), e stays the caller's alone.
func (c *readCache) add(k readKey, e *cachedRead, sums []uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	e.key, e.sums = k, sums
	e.refs.Add(1)
	c.m[k] = e
	c.byFile[k.fileID] = append(c.byFile[k.fileID], e)
	c.pushFront(e)
	c.listed.Add(1)
}

// dropFile unlists every entry of a data file (see the invariant).
func (c *readCache) dropFile(fileID uint64) {
	if c == nil || c.listed.Load() == 0 {
		return
	}
	c.mu.Lock()
	for len(c.byFile[fileID]) > 0 {
		c.evict(c.byFile[fileID][0])
	}
	c.mu.Unlock()
}

// forget unlists every entry.
func (c *readCache) forget() {
	if c == nil {
		return
	}
	c.mu.Lock()
	for c.lru.prev != &c.lru {
		c.evict(c.lru.prev)
	}
	c.mu.Unlock()
}

// release drops the caller's reference to e.
func (e *cachedRead) release() {
	if n := e.refs.Add(-1); n == 0 {
		e.c.mu.Lock()
		e.c.recycle(e)
		e.c.mu.Unlock()
	} else if n < 0 {
		panic("objstore: cached read released more often than referenced")
	}
}

// evict unlists e and drops the cache's reference. Called with mu held.
func (c *readCache) evict(e *cachedRead) {
	delete(c.m, e.key)
	l := c.byFile[e.key.fileID]
	for i, x := range l {
		if x == e {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(c.byFile, e.key.fileID)
	} else {
		c.byFile[e.key.fileID] = l
	}
	c.unlink(e)
	c.listed.Add(-1)
	if e.refs.Add(-1) == 0 {
		c.recycle(e)
	}
}

// recycle keeps the buffer of an entry nobody uses for the next fill, or,
// unless the cache keeps its memory, unmaps it if an eighth of the bound
// is free already: after its objects are deleted, a store that did not
// reserve gives the memory back rather than keep it mapped for nothing.
// Called with mu held.
func (c *readCache) recycle(e *cachedRead) {
	buf := e.buf
	e.buf, e.data, e.sums = nil, nil, nil
	if !c.keep && c.freeBytes+int64(len(buf)) > c.maxBytes/8 {
		c.unmap(buf)
		return
	}
	cl := readClass(len(buf))
	c.free[cl] = append(c.free[cl], buf)
	c.freeBytes += int64(len(buf))
}

// unmapOne unmaps one free buffer, if there is one. Called with mu held.
func (c *readCache) unmapOne() bool {
	for cl := range c.free {
		if l := c.free[cl]; len(l) > 0 {
			c.unmap(l[len(l)-1])
			c.freeBytes -= int64(len(l[len(l)-1]))
			c.free[cl] = l[:len(l)-1]
			return true
		}
	}
	return false
}

func (c *readCache) unmap(buf []byte) {
	c.mapped -= int64(len(buf))
	unmapBuffer(buf)
}

// close unmaps what nobody uses; buffers still being sent are left to the
// process's end.
func (c *readCache) close() {
	if c == nil {
		return
	}
	// The reserving goroutine is not waited for: at idle priority on a
	// busy machine it may not run for a while. It unmaps what it maps
	// after this.
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if c.stopReserve != nil {
		close(c.stopReserve)
	}
	c.forget()
	c.mu.Lock()
	for c.unmapOne() {
	}
	c.mu.Unlock()
}

func (c *readCache) unlink(e *cachedRead) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *readCache) pushFront(e *cachedRead) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

// reserve starts mapping the cache's memory up to its bound, in the
// background (see Reserving above). Called once, before the cache is used.
func (c *readCache) reserve() {
	if c == nil {
		return
	}
	c.keep = true
	c.stopReserve = make(chan struct{})
	c.counting.Store(true)
	c.reserving.Add(1)
	go c.reserveAll()
}

// reserveQuiet is how long the store must have done nothing before the
// cache maps more of its memory.
const reserveQuiet = 50 * time.Millisecond

// busy counts one read or transaction of the store: reserving waits for a
// moment without any.
func (c *readCache) busy() {
	if c != nil && c.counting.Load() {
		c.ops.Add(1)
	}
}

// reserveAll maps readCacheMax buffers, faulted in, into the free list
// until the bound is reached, the machine runs short of memory or the
// cache closes, one at a time while the store stays idle. It runs on a
// thread of idle priority that it never hands back: a goroutine that ends
// locked to its thread ends the thread, so no other goroutine runs at
// that priority. The faulting is done inside one system call per buffer,
// during which the runtime may give the goroutine's processor to others.
func (c *readCache) reserveAll() {
	defer c.reserving.Done()
	defer c.counting.Store(false)
	runtime.LockOSThread()
	idlePriority()
	t := time.NewTimer(c.quiet)
	defer t.Stop()
	for {
		ops := c.ops.Load()
		t.Reset(c.quiet)
		select {
		case <-c.stopReserve:
			return
		case <-t.C:
		}
		for c.ops.Load() == ops {
			select {
			case <-c.stopReserve:
				return
			default:
			}
			if !c.reserveOne() {
				return
			}
		}
	}
}

// reserveOne maps one more readCacheMax buffer, faulted in, into the free
// list, and reports whether reserving goes on: not at the bound, nor with
// the machine short of memory, nor after a failed mapping.
func (c *readCache) reserveOne() bool {
	const size = readCacheMax
	if avail, total, ok := c.memory(); ok && avail-size < total/4 {
		return false
	}
	c.mu.Lock()
	if c.closed || c.mapped+size > c.maxBytes {
		c.mu.Unlock()
		return false
	}
	c.mapped += size // claimed before mapping, so fills stay in the bound
	c.mu.Unlock()
	b, err := mapBuffer(size, true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || c.closed {
		c.mapped -= size
		if err == nil {
			unmapBuffer(b)
		}
		return false
	}
	cl := readClass(size)
	c.free[cl] = append(c.free[cl], b)
	c.freeBytes += size
	return true
}

// idlePriority makes the calling thread run only when a CPU has nothing
// else to run (SCHED_IDLE), or, if that is refused, at the lowest nice.
func idlePriority() {
	if unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_IDLE}, 0) != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, 19)
	}
}

// mapBuffer maps n bytes of anonymous memory, each page faulted in if
// populate. Buffers are mapped and unmapped by address, not through
// unix.Mmap's bookkeeping, so that a piece of one can be unmapped alone.
func mapBuffer(n int, populate bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if populate {
		flags |= unix.MAP_POPULATE
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// unmapBuffer unmaps a buffer of mapBuffer's, or a piece of one.
func unmapBuffer(b []byte) {
	_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(cap(b)))
}

// machineMemory reads MemAvailable and MemTotal from /proc/meminfo.
func machineMemory() (available, total int64, ok bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	var seen int
	for line := range strings.Lines(string(b)) {
		var name string
		var kib int64
		if _, err := fmt.Sscanf(line, "%s %d", &name, &kib); err != nil {
			continue
		}
		switch name {
		case "MemAvailable:":
			available, seen = kib<<10, seen|1
		case "MemTotal:":
			total, seen = kib<<10, seen|2
		}
	}
	return available, total, seen == 3
}
