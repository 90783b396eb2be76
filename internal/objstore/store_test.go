package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func openMem(t testing.TB, fs vfs.FS) *Store {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	// A small read cache: tests that read large objects also evict.
	s, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1, DataCacheBytes: 2 << 20})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func apply(t testing.TB, s *Store, fn func(*Txn)) {
	t.Helper()
	var tx Txn
	fn(&tx)
	if err := s.Apply(&tx); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func mustRead(t testing.TB, s *Store, coll, name string, off, n uint64) []byte {
	t.Helper()
	b, err := s.Read(coll, name, off, n)
	if err != nil {
		t.Fatalf("read %s/%s [%d,+%d): %v", coll, name, off, n, err)
	}
	return b
}

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewSource(int64(seed)))
	r.Read(b)
	return b
}

func TestBasicInline(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	data := []byte("hello world")
	apply(t, s, func(tx *Txn) { tx.Put("1.2a", "obj", data) })
	if got := mustRead(t, s, "1.2a", "obj", 0, 0); !bytes.Equal(got, data) {
		t.Fatalf("got %q", got)
	}
	if got := mustRead(t, s, "1.2a", "obj", 6, 3); string(got) != "wor" {
		t.Fatalf("got %q", got)
	}
	if got := mustRead(t, s, "1.2a", "obj", 6, 100); string(got) != "world" {
		t.Fatalf("short read at EOF: %q", got)
	}
	if got := mustRead(t, s, "1.2a", "obj", 100, 10); len(got) != 0 {
		t.Fatalf("read past EOF: %q", got)
	}
	info, err := s.Stat("1.2a", "obj")
	if err != nil || info.Size != uint64(len(data)) || info.Mtime.IsZero() {
		t.Fatalf("stat %+v %v", info, err)
	}
	if _, ok := s.DataPath("1.2a", "obj"); ok {
		t.Fatal("inline object has a data path")
	}
}

func TestMissingAndInvalid(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	if _, err := s.Read("c", "nope", 0, 0); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("read missing: %v", err)
	}
	if _, err := s.Stat("c", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := s.GetXattr("c", "nope", "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("getxattr missing: %v", err)
	}
	if _, err := s.Xattrs("c", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("xattrs missing: %v", err)
	}
	if _, err := s.OmapGet("c", "nope", []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("omapget missing: %v", err)
	}
	if _, _, err := s.OmapList("c", "nope", nil, nil, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("omaplist missing: %v", err)
	}
	apply(t, s, func(tx *Txn) { tx.Create("c", "o") })
	if _, err := s.GetXattr("c", "o", "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing xattr: %v", err)
	}
	if _, err := s.OmapGet("c", "o", []byte("k")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing omap key: %v", err)
	}
	long := strings.Repeat("x", MaxNameLen+1)
	cases := map[string]func(*Txn){
		"empty name":    func(tx *Txn) { tx.Create("c", "") },
		"empty coll":    func(tx *Txn) { tx.Create("", "o") },
		"long name":     func(tx *Txn) { tx.Create("c", long) },
		"long xattr":    func(tx *Txn) { tx.SetXattr("c", "o", strings.Repeat("k", MaxXattrKeyLen+1), nil) },
		"empty xattr":   func(tx *Txn) { tx.SetXattr("c", "o", "", nil) },
		"big xattr val": func(tx *Txn) { tx.SetXattr("c", "o", "k", make([]byte, MaxXattrValueLen+1)) },
		"long omap key": func(tx *Txn) { tx.OmapSet("c", "o", make([]byte, MaxOmapKeyLen+1), nil) },
		"big omap val":  func(tx *Txn) { tx.OmapSet("c", "o", []byte("k"), make([]byte, MaxOmapValueLen+1)) },
		"huge offset":   func(tx *Txn) { tx.Write("c", "o", 1<<63, []byte("x")) },
		"huge truncate": func(tx *Txn) { tx.Truncate("c", "o", MaxObjectSize+1) },
	}
	for name, fn := range cases {
		var tx Txn
		tx.Create("c", "fine")
		fn(&tx)
		if err := tx.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: validate gave %v", name, err)
		}
		if err := s.Apply(&tx); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: apply gave %v", name, err)
		}
	}
	if _, err := s.Read("c", long, 0, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("read long name: %v", err)
	}
	if _, err := s.Stat("c", "fine"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rejected txn was partly applied: %v", err)
	}
	var big Txn
	big.Put("c", "o", make([]byte, MaxTxnBytes))
	if err := big.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversize txn: %v", err)
	}
	// Removals on a missing object are no-ops and do not create it.
	apply(t, s, func(tx *Txn) {
		tx.Delete("c", "ghost")
		tx.RmXattr("c", "ghost", "k")
		tx.OmapRm("c", "ghost", []byte("k"))
		tx.OmapRmRange("c", "ghost", nil, nil)
	})
	if _, err := s.Stat("c", "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removal created object: %v", err)
	}
}

