package osd

import (
	"errors"
	"reflect"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// splitTrims cuts a batch into requests of at most max entries, keeping
// every entry once and in order, a PG split across two where it must.
func TestSplitTrims(t *testing.T) {
	mk := func(pg uint32, n int) proto.PGShardEntries {
		g := proto.PGShardEntries{PG: clustermap.PGID{Pool: 1, Seed: pg}}
		for i := range n {
			g.Entries = append(g.Entries, proto.ShardEntry{Object: "o", Ver: [2]uint64{uint64(pg), uint64(i)}})
		}
		return g
	}
	gs := []proto.PGShardEntries{mk(1, 3), mk(2, 5), mk(3, 1)}
	for _, max := range []int{1, 2, 4, 9, 100} {
		parts := splitTrims(gs, max)
		var seen []proto.ShardEntry
		for _, p := range parts {
			n := 0
			for _, g := range p {
				for _, e := range g.Entries {
					if e.Ver[0] != uint64(g.PG.Seed) {
						t.Fatalf("max %d: an entry of pg %d sent under pg %d", max, e.Ver[0], g.PG.Seed)
					}
				}
				n += len(g.Entries)
				seen = append(seen, g.Entries...)
			}
			if n == 0 || n > max {
				t.Fatalf("max %d: a request of %d entries", max, n)
			}
		}
		if len(seen) != 9 || seen[0].Ver != [2]uint64{1, 0} || seen[8].Ver != [2]uint64{3, 0} {
			t.Fatalf("max %d: %d entries went out: %+v", max, len(seen), seen)
		}
		if want := (9 + max - 1) / max; len(parts) != want {
			t.Fatalf("max %d: %d requests, want %d", max, len(parts), want)
		}
	}
}

// A batch keeps one trim per object of a PG, the newest write's whatever
// order they came in, and the trims of other objects and PGs beside it.
func TestTrimBatch(t *testing.T) {
	pa, pb := clustermap.PGID{Pool: 1, Seed: 1}, clustermap.PGID{Pool: 1, Seed: 2}
	trim := func(id clustermap.PGID, name string, epoch, ver uint64) shardTrim {
		return shardTrim{pg: id, entry: proto.ShardEntry{Object: name, Ver: [2]uint64{epoch, ver}}}
	}
	var b trimBatch
	for _, tr := range []shardTrim{
		trim(pa, "x", 5, 10), trim(pa, "y", 5, 11), trim(pa, "x", 5, 12),
		trim(pb, "x", 5, 3), trim(pa, "x", 4, 99), trim(pa, "y", 6, 1),
	} {
		b.add(tr)
	}
	want := map[clustermap.PGID][]proto.ShardEntry{
		pa: {{Object: "x", Ver: [2]uint64{5, 12}}, {Object: "y", Ver: [2]uint64{6, 1}}},
		pb: {{Object: "x", Ver: [2]uint64{5, 3}}},
	}
	if !reflect.DeepEqual(b.byPG, want) {
		t.Fatalf("batch %+v, want %+v", b.byPG, want)
	}
}

// applyTrims trims the shards of several PGs in one transaction: a
// tombstone goes, a put keeps its shard and drops what it kept; a shard at
// another version, or one whose meta is damaged, is left as it is without
// failing the others.
func TestApplyTrimsAcrossPGs(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	const other = "1.8s1"
	writeShard(t, s, "a", 1, []byte("one"), false)
	writeShard(t, s, "a", 2, []byte("two"), false) // keeps "one"
	writeShard(t, s, "b", 3, []byte("bee"), false)
	deleteShard(t, s, "b", 4) // a tombstone keeping "bee"
	writeShard(t, s, "c", 5, []byte("sea"), false)
	bad := &objstore.Txn{}
	bad.SetXattr(testShardColl, "c", shardMetaXattr, []byte("garbage"))
	if err := s.store.Apply(bad); err != nil {
		t.Fatal(err)
	}
	// The same name in another PG's collection, at a version no trim names.
	m := &objstore.Txn{}
	m.Put(other, "a", []byte("x"))
	if err := s.applyShardWrite(other, "a", pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: 7}, Size: 1}, m, 0); err != nil {
		t.Fatal(err)
	}
	gs := []proto.PGShardEntries{
		{PG: clustermap.PGID{Pool: 1, Seed: 7}, Entries: []proto.ShardEntry{entry("a", 2, 0), entry("b", 4, 0), entry("c", 5, 0)}},
		{PG: clustermap.PGID{Pool: 1, Seed: 8}, Entries: []proto.ShardEntry{entry("a", 6, 0)}},
		{PG: clustermap.PGID{Pool: 1, Seed: 9}, Entries: []proto.ShardEntry{entry("a", 2, 0)}}, // not held here
	}
	colls := []string{testShardColl, other, ""}
	keys := []string{testShardColl + "/a", testShardColl + "/b", testShardColl + "/c", other + "/a"}
	if _, _, err := s.shardMeta(testShardColl, "c"); err == nil {
		t.Fatal("the damaged meta reads")
	}
	if err := s.applyTrims(colls, keys, gs); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "a", 2, 0, false, []byte("two"), nil)
	if _, err := s.store.Stat(testShardColl, "b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a trimmed tombstone is still there: %v", err)
	}
	if m, found, _ := s.shardMeta(other, "a"); !found || m.Ver.Version != 7 || !m.CanRollBack {
		t.Fatalf("a shard at another version than its trim was trimmed: %+v", m)
	}
}
