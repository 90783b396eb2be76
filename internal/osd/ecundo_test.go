package osd

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestUndoOf(t *testing.T) {
	r := func(a, b uint64) [2]uint64 { return [2]uint64{a, b} }
	for _, c := range []struct {
		name string
		c    objstore.Changes
		size uint64
		want [][2]uint64
		ok   bool
	}{
		{"one write", objstore.Changes{Ranges: [][2]uint64{r(4096, 8192)}, MinTruncate: -1}, 1 << 20, [][2]uint64{r(4096, 8192)}, true},
		{"merged and sorted", objstore.Changes{Ranges: [][2]uint64{r(9000, 9100), r(100, 200), r(150, 300), r(300, 400)}, MinTruncate: -1}, 1 << 20, [][2]uint64{r(100, 400), r(9000, 9100)}, true},
		{"past the end", objstore.Changes{Ranges: [][2]uint64{r(1000, 5000), r(6000, 7000)}, MinTruncate: -1}, 4096 * 4, [][2]uint64{r(1000, 5000), r(6000, 7000)}, true},
		{"clipped", objstore.Changes{Ranges: [][2]uint64{r(16000, 20000)}, MinTruncate: -1}, 16384, [][2]uint64{r(16000, 16384)}, true},
		{"a cut", objstore.Changes{Ranges: [][2]uint64{r(0, 10)}, MinTruncate: 60000}, 65536, [][2]uint64{r(0, 10), r(60000, 65536)}, true},
		{"a cut under a write", objstore.Changes{Ranges: [][2]uint64{r(61000, 62000)}, MinTruncate: 60000}, 65536, [][2]uint64{r(60000, 65536)}, true},
		{"half the shard", objstore.Changes{Ranges: [][2]uint64{r(0, 8192)}, MinTruncate: -1}, 16384, [][2]uint64{r(0, 8192)}, false},
		{"a put", objstore.Changes{Ranges: [][2]uint64{r(0, 10)}, MinTruncate: -1, Whole: true}, 1 << 20, [][2]uint64{r(0, 10)}, false},
		{"nothing within", objstore.Changes{Ranges: [][2]uint64{r(1<<20, 2<<20)}, MinTruncate: -1}, 1 << 20, nil, true},
	} {
		u, ok := undoOf(c.c, c.size)
		if ok != c.ok || !slices.Equal(u.ranges, c.want) || u.size != c.size {
			t.Errorf("%s: %+v ok %v, want %v ok %v", c.name, u, ok, c.want, c.ok)
		}
	}
	var many objstore.Changes
	many.MinTruncate = -1
	for i := range uint64(maxUndoRanges + 1) {
		many.Ranges = append(many.Ranges, r(i*100, i*100+1))
	}
	if _, ok := undoOf(many, 1<<30); ok {
		t.Errorf("%d ranges: want the whole shard kept", len(many.Ranges))
	}
}

func FuzzDecodeShardUndo(f *testing.F) {
	f.Add((&shardUndo{size: 1 << 20, ranges: [][2]uint64{{0, 10}, {4096, 8192}}}).encode())
	f.Add((&shardUndo{size: 7}).encode())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := decodeShardUndo(b)
		if err != nil {
			return
		}
		if !bytes.Equal(u.encode(), b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, u, u.encode())
		}
		if u.bytes() > u.size || len(u.ranges) > maxUndoRanges {
			t.Fatalf("%+v: ranges beyond the size or too many", u)
		}
	})
}

// Random partial writes (writes at offsets, in and past the shard, and
// cuts) keep an undo record far smaller than the shard; the previous
// shard read through it, in random ranges, is the old shard, and a
// rollback puts the old shard back, byte for byte, with its meta.
func TestPartialShardWriteUndo(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	s := shardTestServer(t, vfs.NewMem())
	for round := range 60 {
		name := "o"
		old := randBytes(rng, 4096*(16+rng.IntN(64)))
		ver := uint64(2*round + 1)
		writeShard(t, s, name, ver, old, false)
		s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry(name, ver, 0)})
		m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver + 1}, Prev: pg.EVersion{Epoch: 1, Version: ver}, Size: 1}
		txn := &objstore.Txn{}
		want := append([]byte(nil), old...)
		for range 1 + rng.IntN(3) {
			off, data := rng.IntN(len(old)+8192), randBytes(rng, 1+rng.IntN(6000))
			txn.Write(testShardColl, name, uint64(off), data)
			if end := off + len(data); end > len(want) {
				want = append(want, make([]byte, end-len(want))...)
			}
			copy(want[off:], data)
		}
		if rng.IntN(3) == 0 {
			cut := len(old) - rng.IntN(8192)
			txn.Truncate(testShardColl, name, uint64(cut))
			want = append(want[:min(cut, len(want))], make([]byte, max(0, cut-len(want)))...)
		}
		txn.SetXattr(testShardColl, name, versionXattr, m.Ver.Encode())
		if err := s.applyShardWrite(testShardColl, name, m, txn, proto.FlagShardPartial); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got, _ := s.store.Read(testShardColl, name, 0, 0); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the write left the shard wrong", round)
		}
		u, kept, isUndo, err := s.undoKept(testShardColl, name)
		if err != nil || !isUndo || len(kept) > len(old)/2 || u.size != uint64(len(old)) {
			t.Fatalf("round %d: undo record %+v of %d bytes (%v, %v) for a %d-byte shard", round, u, len(kept), isUndo, err, len(old))
		}
		for range 8 {
			off, n := rng.IntN(len(old)+100), rng.IntN(len(old))
			r := s.readPrevShard(&proto.Response{Status: proto.StatusOK}, testShardColl, &proto.Request{Object: name, Offset: uint64(off), Length: uint64(n)})
			end := min(len(old), off+n)
			if n == 0 {
				end = len(old)
			}
			if r.Status != proto.StatusOK || !bytes.Equal(r.Data, old[min(off, len(old)):max(end, min(off, len(old)))]) {
				t.Fatalf("round %d: previous shard [%d, +%d): %v, wrong bytes", round, off, n, r.Status)
			}
		}
		if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry(name, ver+1, ver)}); err != nil {
			t.Fatalf("round %d: rollback: %v", round, err)
		}
		wantShard(t, s, name, ver, 0, false, old, nil)
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// A partial write's undo record is durable with it: after a power cut
// (a crash clone keeping only what was synced) the shard holds the write
// and rolls back to the old bytes.
func TestShardUndoSurvivesACrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := shardTestServer(t, fs)
	old := bytes.Repeat([]byte("o"), 1<<20)
	writeShard(t, s, "o", 1, old, false)
	m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: 2}, Prev: pg.EVersion{Epoch: 1, Version: 1}, Size: 1}
	txn := &objstore.Txn{}
	txn.Write(testShardColl, "o", 4096, []byte("new bytes"))
	txn.Truncate(testShardColl, "o", 1<<20-100)
	txn.SetXattr(testShardColl, "o", versionXattr, m.Ver.Encode())
	if err := s.applyShardWrite(testShardColl, "o", m, txn, proto.FlagShardPartial); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []int{0, 50, 100} {
		s2 := shardTestServer(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rand.New(rand.NewPCG(uint64(keep), 7))}))
		if _, kept, isUndo, err := s2.undoKept(testShardColl, "o"); err != nil || !isUndo || len(kept) != 9+100 {
			t.Fatalf("keeping %d%% of unsynced data: undo record of %d bytes (%v, %v), want 109", keep, len(kept), isUndo, err)
		}
		if err := s2.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s2, "o", 1, 0, false, old, nil)
	}
}