func TestXattrs(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) {
		tx.SetXattr("c", "o", "a", []byte("1"))
		tx.SetXattr("c", "o", "b", []byte("2"))
		tx.SetXattr("c", "o", "c", []byte{})
	})
	if info, err := s.Stat("c", "o"); err != nil || info.Size != 0 {
		t.Fatalf("setxattr should create empty object: %+v %v", info, err)
	}
	apply(t, s, func(tx *Txn) {
		tx.RmXattr("c", "o", "b")
		tx.SetXattr("c", "o", "a", []byte("11"))
	})
	v, err := s.GetXattr("c", "o", "a")
	if err != nil || string(v) != "11" {
		t.Fatalf("getxattr: %q %v", v, err)
	}
	all, err := s.Xattrs("c", "o")
	if err != nil || len(all) != 2 || string(all["a"]) != "11" || all["c"] == nil || len(all["c"]) != 0 {
		t.Fatalf("xattrs: %q %v", all, err)
	}
	if _, err := s.GetXattr("c", "o", "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removed xattr: %v", err)
	}
}

func TestOmap(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) {
		for i := 0; i < 20; i++ {
			tx.OmapSet("c", "o", []byte(fmt.Sprintf("k%02d", i)), []byte(fmt.Sprint(i)))
		}
		tx.OmapSet("c", "o", []byte{}, []byte("empty key"))
		tx.OmapSet("c", "o", []byte{0, 0xff}, []byte("binary"))
	})
	v, err := s.OmapGet("c", "o", []byte("k07"))
	if err != nil || string(v) != "7" {
		t.Fatalf("omapget %q %v", v, err)
	}
	kvs, more, err := s.OmapList("c", "o", []byte("k05"), []byte("k10"), 0)
	if err != nil || more || len(kvs) != 5 || string(kvs[0].Key) != "k05" || string(kvs[4].Key) != "k09" {
		t.Fatalf("range: %v %v %v", kvs, more, err)
	}
	kvs, more, err = s.OmapList("c", "o", []byte("k05"), nil, 3)
	if err != nil || !more || len(kvs) != 3 || string(kvs[2].Key) != "k07" {
		t.Fatalf("limit: %v %v %v", kvs, more, err)
	}
	kvs, more, err = s.OmapList("c", "o", []byte("k17"), nil, 3)
	if err != nil || more || len(kvs) != 3 {
		t.Fatalf("exact limit: %v %v %v", kvs, more, err)
	}
	kvs, _, err = s.OmapList("c", "o", nil, nil, 0)
	if err != nil || len(kvs) != 22 || len(kvs[0].Key) != 0 || !bytes.Equal(kvs[1].Key, []byte{0, 0xff}) {
		t.Fatalf("all: %d %v", len(kvs), err)
	}
	kvs, more, err = s.OmapList("c", "o", []byte("z"), []byte("a"), 0)
	if err != nil || more || len(kvs) != 0 {
		t.Fatalf("empty range: %v %v", kvs, err)
	}
	apply(t, s, func(tx *Txn) {
		tx.OmapRm("c", "o", []byte("k00"))
		tx.OmapRmRange("c", "o", []byte("k10"), []byte("k15"))
		tx.OmapRmRange("c", "o", []byte("k18"), nil)
	})
	kvs, _, _ = s.OmapList("c", "o", []byte("k"), nil, 0)
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	want := "k01 k02 k03 k04 k05 k06 k07 k08 k09 k15 k16 k17"
	if strings.Join(keys, " ") != want {
		t.Fatalf("after removals: %v", keys)
	}
	// Omap of a different object with a prefix-sharing name stays separate.
	apply(t, s, func(tx *Txn) { tx.OmapSet("c", "o2", []byte("x"), []byte("y")) })
	kvs, _, _ = s.OmapList("c", "o2", nil, nil, 0)
	if len(kvs) != 1 {
		t.Fatalf("omap leaked between objects: %v", kvs)
	}
}

