package osd

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// keysWrite applies a change of keys to a shard as a member does: at
// version ver, replacing prev (0: none), with the flags the primary sends
// (keys and partial). A delete turns the shard into a tombstone without
// its keys, as planShards does.
func keysWrite(s *Server, name string, ver, prev, size uint64, tomb bool, change func(txn *objstore.Txn)) error {
	m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Size: size, Tombstone: tomb}
	if prev != 0 {
		m.Prev = pg.EVersion{Epoch: 1, Version: prev}
	}
	txn := &objstore.Txn{}
	flags := proto.FlagShardKeys | proto.FlagShardPartial
	if tomb {
		txn.Delete(testShardColl, name)
		txn.Put(testShardColl, name, nil)
		flags = proto.FlagShardKeys
	}
	change(txn)
	txn.SetXattr(testShardColl, name, versionXattr, m.Ver.Encode())
	return s.applyShardWrite(testShardColl, name, m, txn, flags)
}

// wantKeys checks the user xattrs and the omap of an object of the shard
// collection.
func wantKeys(t *testing.T, s *Server, name string, xattrs, omap map[string]string) {
	t.Helper()
	got := map[string]string{}
	xs, err := s.store.Xattrs(testShardColl, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for k, v := range xs {
		if k[0] != 0 {
			got[k] = string(v)
		}
	}
	if !maps.Equal(got, xattrs) {
		t.Fatalf("%s: xattrs %v, want %v", name, got, xattrs)
	}
	kvs, _, err := s.store.OmapList(testShardColl, name, nil, nil, 100)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got = map[string]string{}
	for _, kv := range kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(got, omap) {
		t.Fatalf("%s: omap %v, want %v", name, got, omap)
	}
}

func setKeys(name, x, k string) func(txn *objstore.Txn) {
	return func(txn *objstore.Txn) {
		txn.SetXattr(testShardColl, name, "x", []byte(x))
		txn.OmapSet(testShardColl, name, []byte("k"), []byte(k))
	}
}

type kv = map[string]string

// A change of keys keeps the old values (or absence) of the keys it
// changes (an undo record, ecundo.go); a rollback restores them with the
// old bytes, a trim drops them, and a
// shard at another version than the one the change replaces refuses it.
func TestShardKeysRollBack(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one"), false)
	if err := keysWrite(s, "o", 2, 1, 3, false, setKeys("o", "a", "1")); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 2, 1, true, []byte("one"), []byte("one"))
	wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})
	wantKeys(t, s, rollbackName("o"), kv{}, kv{"xx": "a", "ok": "a"}) // undo record: both keys were absent
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 2, 0)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 2, 0, false, []byte("one"), nil)
	wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})

	if err := keysWrite(s, "o", 4, 3, 3, false, setKeys("o", "b", "2")); !errors.Is(err, errShardVersion) {
		t.Fatalf("a change of keys over a shard at another version: %v, want it refused", err)
	}
	change := func(txn *objstore.Txn) {
		setKeys("o", "b", "2")(txn)
		txn.OmapSet(testShardColl, "o", []byte("k2"), []byte("new"))
		txn.RmXattr(testShardColl, "o", "x")
	}
	if err := keysWrite(s, "o", 3, 2, 3, false, change); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, s, "o", kv{}, kv{"k": "2", "k2": "new"})
	wantKeys(t, s, rollbackName("o"), kv{}, kv{"xx": "va", "ok": "v1", "ok2": "a"}) // their old values
	for range 2 {                                                                   // a rollback sent again changes nothing
		if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 3, 2)}); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s, "o", 2, 0, false, []byte("one"), nil)
		wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})
	}
}

// A data write leaves the keys and keeps none; its rollback restores the
// bytes and leaves the keys (the write did not change them). A delete
// takes the keys with the shard, and its rollback brings both back.
func TestShardKeysAcrossDataWritesAndDeletes(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one"), false)
	if err := keysWrite(s, "o", 2, 1, 3, false, setKeys("o", "a", "1")); err != nil {
		t.Fatal(err)
	}
	writeShard(t, s, "o", 3, []byte("three"), false)
	wantShard(t, s, "o", 3, 2, true, []byte("three"), []byte("one"))
	wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})
	if _, err := s.store.GetXattr(testShardColl, rollbackName("o"), shardKeysXattr); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a data write's kept shard says it carries keys: %v", err)
	}
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 3, 2)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 2, 0, false, []byte("one"), nil)
	wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})

	if err := keysWrite(s, "o", 4, 0, 0, true, func(*objstore.Txn) {}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 4, 2, true, nil, []byte("one"))
	wantKeys(t, s, "o", kv{}, kv{})
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 4, 2)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 2, 0, false, []byte("one"), nil)
	wantKeys(t, s, "o", kv{"x": "a"}, kv{"k": "1"})
}

// A create of keys over a tombstone starts with none of the deleted
// object's, and rolls back to absent.
func TestShardKeysCreateOverTombstone(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	if err := keysWrite(s, "o", 1, 0, 0, false, func(txn *objstore.Txn) {
		txn.Put(testShardColl, "o", nil)
		setKeys("o", "a", "1")(txn)
	}); err != nil {
		t.Fatal(err)
	}
	if err := keysWrite(s, "o", 2, 0, 0, true, func(*objstore.Txn) {}); err != nil {
		t.Fatal(err)
	}
	if err := keysWrite(s, "o", 3, 0, 0, false, func(txn *objstore.Txn) {
		txn.Delete(testShardColl, "o")
		txn.Put(testShardColl, "o", nil)
		txn.OmapSet(testShardColl, "o", []byte("fresh"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 3, 0, true, nil, nil)
	wantKeys(t, s, "o", kv{}, kv{"fresh": "1"})
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 3, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Stat(testShardColl, "o"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a create of keys rolled back is still there: %v", err)
	}
}

// A set of omap keys that could take an erasure-coded object past
// maxShardOmapKeys is refused, naming the bound and what to do; one that
// fits is not (the count pages through the omap).
func TestShardOmapRoom(t *testing.T) {
	old := maxShardOmapKeys
	maxShardOmapKeys = 2500
	t.Cleanup(func() { maxShardOmapKeys = old })
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one"), false)
	err := keysWrite(s, "o", 2, 1, 3, false, func(txn *objstore.Txn) {
		for i := range 2400 {
			txn.OmapSet(testShardColl, "o", fmt.Appendf(nil, "k%05d", i), []byte("v"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.omapRoom(testShardColl, "o", 100); err != nil {
		t.Fatalf("2,400 keys and 100 more, within 2,500: %v", err)
	}
	err = s.omapRoom(testShardColl, "o", 101)
	if err == nil || !strings.Contains(err.Error(), "2500 an erasure-coded object may hold: keep large maps in a replicated pool") {
		t.Fatalf("2,400 keys and 101 more, past 2,500: %v", err)
	}
}
