package osd

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A read served by the primary's own shard alone: only a range inside its
// data chunk, of a shard with nothing to roll back to, not stale, not a
// tombstone, whose bytes pass their checksums; anything else is left to
// the paths that ask the other positions (nil).
func TestECReadLocal(t *testing.T) {
	s, pool, id, fs := ecLocalServer(t)
	st := s.store
	l := ec.LayoutOf(*pool.EC)
	coll := shardColl(id, 0)
	obj := make([]byte, 16*32768) // 16 stripes: a shard of 256 KiB, in a data file
	for i := range obj {
		obj[i] = byte(i*7 + i/4096)
	}
	var shard []byte // position 0: chunk 0 of every stripe
	for st := 0; st < len(obj); st += 32768 {
		shard = append(shard, obj[st:st+16384]...)
	}
	put := func(ver uint64, meta pg.ShardMeta) {
		t.Helper()
		txn := &objstore.Txn{}
		txn.Put(coll, "o", shard)
		meta.Ver, meta.Size, meta.Position = pg.EVersion{Epoch: 1, Version: ver}, uint64(len(obj)), 0
		txn.SetXattr(coll, "o", shardMetaXattr, meta.Encode())
		if err := st.Apply(txn); err != nil {
			t.Fatal(err)
		}
	}
	p := &pgState{}
	p.prim.Epoch = 1
	read := func(off, n uint64) *proto.Response {
		return s.ecReadLocal(pool, l, p, &proto.Request{Op: proto.OpRead, PG: id, Object: "o", Offset: off, Length: n})
	}
	put(1, pg.ShardMeta{})
	for _, c := range []struct{ off, n uint64 }{{0, 4096}, {100, 16284}, {32768 + 5, 4000}} {
		r := read(c.off, c.n)
		if r == nil || r.Size != uint64(len(obj)) || !bytes.Equal(r.Data, obj[c.off:c.off+c.n]) {
			t.Fatalf("[%d, +%d) in the primary's chunks: %+v", c.off, c.n, r)
		}
		r.Release()
	}
	if r := s.ecReadLocal(pool, l, p, &proto.Request{Op: proto.OpStat, PG: id, Object: "o"}); r == nil || r.Size != uint64(len(obj)) {
		t.Fatalf("stat: %+v", r)
	}
	for _, c := range []struct{ off, n uint64 }{{16384, 4096}, {16000, 1000}, {0, 0}} {
		if r := read(c.off, c.n); r != nil {
			t.Fatalf("[%d, +%d) touches another position's chunk, yet was served locally", c.off, c.n)
		}
	}
	put(2, pg.ShardMeta{CanRollBack: true, Prev: pg.EVersion{Epoch: 1, Version: 1}})
	if read(0, 4096) != nil {
		t.Fatal("a shard with a write that may roll back was read alone")
	}
	put(3, pg.ShardMeta{Tombstone: true})
	if read(0, 4096) != nil {
		t.Fatal("a tombstone was read alone")
	}
	put(4, pg.ShardMeta{})
	p.markMissing(s.id, "o", 1)
	if read(0, 4096) != nil {
		t.Fatal("a shard marked missing was read alone")
	}
	p.clearMissingAll("o", 1)
	rotShard(t, fs, st, coll, "o", 10)
	if r := read(0, 4096); r != nil {
		t.Fatalf("bytes failing their checksums were served: %x", r.Data[:16])
	}
	if r := read(8192, 4096); r == nil || !bytes.Equal(r.Data, obj[8192:12288]) {
		t.Fatal("a good block of the same shard was not served")
	}
}

// ecLocalServer is an OSD holding position 0 of pg 1.0 of a 2+1 pool of
// three hosts, its store in memory.
func ecLocalServer(t *testing.T) (*Server, *clustermap.Pool, clustermap.PGID, vfs.FS) {
	m := &clustermap.Map{Epoch: 1, Pools: []clustermap.Pool{{ID: 1, Name: "ec", Size: 3, MinSize: 2, PGNum: 1,
		EC: &clustermap.ECProfile{K: 2, M: 1, StripeUnit: 16384}}}}
	for i := range 3 {
		m.Hosts = append(m.Hosts, clustermap.Host{Name: fmt.Sprint("h", i)})
		m.OSDs = append(m.OSDs, clustermap.OSD{ID: clustermap.OSDID(i), Host: fmt.Sprint("h", i), Weight: 1, Up: true, In: true})
	}
	pool, _ := m.PoolByName("ec")
	id := clustermap.PGID{Pool: 1}
	_, osds := placement.NewTable(m).Positions(pool, id)
	fs := vfs.NewMem()
	st, err := objstore.Open(objstore.Options{Dir: "/osd", FS: fs, ReserveBytes: -1, DataCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &Server{id: osds[0], store: st, view: mapview.Static(m), seed: maphash.MakeSeed()}, pool, id, fs
}

// A client's read of a position (proto.FlagSettled) is refused by the
// PG's primary unless the PG is active and clean, and reads the shard's
// meta and bytes under the shard's lock, so a shard write in progress
// holds it back and it never pairs one version's meta with another's
// bytes; a primary's read of a position (no flag) does not wait.
func TestSettledShardRead(t *testing.T) {
	s, pool, id, _ := ecLocalServer(t)
	coll := shardColl(id, 0)
	data := bytes.Repeat([]byte("settled!"), 512)
	txn := &objstore.Txn{}
	txn.Put(coll, "o", data)
	meta := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: 1}, Size: uint64(len(data)) * 2}
	txn.SetXattr(coll, "o", shardMetaXattr, meta.Encode())
	if err := s.store.Apply(txn); err != nil {
		t.Fatal(err)
	}
	read := func(flags uint32) chan *proto.Response {
		out := make(chan *proto.Response, 1)
		go func() {
			out <- s.readShard(s.view.Table(), &proto.Request{Op: proto.OpReadReplica, Flags: flags, Epoch: 1, PG: id, Object: "o", Length: uint64(len(data))})
		}()
		return out
	}
	if r := <-read(proto.FlagSettled); r.Status != proto.StatusUnavailable {
		t.Fatalf("the primary of a PG it has not peered vouched for a client's read: %s", r.Status)
	}
	acting := s.view.Table().Acting(pool, id)
	p := &pgState{phase: phaseActive}
	_, p.prim.Positions = s.view.Table().Positions(pool, id)
	p.prim.Acting, p.prim.Complete = acting, acting
	s.pgs = map[clustermap.PGID]*pgState{id: p}
	p.nMissing.Store(1)
	if r := <-read(proto.FlagSettled); r.Status != proto.StatusUnavailable {
		t.Fatalf("the primary of a PG with copies missing vouched for a client's read: %s", r.Status)
	}
	p.nMissing.Store(0)
	unlock := s.shards.lockAll(s.seed, coll, []string{"o"})
	select {
	case r := <-read(0):
		if r.Status != proto.StatusOK || !bytes.Equal(r.Data, data) {
			t.Fatalf("a primary's read of the position: %s %s", r.Status, r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a primary's read of a position waited for the shard's lock")
	}
	settled := read(proto.FlagSettled)
	select {
	case r := <-settled:
		t.Fatalf("a settled read went ahead while a write held the shard's lock: %s", r.Status)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case r := <-settled:
		if r.Status != proto.StatusOK || !bytes.Equal(r.Data, data) || len(r.KVs) != 1 {
			t.Fatalf("the settled read after the write: %s %s", r.Status, r.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the settled read did not end once the lock was free")
	}
}