func TestListAndCollections(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	names := []string{"a", "a\x00", "a\x00b", "ab", "b", "\xff", "a\x01"}
	apply(t, s, func(tx *Txn) {
		for _, n := range names {
			tx.Create("1.0", n)
		}
		tx.Create("1.0\x00", "x")
		tx.Create("1.1", "y")
		tx.Create("1", "z")
	})
	got, more, err := s.List("1.0", "", 0)
	want := []string{"a", "a\x00", "a\x00b", "a\x01", "ab", "b", "\xff"}
	if err != nil || more || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("list: %q %v %v", got, more, err)
	}
	got, more, _ = s.List("1.0", "a\x00", 2)
	if !more || strings.Join(got, "|") != "a\x00b|a\x01" {
		t.Fatalf("list after/limit: %q %v", got, more)
	}
	got, more, _ = s.List("1.0", "b", 1)
	if more || len(got) != 1 || got[0] != "\xff" {
		t.Fatalf("list tail: %q %v", got, more)
	}
	got, more, _ = s.List("nope", "", 0)
	if more || len(got) != 0 {
		t.Fatalf("list empty coll: %q", got)
	}
	colls, err := s.Collections()
	if err != nil || strings.Join(colls, "|") != "1|1.0|1.0\x00|1.1" {
		t.Fatalf("collections: %q %v", colls, err)
	}
	u, err := s.Usage()
	if err != nil || u.Objects != int64(len(names)+3) {
		t.Fatalf("usage: %+v %v", u, err)
	}
}

func TestWritesAcrossBlocks(t *testing.T) {
	for _, size := range []int{10 << 10, 300 << 10} { // inline and file-backed
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			s := openMem(t, nil)
			defer s.Close()
			model := pattern(1, size)
			apply(t, s, func(tx *Txn) { tx.Put("c", "o", model) })
			// Unaligned write spanning three blocks.
			w := pattern(2, 2*blockSize+100)
			off := blockSize - 50
			apply(t, s, func(tx *Txn) { tx.Write("c", "o", uint64(off), w) })
			if off+len(w) > len(model) {
				model = append(model, make([]byte, off+len(w)-len(model))...)
			}
			copy(model[off:], w)
			if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, model) {
				t.Fatal("content mismatch after unaligned write")
			}
			// Unaligned read.
			if got := mustRead(t, s, "c", "o", 4000, 5000); !bytes.Equal(got, model[4000:9000]) {
				t.Fatal("unaligned read mismatch")
			}
			// Sparse write far beyond the end: the gap reads as zeros.
			far := uint64(size) + 3*blockSize + 7
			apply(t, s, func(tx *Txn) { tx.Write("c", "o", far, []byte("tail")) })
			model = append(model, make([]byte, int(far)-len(model))...)
			model = append(model, "tail"...)
			if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, model) {
				t.Fatal("sparse write mismatch")
			}
			// Shrink to an unaligned size, grow again: the regrown part is zeros.
			shrink := uint64(size/2 + 123)
			apply(t, s, func(tx *Txn) { tx.Truncate("c", "o", shrink) })
			apply(t, s, func(tx *Txn) { tx.Truncate("c", "o", uint64(size)) })
			model = append(model[:shrink], make([]byte, size-int(shrink))...)
			if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, model) {
				t.Fatal("truncate shrink/grow mismatch")
			}
		})
	}
}

