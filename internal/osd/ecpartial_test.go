package osd

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// partialShard applies a partial shard write as a member does: bytes at
// off, then the shard's new length (if newLen ≥ 0), at version ver
// replacing version prev (0: none).
func partialShard(s *Server, name string, ver, prev uint64, off int64, data []byte, newLen int64) error {
	m := pg.ShardMeta{Ver: pg.EVersion{Epoch: 1, Version: ver}, CanRollBack: true}
	if prev != 0 {
		m.Prev = pg.EVersion{Epoch: 1, Version: prev}
	}
	txn := &objstore.Txn{}
	if prev == 0 {
		txn.Put(testShardColl, name, nil)
	}
	txn.Write(testShardColl, name, uint64(off), data)
	if newLen >= 0 {
		txn.Truncate(testShardColl, name, uint64(newLen))
	}
	txn.SetXattr(testShardColl, name, versionXattr, m.Ver.Encode())
	return s.applyShardWrite(testShardColl, name, m, txn, proto.FlagShardPartial)
}

// A partial write of a shard keeps, in its own transaction, what restores
// the shard it replaces: a rollback restores the old bytes (and length), a
// trim drops them. A partial write whose shard is not at the version it
// replaces is refused and changes nothing; one sent again lands once.
func TestPartialShardWriteRollBack(t *testing.T) {
	s := shardTestServer(t, vfs.NewMem())
	writeShard(t, s, "o", 1, []byte("one-two-three"), false)
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 1, 0)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 1, 0, false, []byte("one-two-three"), nil)

	for range 2 { // the second is the same write sent again
		if err := partialShard(s, "o", 2, 1, 4, []byte("TWO"), -1); err != nil {
			t.Fatal(err)
		}
		wantShard(t, s, "o", 2, 1, true, []byte("one-TWO-three"), []byte("one-two-three"))
	}
	for what, err := range map[string]error{
		"expecting an older version": partialShard(s, "o", 3, 1, 0, []byte("X"), -1),
		"expecting no shard":         partialShard(s, "o", 3, 0, 0, []byte("X"), -1),
	} {
		if !errors.Is(err, errShardVersion) {
			t.Fatalf("a partial write %s: %v", what, err)
		}
		wantShard(t, s, "o", 2, 1, true, []byte("one-TWO-three"), []byte("one-two-three"))
	}

	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 2, 1)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 1, 0, false, []byte("one-two-three"), nil)

	// Growing, with a hole: zeros between the old end and the write.
	if err := partialShard(s, "o", 3, 1, 16, []byte("four"), 24); err != nil {
		t.Fatal(err)
	}
	grown := append([]byte("one-two-three\x00\x00\x00four"), make([]byte, 4)...)
	wantShard(t, s, "o", 3, 1, true, grown, []byte("one-two-three"))
	if err := s.applyShardEntries(testShardColl, proto.OpShardTrim, []proto.ShardEntry{entry("o", 3, 0)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 3, 0, false, grown, nil)
	// Cut, then rolled back: the old length comes back.
	if err := partialShard(s, "o", 4, 3, 2, []byte("!"), 3); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 4, 3, true, []byte("on!"), grown)
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("o", 4, 3)}); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "o", 3, 0, false, grown, nil)

	// A partial write that creates the shard rolls back to absent.
	if err := partialShard(s, "n", 5, 0, 3, []byte("x"), 5); err != nil {
		t.Fatal(err)
	}
	wantShard(t, s, "n", 5, 0, true, []byte("\x00\x00\x00x\x00"), nil)
	if err := s.applyShardEntries(testShardColl, proto.OpShardRollBack, []proto.ShardEntry{entry("n", 5, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Stat(testShardColl, "n"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a partial create rolled back is still there: %v", err)
	}
	// Over a delete's tombstone, as over no shard.
	writeShard(t, s, "o", 6, nil, true)
	if err := partialShard(s, "o", 7, 0, 0, []byte("new"), -1); err != nil {
		t.Fatalf("a partial write over a tombstone: %v", err)
	}
	if got, err := s.store.Read(testShardColl, "o", 0, 0); err != nil || !bytes.Equal(got, []byte("new")) {
		t.Fatalf("over a tombstone: %q, %v", got, err)
	}
}

// partialStripe finds the one stripe a small write or truncate reads (the
// one it does not rewrite whole), and sends a write that reads two
// stripes to the slow path.
func TestPartialStripe(t *testing.T) {
	l := ec.Layout{K: 2, M: 1, Unit: 4096} // stripes of 8 KiB
	w := func(off, n int) *proto.Request {
		return &proto.Request{Op: proto.OpWrite, Offset: uint64(off), Data: make([]byte, n)}
	}
	for _, tc := range []struct {
		what   string
		req    *proto.Request
		stripe int64
		reads  bool
		ok     bool
	}{
		{"inside a chunk", w(100, 10), 0, true, true},
		{"a whole stripe", w(8192, 8192), 0, false, true},
		{"two whole stripes", w(0, 16384), 0, false, true},
		{"a whole stripe and the head of the next", w(8192, 8192+5), 2, true, true},
		{"the tail of a stripe and a whole one", w(8000, 192+8192), 0, true, true},
		{"the tail of one stripe and the head of the next", w(8000, 300), 0, false, false},
		{"empty", w(100, 0), 0, false, true},
		{"a cut inside a stripe", &proto.Request{Op: proto.OpTruncate, Offset: 9000}, 1, true, true},
		{"a cut at a stripe's edge", &proto.Request{Op: proto.OpTruncate, Offset: 16384}, 2, false, true},
	} {
		stripe, reads, ok := partialStripe(l, tc.req)
		if ok != tc.ok || reads != tc.reads || reads && stripe != tc.stripe {
			t.Errorf("%s: stripe %d, reads %v, ok %v; want %d, %v, %v", tc.what, stripe, reads, ok, tc.stripe, tc.reads, tc.ok)
		}
	}
}

// A small write reads only the chunk columns it covers, in whole blocks,
// of the shards a delta needs; anything else reads whole chunks.
func TestStripeSpan(t *testing.T) {
	l := ec.Layout{K: 2, M: 1, Unit: 16 << 10}
	sb := l.StripeBytes()
	for _, tc := range []struct {
		op       proto.Op
		off, n   int64
		from, to int64 // in the stripe's chunks
	}{
		{proto.OpWrite, 4096, 4096, 4096, 8192},
		{proto.OpWrite, 5000, 100, 4096, 8192},
		{proto.OpWrite, sb + 16<<10 + 8192, 4096, 8192, 12288},        // stripe 1, chunk 1
		{proto.OpWrite, 12 << 10, 8 << 10, 0, 16 << 10},               // chunk 0's tail and chunk 1's head
		{proto.OpWrite, 16<<10 - 100, 200, 0, 16 << 10},               // across the chunks' boundary
		{proto.OpWrite, 16<<10 + 15<<10, 1 << 10, 12 << 10, 16 << 10}, // rounded out to blocks
		{proto.OpTruncate, 5000, 0, 0, 16 << 10},
	} {
		req := &proto.Request{Op: tc.op, Offset: uint64(tc.off), Data: make([]byte, tc.n)}
		stripe := tc.off / sb
		from, to := fastSpan(l, req, stripe)
		base := stripe * int64(l.Unit)
		if from != base+tc.from || to != base+tc.to {
			t.Errorf("%v of %d at %d: span [%d, %d) of shard, want [%d, %d)", tc.op, tc.n, tc.off, from-base, to-base, tc.from, tc.to)
		}
	}
	w := ec.StripeWork{Stripe: 3, Kind: ec.Reread, Ranges: []ec.ChunkRange{{Chunk: 0, From: 0, To: 4096}}}
	if from, to := stripeSpan(l, w); from != 3*16<<10 || to != 4*16<<10 {
		t.Errorf("a reread reads [%d, %d), want its whole chunks", from, to)
	}
}
