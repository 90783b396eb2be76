package objstore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
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

	// A truncate and a delete reach the cache too.
	_, release = read("other7", pattern(17, size))
	release()
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
