package osd

import (
	"bytes"
	"errors"
	"hash/maphash"
	"testing"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// shardTestServer is a Server over an in-memory store, enough for the
// shard writes, rollbacks and trims of ecrollback.go.
func shardTestServer(t *testing.T, fs vfs.FS) *Server {
	t.Helper()
	st, err := objstore.Open(objstore.Options{Dir: "/osd", FS: fs, ReserveBytes: -1, DataCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Server{store: st, seed: maphash.MakeSeed()}
}

const testShardColl = "1.7s0"

// writeShard applies a shard write as a member does.
func writeShard(t *testing.T, s *Server, name string, ver uint64, data []byte, tomb bool) {
	t.Helper()
	m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Size: uint64(len(data)), Tombstone: tomb}
	txn := &objstore.Txn{}
	txn.Put(testShardColl, name, data)
	txn.SetXattr(testShardColl, name, versionXattr, m.Ver.Encode())
	if err := s.applyShardWrite(testShardColl, name, m, txn, 0); err != nil {
		t.Fatal(err)
	}
}

// keptFor reads what name's shard keeps to roll back to.
func keptFor(t *testing.T, s *Server, name string) keptShard {
	t.Helper()
	k, err := s.keptOf(testShardColl, name)
	if err != nil {
		t.Fatalf("%s: what it keeps: %v", name, err)
	}
	return k
}

// wantShard checks a shard's meta and bytes, and the shard it keeps, as a
// read of the previous shard returns it (kept whole or as an undo record).
func wantShard(t *testing.T, s *Server, name string, ver, prev uint64, canRollBack bool, data, kept []byte) {
	t.Helper()
	m, found, err := s.shardMeta(testShardColl, name)
	if err != nil || !found {
		t.Fatalf("%s: meta %v, found %v", name, err, found)
	}
	if m.Ver.Version != ver || m.Prev.Version != prev || m.CanRollBack != canRollBack {
		t.Fatalf("%s: meta %+v, want version %d, rolling back to %d: %v", name, m, ver, prev, canRollBack)
	}
	if got, err := s.store.Read(testShardColl, name, 0, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%s: holds %q (%v), want %q", name, got, err, data)
	}
	if kept == nil {
		if got, err := s.store.Read(testShardColl, rollbackName(name), 0, 0); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: keeps %q (%v), want nothing", name, got, err)
		}
		if _, err := s.store.GetXattr(testShardColl, name, inlineUndoXattr); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s: keeps an undo record of its own (%v), want nothing", name, err)
		}
		return
	}
	r := s.readPrevShard(&proto.Response{Status: proto.StatusOK}, testShardColl, &proto.Request{Object: name, Length: 1 << 30}, keptFor(t, s, name))
	if r.Status != proto.StatusOK || !bytes.Equal(r.Data, kept) {
		t.Fatalf("%s: keeps %q (%s), want %q", name, r.Data, r.Message, kept)
	}
}

func entry(name string, ver, to uint64) proto.ShardEntry {
	e := proto.ShardEntry{Object: name, Ver: [2]uint64{1, ver}}
	if to != 0 {
		e.To = [2]uint64{1, to}
	}
	return e
}

// Each shard write keeps one level of rollback in its own transaction; a
// rollback restores it (or removes a create), a trim drops it (and a
// tombstone), both guarded by version and idempotent.
func TestShardRollBackState(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one"), false)
	wantShard(t, s, "o", 1, 0, true, []byte("one"), nil)
	writeShard(t, s, "o", 2, []byte("two"), false)
	wantShard(t, s, "o", 2, 1, true, []byte("two"), []byte("one"))
	writeShard(t, s, "o", 2, []byte("two"), false) // sent again: what it rolls back to stays
	wantShard(t, s, "o", 2, 1, true, []byte("two"), []byte("one"))
	if st, err := s.shardState(testShardColl, "o"); err != nil || st.Ver.Version != 2 || st.Prev.Version != 1 || !st.CanRollBack {
		t.Fatalf("peering's state: %+v, %v", st, err)
	}
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 3, 1)}); err == nil {
		t.Fatal("a rollback from a version the shard does not hold went through")
	}
	for range 2 {
		if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s, "o", 1, 0, false, []byte("one"), nil)
	}

	writeShard(t, s, "o", 4, nil, true) // a delete: a tombstone keeping "one"
	wantShard(t, s, "o", 4, 1, true, nil, []byte("one"))
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 3, 0)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 4, 1, true, nil, []byte("one")) // another version: left alone
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 4, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Stat(testShardColl, "o"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a trimmed tombstone is still there: %v", err)
	}

	writeShard(t, s, "n", 5, []byte("new"), false) // a create rolls back to absent
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("n", 5, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Stat(testShardColl, "n"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a create rolled back is still there: %v", err)
	}
	writeShard(t, s, "n", 6, []byte("again"), false)
	writeShard(t, s, "n", 7, nil, true)
	writeShard(t, s, "n", 8, []byte("over a tombstone"), false) // rolls back to absent, like the tombstone
	wantShard(t, s, "n", 8, 0, true, []byte("over a tombstone"), nil)
}