func TestInlineToFileAndBack(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	var model []byte
	// Grow by appends past InlineMax.
	for i := 0; i < 20; i++ {
		chunk := pattern(i, 5000)
		off := uint64(len(model))
		apply(t, s, func(tx *Txn) { tx.Write("c", "o", off, chunk) })
		model = append(model, chunk...)
		_, hasFile := s.DataPath("c", "o")
		if hasFile != (len(model) > InlineMax) {
			t.Fatalf("size %d: has file %v", len(model), hasFile)
		}
	}
	if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, model) {
		t.Fatal("mismatch after growth")
	}
	path, _ := s.DataPath("c", "o")
	// Put small over large: file goes away.
	apply(t, s, func(tx *Txn) { tx.Put("c", "o", []byte("small")) })
	if _, ok := s.DataPath("c", "o"); ok {
		t.Fatal("still file-backed after small put")
	}
	s.rm.drain()
	if _, err := s.fs.Stat(path); err == nil {
		t.Fatal("old data file not removed")
	}
	if got := mustRead(t, s, "c", "o", 0, 0); string(got) != "small" {
		t.Fatalf("got %q", got)
	}
	// Put large over small, then large over large.
	big := pattern(9, 1<<20)
	apply(t, s, func(tx *Txn) { tx.Put("c", "o", big) })
	p1, ok := s.DataPath("c", "o")
	if !ok {
		t.Fatal("large put not file-backed")
	}
	big2 := pattern(10, 200<<10)
	apply(t, s, func(tx *Txn) { tx.Put("c", "o", big2) })
	p2, _ := s.DataPath("c", "o")
	if p1 == p2 {
		t.Fatal("put over large object reused the file")
	}
	if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, big2) {
		t.Fatal("large put mismatch")
	}
	// Truncate a large object below InlineMax: it goes inline.
	apply(t, s, func(tx *Txn) { tx.Truncate("c", "o", 1000) })
	if _, ok := s.DataPath("c", "o"); ok {
		t.Fatal("truncated object still file-backed")
	}
	if got := mustRead(t, s, "c", "o", 0, 0); !bytes.Equal(got, big2[:1000]) {
		t.Fatal("truncate-to-inline mismatch")
	}
}

func TestDeleteRecreate(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) {
		tx.Put("c", "o", pattern(1, 100<<10))
		tx.SetXattr("c", "o", "x", []byte("1"))
		tx.OmapSet("c", "o", []byte("k"), []byte("v"))
	})
	path, _ := s.DataPath("c", "o")
	apply(t, s, func(tx *Txn) { tx.Delete("c", "o") })
	if _, err := s.Read("c", "o", 0, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted object readable: %v", err)
	}
	s.rm.drain()
	if _, err := s.fs.Stat(path); err == nil {
		t.Fatal("data file survived delete")
	}
	apply(t, s, func(tx *Txn) { tx.Create("c", "o") })
	if x, _ := s.Xattrs("c", "o"); len(x) != 0 {
		t.Fatalf("xattrs survived delete: %v", x)
	}
	if kv, _, _ := s.OmapList("c", "o", nil, nil, 0); len(kv) != 0 {
		t.Fatalf("omap survived delete: %v", kv)
	}
	if info, _ := s.Stat("c", "o"); info.Size != 0 {
		t.Fatalf("size %d after recreate", info.Size)
	}
	// Delete and re-create in one transaction.
	apply(t, s, func(tx *Txn) {
		tx.OmapSet("c", "o", []byte("old"), nil)
		tx.Delete("c", "o")
		tx.Put("c", "o", []byte("new"))
		tx.OmapSet("c", "o", []byte("new"), nil)
	})
	kv, _, _ := s.OmapList("c", "o", nil, nil, 0)
	if len(kv) != 1 || string(kv[0].Key) != "new" {
		t.Fatalf("omap after delete+put: %v", kv)
	}
	if got := mustRead(t, s, "c", "o", 0, 0); string(got) != "new" {
		t.Fatalf("got %q", got)
	}
	u, _ := s.Usage()
	if u.Objects != 1 || u.DataBytes != 3 {
		t.Fatalf("usage %+v", u)
	}
}

