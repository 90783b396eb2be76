package osd

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
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

// An inline undo record decodes to what was encoded, and what decodes
// encodes to a record that decodes the same: old bytes as many as the
// ranges cover, a meta without rollback state.
func FuzzDecodeInlineUndo(f *testing.F) {
	prev := pg.ShardMeta{Ver: pg.EVersion{Epoch: 3, Version: 9}, Size: 1 << 20, Position: 2}
	f.Add(encodeInlineUndo(prev, shardUndo{size: 1 << 16, ranges: [][2]uint64{{4096, 4100}}}, []byte("abcd")))
	f.Add(encodeInlineUndo(prev, shardUndo{size: 1 << 16}, nil))
	f.Add([]byte{0x2c, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, u, old, err := decodeInlineUndo(b)
		if err != nil {
			return
		}
		if uint64(len(old)) != u.bytes() || m.CanRollBack {
			t.Fatalf("%x: %d old bytes for ranges of %d, meta %+v", b, len(old), u.bytes(), m)
		}
		m2, u2, old2, err := decodeInlineUndo(encodeInlineUndo(m, u, old))
		if err != nil || !m2.Equal(m) || !reflect.DeepEqual(u2, u) || !bytes.Equal(old2, old) {
			t.Fatalf("%x: %+v %+v re-encoded decodes to %+v %+v (%v)", b, m, u, m2, u2, err)
		}
	})
}

// A small write's undo record lives on the shard (no rollback object), a
// larger one's in the rollback object; whichever the last write kept, the
// shard holds the other nowhere, a rollback goes back to the write before
// and a trim leaves nothing kept.
func TestInlineUndoFollowsItsWrite(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	shard := bytes.Repeat([]byte("a"), 256<<10)
	writeShard(t, s, "o", 1, shard, false)
	s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 1, 0)})
	write := func(ver uint64, off int, data []byte) {
		t.Helper()
		m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Prev: pg.EVersion{Epoch: 1, Version: ver - 1}, Size: uint64(len(shard))}
		txn := &objstore.Txn{}
		txn.Write(testShardColl, "o", uint64(off), data)
		txn.SetXattr(testShardColl, "o", versionXattr, m.Ver.Encode())
		if err := s.applyShardWrite(testShardColl, "o", m, txn, proto.FlagShardPartial); err != nil {
			t.Fatalf("version %d: %v", ver, err)
		}
	}
	wantKept := func(ver uint64, inline bool) {
		t.Helper()
		k := keptFor(t, s, "o")
		_, rbErr := s.store.Stat(testShardColl, rollbackName("o"))
		if !k.found || !k.isUndo || k.inline != inline || k.meta.Ver.Version != ver-1 || inline != errors.Is(rbErr, objstore.ErrNotFound) {
			t.Fatalf("version %d: keeps %+v at %s, undo %v inline %v (rollback object: %v), want inline %v", ver, k.found, k.meta.Ver, k.isUndo, k.inline, rbErr, inline)
		}
	}
	steps := []struct {
		off, n int
		inline bool
	}{{4096, 4096, true}, {0, 64 << 10, false}, {8192, 100, true}, {1 << 10, maxInlineUndo + 1, false}, {0, maxInlineUndo, true}}
	before := slices.Clone(shard)
	for i, st := range steps {
		ver := uint64(i + 2)
		before = slices.Clone(shard)
		data := bytes.Repeat([]byte{byte('b' + i)}, st.n)
		write(ver, st.off, data) // not trimmed: the last write's state is replaced
		copy(shard[st.off:], data)
		wantKept(ver, st.inline)
	}
	last := uint64(len(steps) + 1)
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", last, last-1)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", last-1, 0, false, before, nil)
	write(last, 100, []byte("xyz"))
	wantKept(last, true)
	s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", last, 0)})
	copy(before[100:], "xyz")
	wantShard(t, s, "o", last, 0, false, before, nil)
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
		k := keptFor(t, s, name)
		if !k.isUndo || len(k.old) > len(old)/2 || k.undo.size != uint64(len(old)) || k.inline != (len(k.old) <= maxInlineUndo) {
			t.Fatalf("round %d: undo record %+v of %d bytes (undo %v, inline %v) for a %d-byte shard", round, k.undo, len(k.old), k.isUndo, k.inline, len(old))
		}
		for range 8 {
			off, n := rng.IntN(len(old)+100), rng.IntN(len(old))
			r := s.readPrevShard(&proto.Response{Status: proto.StatusOK}, testShardColl, &proto.Request{Object: name, Offset: uint64(off), Length: uint64(n)}, keptFor(t, s, name))
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
		if k, err := s2.keptOf(testShardColl, "o"); err != nil || !k.isUndo || len(k.old) != 9+100 {
			t.Fatalf("keeping %d%% of unsynced data: undo record of %d bytes (%v, %v), want 109", keep, len(k.old), k.isUndo, err)
		}
		if err := s2.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s2, "o", 1, 0, false, old, nil)
	}
}

