package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestIndexCacheFollowsCommittedBatches(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := newIndexCache(1 << 20)
	rec := func(n int) []byte { return objKey("1.0", fmt.Sprint("obj", n)) }
	for i := 0; i < 4; i++ {
		c.fill(rec(i), []byte{byte(i)})
		c.fill(csumKey(7, uint64(i)), []byte{byte(i)})
	}
	c.fill(idKey(tagOmap, 1, []byte("k")), []byte("v")) // not an index key: ignored
	c.fill(rec(9), make([]byte, indexCacheMaxValue+1))  // too large: ignored
	if len(c.m) != 8 {
		t.Fatalf("%d entries after filling 8 index keys", len(c.m))
	}

	b := db.NewBatch()
	b.Set(rec(0), []byte("new"), nil)                      // cached: updated
	b.Set(rec(5), []byte("fresh"), nil)                    // not cached: stays out
	b.Delete(rec(1), nil)                                  // known absent
	b.Delete(rec(6), nil)                                  // not cached: stays out
	b.Set(rec(2), make([]byte, indexCacheMaxValue+1), nil) // now too large: dropped
	b.DeleteRange(csumKey(7, 1), csumKey(7, 3), nil)       // chunks 1 and 2 dropped
	b.DeleteRange(idKey(tagOmap, 1, nil), idKey(tagOmap, 2, nil), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	c.committed(b)
	b.Close()

	want := map[string][]byte{
		string(rec(0)):        []byte("new"),
		string(rec(1)):        nil,
		string(rec(3)):        {3},
		string(csumKey(7, 0)): {0},
		string(csumKey(7, 3)): {3},
	}
	if len(c.m) != len(want) {
		t.Fatalf("cache has %d entries, want %d", len(c.m), len(want))
	}
	for k, v := range want {
		got, ok := c.get([]byte(k))
		if !ok || !bytes.Equal(got, v) || (got == nil) != (v == nil) {
			t.Fatalf("entry %x = %x (%v), want %x", k, got, ok, v)
		}
	}
	// get hands out copies: changing one leaves the entry alone.
	got, _ := c.get(rec(0))
	got[0] = 'X'
	if again, _ := c.get(rec(0)); string(again) != "new" {
		t.Fatalf("entry changed through a returned value: %q", again)
	}
}

// A large value (a small object's record) enters the cache on its key's
// second miss only, so a scan that reads everything once fills nothing.
func TestIndexCacheAdmitsLargeValuesSeenTwice(t *testing.T) {
	c := newIndexCache(1 << 20)
	rec := func(n int) []byte { return objKey("1.0", fmt.Sprint("obj", n)) }
	big := make([]byte, 4200)
	for i := 0; i < 100; i++ {
		c.fill(rec(i), big)
		c.fill(csumKey(1, uint64(i)), []byte{1}) // small: at once
	}
	if len(c.m) != 100 {
		t.Fatalf("%d entries after one pass, want the 100 small ones", len(c.m))
	}
	for i := 0; i < 100; i++ {
		c.fill(rec(i), big)
	}
	// Keys whose hashes share a slot of seen forget each other's first
	// miss (a few in a hundred runs): only the others must be cached.
	users := map[uint64]int{}
	for i := 0; i < 100; i++ {
		users[c.seenSlot(maphash.Bytes(c.seenSeed, rec(i)))]++
	}
	for i := 0; i < 100; i++ {
		_, ok := c.get(rec(i))
		if shared := users[c.seenSlot(maphash.Bytes(c.seenSeed, rec(i)))] > 1; !ok && !shared {
			t.Fatalf("record %d not cached after its second miss", i)
		}
	}
}

func TestIndexCacheIsBounded(t *testing.T) {
	const bound = 64 << 10
	c := newIndexCache(bound)
	sum := func() int {
		n := 0
		for k, v := range c.m {
			n += entryCost(k, v)
		}
		return n
	}
	for i := 0; i < 1000; i++ {
		key := objKey("1.0", fmt.Sprint("obj", i%300))
		v := pattern(i, (i*997)%indexCacheMaxValue)
		if i%3 == 0 {
			key, v = csumKey(1, uint64(i)), v[:min(len(v), 272)]
		}
		c.fill(key, v)
		c.fill(key, v) // large values enter on their second miss
		if c.bytes != sum() || c.bytes > bound {
			t.Fatalf("after %d fills: %d bytes counted, %d held, bound %d", i+1, c.bytes, sum(), bound)
		}
		if got, ok := c.get(key); !ok || !bytes.Equal(got, v) {
			t.Fatalf("fill %d: the newest entry was evicted or differs", i)
		}
	}
	if len(c.m) < 5 {
		t.Fatalf("%d entries left of a %d-byte cache", len(c.m), bound)
	}
	// Committed batches keep the count exact too.
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	for k := range c.m {
		b.Set([]byte(k), make([]byte, 3000), nil)
	}
	b.DeleteRange(csumKey(1, 0), csumKey(2, 0), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	c.committed(b)
	b.Close()
	if c.bytes != sum() || c.bytes > bound {
		t.Fatalf("after a batch: %d bytes counted, %d held, bound %d", c.bytes, sum(), bound)
	}
}

// Blocks a write fills whole get their checksums at once (sums); a later
// change in the same transaction must not leave a stale one behind.
func TestEarlyChecksumsFollowLaterChanges(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	big := pattern(3, 64*blockSize) // file-backed
	apply(t, s, func(tx *Txn) {
		tx.Write("c", "o", 0, big)
		tx.Write("c", "o", 5, []byte("partial"))           // block 0 changes after its sum
		tx.Write("c", "o", 2*blockSize, big[:blockSize])   // block 2 whole again
		tx.Truncate("c", "o", 40*blockSize+100)            // block 40 cut short
		tx.Write("c", "o", 3*blockSize, big[:2*blockSize]) // blocks 3 and 4 whole again
	})
	want := append([]byte(nil), big[:40*blockSize+100]...)
	copy(want[5:], "partial")
	copy(want[2*blockSize:], big[:blockSize])
	copy(want[3*blockSize:], big[:2*blockSize])
	if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object differs from what was written")
	}
}

// Range tombstones drop exactly the cached keys they cover, whether they lie
// in one file's checksums (the only kind Apply writes), span several files
// or cover object records, and the index of cached chunks by file stays
// equal to the cache.
func TestIndexCacheRangeDeletes(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := func(n int) []byte { return objKey("1.0", fmt.Sprint("obj", n)) }
	ranges := [][2][]byte{
		{csumKey(3, 5), csumKey(4, 0)},                                       // the tail of one file
		{csumKey(3, 2), csumKey(3, 4)},                                       // inside one file
		{csumKey(2, 7), csumKey(5, 1)},                                       // across files
		{[]byte{tagCsum}, []byte{tagCsum + 1}},                               // every checksum
		{rec(3), rec(6)},                                                     // object records
		{[]byte{tagCsum}, []byte{tagObject + 1}},                             // both kinds
		{idKey(tagOmap, 1, nil), idKey(tagOmap, 2, nil)},                     // neither
		{idKey(tagXattr, 2, nil), idKey(tagXattr, 3, nil)},                   // one object's xattrs
		{idKey(tagXattr, 2, []byte("k3")), idKey(tagXattr, 4, []byte("k1"))}, // across objects
		{[]byte{tagXattr}, []byte{tagCsum + 1}},                              // xattrs and checksums
	}
	for i, r := range ranges {
		c := newIndexCache(1 << 20)
		for f := uint64(1); f <= 6; f++ {
			for chunk := uint64(0); chunk < 10; chunk++ {
				c.fill(csumKey(f, chunk), []byte{byte(f), byte(chunk)})
			}
		}
		for n := 0; n < 10; n++ {
			c.fill(rec(n), []byte{byte(n)})
			c.fill(idKey(tagXattr, uint64(n%5), []byte(fmt.Sprint("k", n))), []byte{byte(n)})
		}
		want := map[string]bool{}
		for k := range c.m {
			if k < string(r[0]) || k >= string(r[1]) {
				want[k] = true
			}
		}
		b := db.NewBatch()
		b.DeleteRange(r[0], r[1], nil)
		c.committed(b)
		b.Close()
		if len(c.m) != len(want) {
			t.Fatalf("range %d: %d entries left, want %d", i, len(c.m), len(want))
		}
		for k := range want {
			if _, ok := c.m[k]; !ok {
				t.Fatalf("range %d: %x dropped, outside [%x, %x)", i, k, r[0], r[1])
			}
		}
		indexed := 0
		for fid, set := range c.chunks {
			if len(set) == 0 {
				t.Fatalf("range %d: file %d indexed with no chunks", i, fid)
			}
			for chunk := range set {
				indexed++
				if _, ok := c.m[string(csumKey(fid, uint64(chunk)))]; !ok {
					t.Fatalf("range %d: chunk %d of file %d indexed, not cached", i, chunk, fid)
				}
			}
		}
		cached := 0
		for k := range c.m {
			if k[0] == tagCsum {
				cached++
			}
		}
		if indexed != cached {
			t.Fatalf("range %d: %d chunks indexed, %d cached", i, indexed, cached)
		}
		indexed, cached = 0, 0
		for id, set := range c.xattrs {
			if len(set) == 0 {
				t.Fatalf("range %d: object %d indexed with no xattrs", i, id)
			}
			for k := range set {
				indexed++
				if got, ok := parseXattrKey(k); !ok || got != id {
					t.Fatalf("range %d: xattr key %x indexed under object %d", i, k, id)
				}
				if _, ok := c.m[k]; !ok {
					t.Fatalf("range %d: xattr %x indexed, not cached", i, k)
				}
			}
		}
		for k := range c.m {
			if k[0] == tagXattr {
				cached++
			}
		}
		if indexed != cached {
			t.Fatalf("range %d: %d xattrs indexed, %d cached", i, indexed, cached)
		}
	}
}

// BenchmarkIndexCacheRangeDelete: the cost, under the cache's lock, of a
// range tombstone over one file's checksums (deleting a large object) in a
// cache full of small entries.
func BenchmarkIndexCacheRangeDelete(b *testing.B) {
	c := newIndexCache(64 << 20)
	for i := 0; len(c.m) < 360_000; i++ {
		c.fill(csumKey(uint64(i/16), uint64(i%16)), make([]byte, 68))
	}
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	batch := db.NewBatch()
	batch.DeleteRange(csumKey(1<<40, 0), csumKey(1<<40+1, 0), nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for chunk := uint64(0); chunk < 300; chunk++ {
			c.fill(csumKey(1<<40, chunk), make([]byte, 68))
		}
		c.committed(batch)
	}
}

// A deleted object's record, and one a lookup missed, are remembered as
// absent: the next lookups of the name (an erasure-coded shard's rollback
// object, looked up by every write and trim of its shard) do not reach
// pebble; a new object under the name replaces the entry.
func TestIndexCacheRemembersAbsentRecords(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("c", "gone", []byte("x")) })
	apply(t, s, func(tx *Txn) { tx.Delete("c", "gone") })
	lookup := func(name string) (misses int64) {
		before := s.idx.misses.Load()
		if _, err := s.Stat("c", name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("stat %q: %v, want ErrNotFound", name, err)
		}
		return s.idx.misses.Load() - before
	}
	if m := lookup("gone"); m != 0 {
		t.Fatalf("a deleted object's record missed the cache %d times", m)
	}
	s.filter.Store(nil) // every name may exist: lookups of unknown names reach the cache
	if m := lookup("never"); m != 1 {
		t.Fatalf("the first lookup of an unknown name missed %d times, want 1", m)
	}
	if m := lookup("never"); m != 0 {
		t.Fatalf("a second lookup of an absent name missed the cache %d times", m)
	}
	apply(t, s, func(tx *Txn) { tx.Put("c", "never", []byte("now")) })
	if got := mustRead(t, s, "c", "never", 0, 0); string(got) != "now" {
		t.Fatalf("an object created under a name known absent reads %q", got)
	}
}