func TestReopenAndJournalReplay(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	big := pattern(1, 512<<10)
	apply(t, s, func(tx *Txn) { tx.Put("c", "big", big) })
	// Small overwrites go through the journal.
	for i := 0; i < 10; i++ {
		w := pattern(100+i, 4096)
		off := uint64(i * 3 * 4096)
		apply(t, s, func(tx *Txn) { tx.Write("c", "big", off, w) })
		copy(big[off:], w)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("double close succeeded")
	}
	s = openMem(t, fs)
	defer s.Close()
	if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, big) {
		t.Fatal("mismatch after reopen")
	}
}

func TestConcurrentApply(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				var tx Txn
				tx.Write("c", fmt.Sprintf("o%d", i%5), uint64(g*4096), pattern(g*1000+i, 4096))
				tx.OmapSet("c", "shared", []byte(fmt.Sprintf("%d/%d", g, i)), nil)
				if err := s.Apply(&tx); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Read("c", fmt.Sprintf("o%d", (i+1)%5), 0, 0); err != nil && !errors.Is(err, ErrNotFound) {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	kvs, _, _ := s.OmapList("c", "shared", nil, nil, 0)
	if len(kvs) != 8*30 {
		t.Fatalf("%d omap keys", len(kvs))
	}
}

func TestFormatVersionCheck(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	setIndexKey(t, s, keySuperblock, []byte{9})
	s.Close()
	_, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1})
	if err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Fatalf("newer format accepted: %v", err)
	}

	// Version 1 (before slot B) is read as it is and marked the current
	// version, so a build that does not know slot B refuses the store from
	// then on.
	fs = vfs.NewMem()
	s = openMem(t, fs)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "old", pattern(1, 300<<10)) })
	setIndexKey(t, s, keySuperblock, []byte{1})
	s.Close()
	s = openMem(t, fs)
	defer s.Close()
	if got := mustRead(t, s, "1.0", "old", 0, 0); !bytes.Equal(got, pattern(1, 300<<10)) {
		t.Fatal("version 1 store reads differently")
	}
	if v, _ := s.get(keySuperblock); len(v) != 1 || v[0] != formatVersion {
		t.Fatalf("superblock after opening a version 1 store: %v", v)
	}
}

// setIndexKey sets one key of the index, durably, as a commit would.
func setIndexKey(t *testing.T, s *Store, k, v []byte) {
	t.Helper()
	b := s.db.NewBatch()
	defer b.Close()
	b.Set(k, v, nil)
	if err := s.commit(b); err != nil {
		t.Fatal(err)
	}
}

func TestOrphanFilesRemovedOnOpen(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	apply(t, s, func(tx *Txn) { tx.Put("c", "live", pattern(1, 100<<10)) })
	live, _ := s.DataPath("c", "live")
	s.Close()
	// A file written for a transaction that never committed.
	orphan := s.filePath(0xabcdef)
	f, err := fs.Create(orphan, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("junk"))
	f.Close()
	s = openMem(t, fs)
	defer s.Close()
	if _, err := fs.Stat(orphan); err == nil {
		t.Fatal("orphan data file survived Open")
	}
	if _, err := fs.Stat(live); err != nil {
		t.Fatalf("live data file removed: %v", err)
	}
	if _, err := fs.Stat("/osd/meta"); err != nil {
		t.Fatalf("MetaDir default is not Dir/meta: %v", err)
	}
}

func TestUsageRealDisk(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	apply(t, s, func(tx *Txn) {
		tx.Put("c", "a", make([]byte, 100))
		tx.Put("c", "b", make([]byte, 200<<10))
	})
	u, err := s.Usage()
	if err != nil || u.Objects != 2 || u.DataBytes != 100+200<<10 || u.TotalBytes <= 0 || u.FreeBytes <= 0 || u.MetaTotalBytes <= 0 {
		t.Fatalf("usage %+v %v", u, err)
	}
}