// Random changes of keys (xattrs set and removed, the OSD's own token
// xattrs among them, omap keys set and removed, ranges removed) keep an
// undo record of just the keys they touch; a rollback puts back every key
// as it was, none more, none less.
func TestKeysChangeUndo(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	s := shardTestServer(t, vfs.NewMem())
	key := func() []byte { return []byte(fmt.Sprintf("k%03d", rng.IntN(200))) }
	xattr := func() string { return []string{"a", "b", "c", txnSlotXattr + "\x00\x01"}[rng.IntN(4)] }
	for round := range 40 {
		ver := uint64(2*round + 1)
		writeShard(t, s, "o", ver, []byte("data"), false)
		s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", ver, 0)})
		txn := &objstore.Txn{}
		for range 1 + rng.IntN(60) {
			txn.OmapSet(testShardColl, "o", key(), randBytes(rng, rng.IntN(20)))
			txn.SetXattr(testShardColl, "o", xattr(), randBytes(rng, 8))
		}
		m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Size: 4}
		txn.SetXattr(testShardColl, "o", versionXattr, m.Ver.Encode())
		if err := s.applyShardWrite(testShardColl, "o", m, txn, 0); err != nil {
			t.Fatal(err)
		}
		before := allKeys(t, s, "o")
		err := keysWrite(s, "o", ver+1, ver, 4, false, func(txn *objstore.Txn) {
			for range 1 + rng.IntN(20) {
				switch rng.IntN(5) {
				case 0:
					txn.OmapRm(testShardColl, "o", key())
				case 1:
					from := key()
					txn.OmapRmRange(testShardColl, "o", from, append(from, 'z'))
				case 2:
					txn.RmXattr(testShardColl, "o", xattr())
				case 3:
					txn.SetXattr(testShardColl, "o", xattr(), randBytes(rng, 3))
				default:
					txn.OmapSet(testShardColl, "o", key(), randBytes(rng, 5))
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if k, err := s.keptOf(testShardColl, "o"); err != nil || !k.isUndo {
			t.Fatalf("round %d: no undo record (%v)", round, err)
		}
		if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", ver+1, ver)}); err != nil {
			t.Fatal(err)
		}
		if after := allKeys(t, s, "o"); !maps.Equal(after, before) {
			t.Fatalf("round %d: keys after the rollback differ from before the change:\n%v\n%v", round, after, before)
		}
		wantShard(t, s, "o", ver, 0, false, []byte("data"), nil)
	}
}

// allKeys is every xattr (but the version and shard meta, which a rollback
// sets anew) and omap key of name, prefixed "x" and "o".
func allKeys(t *testing.T, s *Server, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	xs, err := s.store.Xattrs(testShardColl, name)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range xs {
		if k != versionXattr && k != shardMetaXattr {
			out["x"+k] = string(v)
		}
	}
	kvs, _, err := s.store.OmapList(testShardColl, name, nil, nil, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		out["o"+string(kv.Key)] = string(kv.Value)
	}
	return out
}

// A parity delta (proto.FlagShardXor) is XORed into the shard's bytes
// once: sent again it changes nothing; it keeps the old bytes to roll
// back to like any partial write; a shard at another version, or whose
// bytes under the delta fail their checksums, refuses it (errShardVersion:
// the primary has the position rebuilt).
func TestShardXorDelta(t *testing.T) {
	fs := vfs.NewMem()
	s := shardTestServer(t, fs)
	rng := rand.New(rand.NewPCG(7, 0))
	old := randBytes(rng, 256<<10) // in a data file
	writeShard(t, s, "o", 1, old, false)
	s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 1, 0)})
	delta := randBytes(rng, 8192)
	xor := func(ver, prev uint64) error {
		m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, Prev: pg.EVersion{Epoch: 1, Version: prev}, Size: 1, CanRollBack: true}
		txn := &objstore.Txn{}
		txn.Write(testShardColl, "o", 12288, bytes.Clone(delta))
		txn.SetXattr(testShardColl, "o", versionXattr, m.Ver.Encode())
		return s.applyShardWrite(testShardColl, "o", m, txn, proto.FlagShardPartial|proto.FlagShardXor)
	}
	want := bytes.Clone(old)
	for i, d := range delta {
		want[12288+i] ^= d
	}
	bare := &objstore.Txn{}
	bare.Write(testShardColl, "o", 12288, bytes.Clone(delta))
	if err := s.applyShardWrite(testShardColl, "o", pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: 2}}, bare, proto.FlagShardXor); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("deltas with no version to apply to: %v", err)
	}
	wantShard(t, s, "o", 1, 0, false, old, nil)
	for try := range 2 {
		if err := xor(2, 1); err != nil {
			t.Fatalf("send %d: %v", try+1, err)
		}
		wantShard(t, s, "o", 2, 1, true, want, old)
	}
	if err := xor(3, 1); !errors.Is(err, errShardVersion) {
		t.Fatalf("a delta against version 1 applied to a shard at 2: %v", err)
	}
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 1, 0, false, old, nil)

	rotShard(t, fs, s.store, testShardColl, "o", 16384)
	if err := xor(2, 1); !errors.Is(err, errShardVersion) {
		t.Fatalf("a delta over rotten bytes: %v", err)
	}
}

// rotShard overwrites three bytes at off of the data file of name in coll,
// behind the store's back, as a failing disk would.
func rotShard(t *testing.T, fs vfs.FS, st *objstore.Store, coll, name string, off int64) {
	t.Helper()
	path, _ := st.DataPath(coll, name)
	if path == "" {
		t.Fatalf("%s/%s has no data file", coll, name)
	}
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("rot"), off); err != nil {
		t.Fatal(err)
	}
}