// A shard whose meta is damaged keeps nothing to roll back to: its
// write cannot roll back there (peering rebuilds the position if the
// write does not stand), and a delete's tombstone still goes when trimmed.
func TestShardRollBackOverADamagedShard(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one"), false)
	txn := &objstore.Txn{}
	txn.SetXattr(testShardColl, "o", shardMetaXattr, []byte("garbage"))
	if err := s.store.Apply(txn); err != nil {
		t.Fatal(err)
	}
	writeShard(t, s, "o", 2, nil, true)
	wantShard(t, s, "o", 2, 0, false, nil, nil)
	if st, err := s.shardState(testShardColl, "o"); err != nil || !st.Tombstone || st.CanRollBack {
		t.Fatalf("peering's state of a tombstone that cannot roll back: %+v, %v", st, err)
	}
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 2, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Stat(testShardColl, "o"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a trimmed tombstone is still there: %v", err)
	}
}

// The rollback state is durable with the write it belongs to: after a
// power cut (a crash clone that keeps only what was synced) a shard
// written over holds the new version and the old one to roll back to.
func TestShardRollBackStateSurvivesACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := shardTestServer(t, fs)
	big := bytes.Repeat([]byte("b"), 1<<20)
	writeShard(t, s, "o", 1, big, false)
	writeShard(t, s, "o", 2, []byte("small"), false)
	s2 := shardTestServer(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
	wantShard(t, s2, "o", 2, 1, true, []byte("small"), big)
	if err := s2.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s2, "o", 1, 0, false, big, nil)
}

// deleteShard applies a delete's shard write as a member does: a
// tombstone, the object's keys going with the old shard.
func deleteShard(t *testing.T, s *Server, name string, ver uint64) {
	t.Helper()
	m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Tombstone: true}
	txn := &objstore.Txn{}
	txn.Delete(testShardColl, name)
	txn.Put(testShardColl, name, nil)
	txn.SetXattr(testShardColl, name, versionXattr, m.Ver.Encode())
	if err := s.applyShardWrite(testShardColl, name, m, txn, proto.FlagShardKeys); err != nil {
		t.Fatal(err)
	}
}

// A delete keeps the old shard by renaming it, its data file and keys
// with it, whatever its size; a rollback puts the data and keys back, and
// a kept shard found damaged rolls back to none (the position is rebuilt
// from the others) instead of failing the rollback.
func TestShardDeleteKeepsByRename(t *testing.T) {
	fs := vfs.NewMem()
	s := shardTestServer(t, fs)
	data := bytes.Repeat([]byte("shard 256 KiB "), 256<<10/14)
	writeShard(t, s, "o", 1, data, false)
	keys := &objstore.Txn{}
	keys.SetXattr(testShardColl, "o", "user.x", []byte("1"))
	keys.OmapSet(testShardColl, "o", []byte("k"), []byte("v"))
	if err := s.store.Apply(keys); err != nil {
		t.Fatal(err)
	}
	path, _ := s.store.DataPath(testShardColl, "o")
	deleteShard(t, s, "o", 2)
	wantShard(t, s, "o", 2, 1, true, nil, data)
	if kept, _ := s.store.DataPath(testShardColl, rollbackName("o")); kept != path || path == "" {
		t.Fatalf("the deleted shard is kept in %q, not in its own data file %q: it was copied", kept, path)
	}
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 1, 0, false, data, nil)
	if x, _ := s.store.Xattrs(testShardColl, "o"); string(x["user.x"]) != "1" {
		t.Fatalf("xattrs after the delete rolled back: %q", x)
	}
	if kv, _, _ := s.store.OmapList(testShardColl, "o", nil, nil, 0); len(kv) != 1 || string(kv[0].Value) != "v" {
		t.Fatalf("omap after the delete rolled back: %v", kv)
	}

	deleteShard(t, s, "o", 3)
	rotShard(t, fs, s.store, testShardColl, rollbackName("o"), 4096)
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 3, 1)}); err != nil {
		t.Fatalf("a rollback to a damaged kept shard failed: %v", err)
	}
	for _, name := range []string{"o", rollbackName("o")} {
		if _, err := s.store.Stat(testShardColl, name); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%q is still there after a rollback to a damaged kept shard: %v", name, err)
		}
	}
}