// The commit log takes three segments of the memtable's size: on a small
// disk the memtable shrinks so the log leaves room for data.
func TestMemTableSizeFollowsDiskSize(t *testing.T) {
	small := smallDisk{vfs.NewMem(), 160 << 20}
	if got := memTableSize(small, "/"); got != 4<<20 {
		t.Fatalf("160 MiB disk: memtable of %d bytes, want the 4 MiB floor", got)
	}
	mid := smallDisk{vfs.NewMem(), 1 << 30}
	if got := memTableSize(mid, "/"); got != 16<<20 {
		t.Fatalf("1 GiB disk: memtable of %d bytes, want 16 MiB", got)
	}
	// A disk of a decimal size: segments stay whole MiBs (multiples of the
	// 4 KiB a segment must be), not 1e9/64 bytes.
	decimal := smallDisk{vfs.NewMem(), 1e9}
	if got := memTableSize(decimal, "/"); got != 14<<20 {
		t.Fatalf("1 GB disk: memtable of %d bytes, want 14 MiB", got)
	}
	big := smallDisk{vfs.NewMem(), 1 << 40}
	if got := memTableSize(big, "/"); got != 64<<20 {
		t.Fatalf("1 TiB disk: memtable of %d bytes, want 64 MiB", got)
	}
}

// smallDisk reports a disk of the given size.
type smallDisk struct {
	vfs.FS
	total uint64
}

func (d smallDisk) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{TotalBytes: d.total, AvailBytes: d.total}, nil
}

// An xattr or omap change leaves the object's record, and so its mtime,
// as it was; a data change or a re-creation rewrites it.
func TestKeyChangesLeaveTheRecord(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	stat := func(name string) Info {
		t.Helper()
		info, err := s.Stat("c", name)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	apply(t, s, func(tx *Txn) {
		tx.Put("c", "inline", []byte("small"))
		tx.Write("c", "file", 0, bytes.Repeat([]byte{7}, 3*InlineMax))
	})
	for _, name := range []string{"inline", "file"} {
		before := stat(name)
		time.Sleep(2 * time.Millisecond)
		apply(t, s, func(tx *Txn) {
			tx.SetXattr("c", name, "v", []byte("1"))
			tx.OmapSet("c", name, []byte("k"), []byte("x"))
			tx.OmapRmRange("c", name, []byte("a"), []byte("b"))
		})
		apply(t, s, func(tx *Txn) { tx.RmXattr("c", name, "v"); tx.OmapRm("c", name, []byte("k")) })
		if after := stat(name); after != before {
			t.Fatalf("%s: key changes rewrote the record: %+v, was %+v", name, after, before)
		}
		time.Sleep(2 * time.Millisecond)
		apply(t, s, func(tx *Txn) { tx.SetXattr("c", name, "v", []byte("2")); tx.Write("c", name, 1, []byte("y")) })
		if after := stat(name); !after.Mtime.After(before.Mtime) {
			t.Fatalf("%s: a write kept mtime %v", name, after.Mtime)
		}
		if v, err := s.GetXattr("c", name, "v"); err != nil || string(v) != "2" {
			t.Fatalf("%s: xattr %q, %v", name, v, err)
		}
	}
	// Deleted and created again in one transaction, by a key change alone:
	// a new, empty object with a record of its own.
	apply(t, s, func(tx *Txn) { tx.Delete("c", "inline"); tx.SetXattr("c", "inline", "v", []byte("3")) })
	if info := stat("inline"); info.Size != 0 {
		t.Fatalf("re-created object has size %d", info.Size)
	}
	if got := mustRead(t, s, "c", "inline", 0, 0); len(got) != 0 {
		t.Fatalf("re-created object reads %q", got)
	}
}

// dirtyBlocks orders blocks, a run of them as well as scattered ones.
func TestDirtyBlocks(t *testing.T) {
	for _, blocks := range [][]uint64{{}, {7}, {3, 4, 5, 6}, {9, 2, 5}, {1, 2, 4}, {0, 1023, 512}} {
		m := map[uint64][]byte{}
		for _, b := range blocks {
			m[b] = nil
		}
		got := dirtyBlocks(m)
		want := slices.Sorted(maps.Keys(m))
		if !slices.Equal(got, want) {
			t.Errorf("dirtyBlocks of %v = %v, want %v", blocks, got, want)
		}
	}
	run := map[uint64][]byte{}
	for b := uint64(100); b < 1124; b++ {
		run[b] = nil
	}
	if got := dirtyBlocks(run); len(got) != 1024 || got[0] != 100 || got[1023] != 1123 || !slices.IsSorted(got) {
		t.Errorf("dirtyBlocks of a 1,024-block run: %d blocks from %d to %d", len(got), got[0], got[len(got)-1])
	}
}
