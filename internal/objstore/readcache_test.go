package objstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// The read cache answers a repeated large read from memory, never with
// data older than the last write, and never recycles a buffer a reader
// still holds, however much is read meanwhile.
func TestReadCache(t *testing.T) {
	s, err := Open(Options{Dir: "/osd", FS: vfs.NewMem(), ReserveBytes: -1, DataCacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 512 << 10
	put := func(name string, seed int) []byte {
		d := pattern(seed, size)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", name, d) })
		return d
	}
	read := func(name string, want []byte) ([]byte, func()) {
		t.Helper()
		got, _, _, release, err := s.ReadShared("1.0", name, 0, 0)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read %s: %v, content equal %v", name, err, bytes.Equal(got, want))
		}
		return got, release
	}

	// The first read of an object is not kept: a single pass leaves the
	// cache alone. The second fills it, the third is a hit.
	a := put("a", 1)
	for range 2 {
		_, release := read("a", a)
		release()
	}
	if s.rc.hits.Load() != 0 || s.rc.listed.Load() != 1 {
		t.Fatalf("after two reads: %d hits, %d entries; want none and one", s.rc.hits.Load(), s.rc.listed.Load())
	}
	held, holdRelease := read("a", a)
	if h := s.rc.hits.Load(); h != 1 {
		t.Fatalf("%d cache hits after reading an object three times, want 1", h)
	}
	// A write replaces what the cache has; the reader holding the old
	// data keeps it as it was.
	old := bytes.Clone(held)
	a2 := bytes.Clone(a)
	copy(a2[100<<10:], "new bytes")
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "a", 100<<10, []byte("new bytes")) })
	_, release := read("a", a2)
	release()
	_, release = read("a", a2)
	release()
	for i := 0; i < 8; i++ { // two 512 KiB entries fit: these evict and refill
		d := put(fmt.Sprint("other", i), 10+i)
		for range 2 {
			_, release := read(fmt.Sprint("other", i), d)
			release()
		}
	}
	if !bytes.Equal(held, old) {
		t.Fatal("a buffer held by a reader was recycled")
	}
	holdRelease()
	if s.rc.mapped > s.rc.maxBytes {
		t.Fatalf("%d bytes mapped, bound %d", s.rc.mapped, s.rc.maxBytes)
	}

	// With every buffer held, reads are still answered, past the cache.
	var holds []func()
	for i := 0; i < 4; i++ {
		d := put(fmt.Sprint("held", i), 20+i)
		_, release := read(fmt.Sprint("held", i), d)
		release()
		_, release = read(fmt.Sprint("held", i), d)
		holds = append(holds, release)
	}
	if s.rc.mapped > s.rc.maxBytes {
		t.Fatalf("%d bytes mapped with readers holding buffers, bound %d", s.rc.mapped, s.rc.maxBytes)
	}
	for _, release := range holds {
		release()
	}

	// A truncate and a delete reach the cache too. Read twice: a first
	// miss fills the cache only if a buffer is free just then.
	for range 2 {
		_, release = read("other7", pattern(17, size))
		release()
	}
	if s.rc.listed.Load() == 0 {
		t.Fatal("nothing cached before the truncate")
	}
	apply(t, s, func(tx *Txn) { tx.Truncate("1.0", "other7", 200<<10) })
	_, release = read("other7", pattern(17, size)[:200<<10])
	release()
	apply(t, s, func(tx *Txn) { tx.Delete("1.0", "other7") })
	if _, _, _, _, err := s.ReadShared("1.0", "other7", 0, 0); err == nil {
		t.Fatal("a deleted object read from the cache")
	}

	// Once its objects are gone, the cache gives its memory back but for
	// an eighth of its bound.
	apply(t, s, func(tx *Txn) {
		tx.Delete("1.0", "a")
		for i := 0; i < 7; i++ {
			tx.Delete("1.0", fmt.Sprint("other", i))
		}
		for i := 0; i < 4; i++ {
			tx.Delete("1.0", fmt.Sprint("held", i))
		}
	})
	if n, m := s.rc.listed.Load(), s.rc.mapped; n != 0 || m > s.rc.maxBytes/8 {
		t.Fatalf("after deleting every object: %d entries, %d bytes mapped (bound %d)", n, m, s.rc.maxBytes)
	}
}

// waitReserved waits for c's reserving goroutine to end.
func waitReserved(t *testing.T, c *readCache) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.reserving.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("reserving still going after 20 s: %d of %d bytes mapped", c.mapped, c.maxBytes)
	}
}

// resident reports whether every page of b is in memory.
func resident(t *testing.T, b []byte) bool {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 == 0 {
			return false
		}
	}
	return true
}