// A put over a shard, and a write of every byte of it, keep the old shard
// by a rename, whatever its size, the object's xattrs set again on the new
// shard; a rollback puts the old bytes back. A shard with an omap is
// copied as before, its omap left in place.
func TestShardReplacedWhollyKeepsByRename(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	old := bytes.Repeat([]byte("old shard 256 KiB "), 256<<10/18)
	writeShard(t, s, "o", 1, old, false)
	keys := &objstore.Txn{}
	keys.SetXattr(testShardColl, "o", "user.x", []byte("1"))
	if err := s.store.Apply(keys); err != nil {
		t.Fatal(err)
	}
	path := func(name string) string {
		p, _ := s.store.DataPath(testShardColl, name)
		return p
	}
	// replace runs write (version 2 over 1) and checks what is kept, then
	// rolls it back.
	replace := func(what string, renamed bool, write func(), data []byte) {
		t.Helper()
		before := path("o")
		write()
		if kept := path(rollbackName("o")); (kept == before) != renamed || before == "" {
			t.Fatalf("%s: the old shard's file %q, the kept one's %q: renamed %v, want %v", what, before, kept, kept == before, renamed)
		}
		if x, _ := s.store.Xattrs(testShardColl, "o"); string(x["user.x"]) != "1" {
			t.Fatalf("%s: the shard's xattrs %q lost user.x", what, x)
		}
		wantShard(t, s, "o", 2, 1, true, data, old)
		if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s, "o", 1, 0, false, old, nil)
	}
	fresh := bytes.Repeat([]byte("new"), len(old)/3)
	replace("a put", true, func() { writeShard(t, s, "o", 2, fresh, false) }, fresh)

	half, other := len(old)/2, bytes.Repeat([]byte("two"), len(old)/3)
	want := append(bytes.Clone(other[:half+100]), fresh[half+100:len(old)]...)
	replace("writes covering every byte", true, func() {
		m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: 2}, Prev: pg.EVersion{Epoch: 1, Version: 1}, Size: uint64(len(old))}
		txn := &objstore.Txn{}
		txn.Write(testShardColl, "o", uint64(half), fresh[half:len(old)])
		txn.Write(testShardColl, "o", 0, other[:half+100])
		txn.SetXattr(testShardColl, "o", versionXattr, m.Ver.Encode())
		if err := s.applyShardWrite(testShardColl, "o", m, txn, proto.FlagShardPartial); err != nil {
			t.Fatal(err)
		}
	}, want)

	omap := &objstore.Txn{}
	omap.OmapSet(testShardColl, "o", []byte("k"), []byte("v"))
	if err := s.store.Apply(omap); err != nil {
		t.Fatal(err)
	}
	replace("a put over a shard with an omap", false, func() { writeShard(t, s, "o", 2, fresh, false) }, fresh)
	if kv, _, _ := s.store.OmapList(testShardColl, "o", nil, nil, 0); len(kv) != 1 {
		t.Fatalf("a put over a shard with an omap, rolled back, left %d keys", len(kv))
	}
}

func TestCoversFromZero(t *testing.T) {
	r := func(a, b uint64) [2]uint64 { return [2]uint64{a, b} }
	for _, c := range []struct {
		ranges [][2]uint64
		size   uint64
		want   bool
	}{
		{nil, 0, true},
		{[][2]uint64{r(0, 10)}, 10, true},
		{[][2]uint64{r(0, 10)}, 11, false},
		{[][2]uint64{r(5, 10), r(0, 5)}, 10, true},
		{[][2]uint64{r(0, 4), r(5, 10)}, 10, false},
		{[][2]uint64{r(0, 8), r(3, 12)}, 12, true},
	} {
		if got := coversFromZero(c.ranges, c.size); got != c.want {
			t.Errorf("%v over %d: %v, want %v", c.ranges, c.size, got, c.want)
		}
	}
}