// Xattrs are read through the cache: an erasure-coded shard's meta is
// read by every write, read and trim of the shard. A cached xattr follows
// every change a commit makes to it (set, removed, its object deleted or
// renamed), and an empty value stays apart from an absent one.
func TestIndexCacheFollowsXattrs(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	// want reads an xattr, and how many of the two lookups (its object's
	// record, then the xattr) missed the cache.
	want := func(name, key, value string, absent bool, misses int64) {
		t.Helper()
		m0, h0 := s.idx.misses.Load(), s.idx.hits.Load()
		v, err := s.GetXattr("c", name, key)
		m, h := s.idx.misses.Load()-m0, s.idx.hits.Load()-h0
		lookups := int64(2)
		if _, err := s.Stat("c", name); errors.Is(err, ErrNotFound) {
			lookups = 1 // no record: no xattr lookup
		}
		switch {
		case absent && !errors.Is(err, ErrNotFound):
			t.Fatalf("xattr %q of %q: %q, %v; want ErrNotFound", key, name, v, err)
		case !absent && (err != nil || string(v) != value || v == nil):
			t.Fatalf("xattr %q of %q: %q (nil: %v), %v; want %q", key, name, v, v == nil, err, value)
		case m != misses || m+h != lookups:
			t.Fatalf("xattr %q of %q: %d cache misses and %d hits, want %d of %d lookups missed", key, name, m, h, misses, lookups)
		}
	}
	apply(t, s, func(tx *Txn) {
		tx.Put("c", "obj", []byte("data"))
		tx.SetXattr("c", "obj", "meta", []byte("v1"))
		tx.SetXattr("c", "obj", "empty", nil)
	})
	want("obj", "meta", "v1", false, 2) // the record and the xattr
	want("obj", "meta", "v1", false, 0)
	want("obj", "empty", "", false, 1)
	want("obj", "empty", "", false, 0)
	want("obj", "undo", "", true, 1)
	want("obj", "undo", "", true, 0)

	apply(t, s, func(tx *Txn) {
		tx.SetXattr("c", "obj", "meta", []byte("v2"))
		tx.SetXattr("c", "obj", "undo", []byte("old bytes"))
	})
	want("obj", "meta", "v2", false, 0)
	want("obj", "undo", "old bytes", false, 0)
	apply(t, s, func(tx *Txn) { tx.RmXattr("c", "obj", "undo") })
	want("obj", "undo", "", true, 1) // dropped, then remembered absent
	want("obj", "undo", "", true, 0)

	apply(t, s, func(tx *Txn) { tx.Rename("c", "obj", "moved") })
	want("moved", "meta", "v2", false, 1) // the new name's record
	want("obj", "meta", "", true, 0)

	apply(t, s, func(tx *Txn) { tx.Delete("c", "moved") })
	want("moved", "meta", "", true, 0)
	apply(t, s, func(tx *Txn) { tx.Put("c", "moved", []byte("new")) })
	want("moved", "meta", "", true, 1) // a new object: its own xattrs
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	for id, set := range s.idx.xattrs {
		for k := range set {
			if _, ok := s.idx.m[k]; !ok {
				t.Fatalf("xattr %x of object %d indexed, not cached", k, id)
			}
		}
	}
}