// A reserving cache maps its whole bound in memory that is faulted in
// already; a read's first miss fills it while a buffer is free, a piece of
// a larger one if need be, but never evicts; a second miss does.
func TestReadCacheReserve(t *testing.T) {
	const bound = 16 << 20
	c := newReadCache(bound)
	c.memory = func() (int64, int64, bool) { return 1 << 40, 1 << 40, true }
	c.quiet = time.Millisecond
	c.reserve()
	waitReserved(t, c)
	if c.mapped != bound || c.freeBytes != bound || len(c.free[readClass(readCacheMax)]) != bound/readCacheMax {
		t.Fatalf("reserved %d bytes, %d free, %d buffers of 4 MiB; want all %d", c.mapped, c.freeBytes, len(c.free[readClass(readCacheMax)]), bound)
	}
	for _, b := range c.free[readClass(readCacheMax)] {
		if !resident(t, b) {
			t.Fatal("a reserved buffer has pages not faulted in")
		}
	}

	key := func(i int) readKey { return readKey{fileID: uint64(i), end: 1 << 20} }
	fill := func(k readKey, n int) *cachedRead {
		e := c.alloc(k, n)
		if e != nil {
			for i := range e.data {
				e.data[i] = byte(k.fileID)
			}
			c.add(k, e, nil)
			e.release()
		}
		return e
	}
	// Three 4 MiB first misses take three buffers; a 1 MiB one cuts the
	// fourth in four; three more 1 MiB ones take its other pieces.
	for i := range 3 {
		if fill(readKey{fileID: uint64(100 + i), end: readCacheMax}, readCacheMax) == nil {
			t.Fatalf("first miss %d not cached with reserved buffers free", i)
		}
	}
	for i := range 4 {
		if fill(key(i), 1<<20) == nil {
			t.Fatalf("1 MiB first miss %d not cached with a reserved buffer to cut", i)
		}
	}
	if c.freeBytes != 0 || c.mapped != bound || c.listed.Load() != 7 {
		t.Fatalf("after filling: %d bytes free, %d mapped, %d entries; want 0, %d, 7", c.freeBytes, c.mapped, c.listed.Load(), bound)
	}
	// Full: a first miss is not cached, its second miss evicts the oldest.
	if e := c.alloc(key(9), 1<<20); e != nil {
		t.Fatal("a first miss evicted for the cache")
	}
	if fill(key(9), 1<<20) == nil {
		t.Fatal("a second miss was not cached in a full cache")
	}
	if c.m[readKey{fileID: 100, end: readCacheMax}] != nil || c.m[key(9)] == nil || c.mapped > bound {
		t.Fatalf("the second miss did not replace the oldest entry (%d bytes mapped)", c.mapped)
	}
	// Freed buffers stay mapped: the memory was taken for good.
	c.dropFile(101)
	if c.mapped != bound || c.freeBytes != readCacheMax+3<<20 {
		t.Fatalf("%d bytes mapped, %d free after a file's entries went; the reserve must stay", c.mapped, c.freeBytes)
	}
	c.close()
	if c.mapped != 0 || c.listed.Load() != 0 {
		t.Fatalf("after close: %d bytes mapped, %d entries", c.mapped, c.listed.Load())
	}
}

// Reserving waits for a quiet store and stops with the machine short of
// memory.
func TestReadCacheReserveWaits(t *testing.T) {
	c := newReadCache(8 << 20)
	c.memory = func() (int64, int64, bool) { return 1 << 40, 1 << 40, true }
	c.quiet = 200 * time.Millisecond
	c.reserve()
	stop := make(chan struct{})
	busy := make(chan struct{})
	go func() { // a store serving something every millisecond
		defer close(busy)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				c.busy()
			}
		}
	}()
	time.Sleep(600 * time.Millisecond)
	c.mu.Lock()
	mapped := c.mapped
	c.mu.Unlock()
	close(stop)
	<-busy
	if mapped != 0 {
		t.Fatalf("%d bytes reserved while the store was busy", mapped)
	}
	waitReserved(t, c)
	if c.mapped != 8<<20 {
		t.Fatalf("%d bytes reserved once the store was idle, want %d", c.mapped, 8<<20)
	}
	c.close()

	short := newReadCache(8 << 20)
	short.quiet = time.Millisecond
	var calls int64 // each buffer reserved leaves the machine that much less
	short.memory = func() (int64, int64, bool) {
		calls++
		return 1<<30 + readCacheMax*(2-calls), 4 << 30, true
	}
	short.reserve()
	waitReserved(t, short)
	if short.mapped != readCacheMax {
		t.Fatalf("%d bytes reserved with a quarter of the machine's memory available and 4 MiB over it, want 4 MiB", short.mapped)
	}
	short.close()
	// Closed while reserving: what the reserver maps after is unmapped.
	big := newReadCache(1 << 30)
	big.quiet = time.Millisecond
	big.memory = func() (int64, int64, bool) { return 1 << 40, 1 << 40, true }
	big.reserve()
	time.Sleep(20 * time.Millisecond)
	big.close()
	waitReserved(t, big)
	if big.mapped != 0 {
		t.Fatalf("%d bytes still mapped after closing while reserving", big.mapped)
	}
	if a, m, ok := machineMemory(); !ok || a <= 0 || m < a {
		t.Fatalf("machine memory: %d available of %d (%v)", a, m, ok)
	}
}

// A store opened with ReserveDataCache caches an object's first read.
func TestReadCacheReserveStore(t *testing.T) {
	s, err := Open(Options{Dir: "/osd", FS: vfs.NewMem(), ReserveBytes: -1, DataCacheBytes: 8 << 20, ReserveDataCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitReserved(t, s.rc)
	if s.rc.mapped != 8<<20 {
		if a, m, ok := machineMemory(); ok && a-readCacheMax < m/4 {
			t.Skipf("the machine has %d of %d bytes of memory available: too little to reserve", a, m)
		}
		t.Fatalf("%d bytes reserved, want %d", s.rc.mapped, 8<<20)
	}
	d := pattern(7, 1<<20)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "a", d) })
	for i := range 2 {
		got, _, _, release, err := s.ReadShared("1.0", "a", 0, 0)
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("read %d: %v, content equal %v", i, err, bytes.Equal(got, d))
		}
		release()
	}
	if h := s.rc.hits.Load(); h != 1 {
		t.Fatalf("%d hits reading an object twice from a reserved cache, want 1", h)
	}
}
