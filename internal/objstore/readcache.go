package objstore

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// readCache keeps the data of recent large reads (a whole 4 MiB object, a
// 1 MiB stretch of a volume) as they were checked, in memory of its own, so
// that a read asked for again is answered from there: no disk read or
// page-cache copy, no checksum pass (the block checksums are kept with the
// data), and the reply is sent from the cached bytes as they lie. Under
// 1 MiB volume reads from the page cache, the copy out of it was 29% of an
// OSD's CPU and the checksums 12%; large reads that miss the page cache go
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
	// freeBytes: bytes of the buffers in free, at most maxBytes/8.
	freeBytes int64

	// seen remembers reads that missed once (hashes of their keys,
	// direct-mapped): a read fills the cache on its second miss only, as
	// the ARC keeps blocks seen twice. A pass that reads everything once
	// (a backup, a scrub of a volume, a sequential benchmark) then neither
	// pushes out what is read again nor pays for memory it would not use:
	// memory a process touches for the first time costs the kernel a
	// zeroing of every page, here 1.1 s of CPU per GiB (2.6 s in huge
	// pages) on a fresh VM, 0.35 s on memory it had used before.
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
		seen: make([]atomic.Uint64, max(1024, maxBytes/readCacheMin)), seenSeed: maphash.MakeSeed()}
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
// or large, its first miss, or no room (every buffer is being sent).
func (c *readCache) alloc(k readKey, n int) *cachedRead {
	cl := readClass(n)
	if c == nil || cl < 0 || !c.secondMiss(k) {
		return nil
	}
	size := int64(readCacheMin) << cl
	c.mu.Lock()
	defer c.mu.Unlock()
	var buf []byte
	for buf == nil {
		if l := c.free[cl]; len(l) > 0 {
			buf, c.free[cl] = l[len(l)-1], l[:len(l)-1]
			c.freeBytes -= int64(len(buf))
			break
		}
		if c.mapped+size <= c.maxBytes {
			b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
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
	}
	e := &cachedRead{buf: buf, data: buf[:n], c: c}
	e.refs.Store(1)
	return e
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

// recycle keeps the buffer of an entry nobody uses for the next fill, or
// unmaps it if an eighth of the bound is free already: after its objects
// are deleted, an OSD gives the memory back rather than keep a gigabyte
// mapped for nothing. Called with mu held.
func (c *readCache) recycle(e *cachedRead) {
	buf := e.buf
	e.buf, e.data, e.sums = nil, nil, nil
	if c.freeBytes+int64(len(buf)) > c.maxBytes/8 {
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
	_ = unix.Munmap(buf)
}

// close unmaps what nobody uses; buffers still being sent are left to the
// process's end.
func (c *readCache) close() {
	if c == nil {
		return
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
