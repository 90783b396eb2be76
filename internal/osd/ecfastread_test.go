package osd

import (
	"errors"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// TestDecideFastFallsBack checks the fast read's decision on the answers of
// a 2+1 pool's two data positions: it serves only when both hold the
// version that stands (or both hold nothing), and sends the read to the
// full lookup when a shard is stale (peering's missing set), older,
// missing, corrupt or down, or must roll back.
func TestDecideFastFallsBack(t *testing.T) {
	v1, v2 := pg.EVersion{Epoch: 3, Version: 1}, pg.EVersion{Epoch: 3, Version: 2}
	at := func(pos int, v pg.EVersion) shardReply {
		return shardReply{meta: &pg.ShardMeta{Ver: v, Size: 100, Position: pos}}
	}
	rolls := func(pos int) shardReply {
		return shardReply{meta: &pg.ShardMeta{Ver: v2, Size: 100, Position: pos, Prev: v1, CanRollBack: true}}
	}
	notFound := shardReply{err: errShardNotFound}
	corrupt := shardReply{err: &shardError{osd: 1, status: proto.StatusCorrupt, msg: "checksum"}}
	down := shardReply{err: errors.New("osd.1 is down")}
	osds := []clustermap.OSDID{0, 1}
	stale := &pgState{}
	stale.prim.MarkMissing(1, "obj")
	stale.nMissing.Store(1)
	for _, tc := range []struct {
		name    string
		p       *pgState
		replies []shardReply
		serve   bool
		exists  bool
	}{
		{"agree", &pgState{}, []shardReply{at(0, v2), at(1, v2)}, true, true},
		{"agree, both can roll back", &pgState{}, []shardReply{rolls(0), rolls(1)}, true, true},
		{"both absent", &pgState{}, []shardReply{notFound, notFound}, true, false},
		{"one stale", stale, []shardReply{at(0, v2), at(1, v2)}, false, false},
		{"one older", &pgState{}, []shardReply{at(0, v2), at(1, v1)}, false, false},
		{"one newer, can roll back", &pgState{}, []shardReply{at(0, v1), rolls(1)}, false, false},
		{"one missing", &pgState{}, []shardReply{at(0, v2), notFound}, false, false},
		{"one corrupt", &pgState{}, []shardReply{at(0, v2), corrupt}, false, false},
		{"one down", &pgState{}, []shardReply{at(0, v2), down}, false, false},
	} {
		o, ok := decideFast(2, tc.p, osds, "obj", tc.replies)
		if ok != tc.serve || ok && o.exists() != tc.exists {
			t.Errorf("%s: served %v, want %v (exists %v)", tc.name, ok, tc.serve, tc.exists)
		}
	}
}

// TestSpansWholeRefusesShortShards: a shard that holds fewer or more bytes
// than its meta's size gives it sends the read to the rebuild.
func TestSpansWholeRefusesShortShards(t *testing.T) {
	l := ec.Layout{K: 2, M: 1, Unit: 4096}
	size := int64(3*4096 + 10) // shard 0: 8192 bytes, shard 1: 4096+10
	from, to := l.Span(0, size)
	reply := func(n int) shardReply { return shardReply{resp: &proto.Response{Data: make([]byte, n)}} }
	if !spansWhole(l, size, from, to, []int{0, 1}, []shardReply{reply(8192), reply(4106)}) {
		t.Fatal("whole spans refused")
	}
	if spansWhole(l, size, from, to, []int{0, 1}, []shardReply{reply(8192), reply(4096)}) {
		t.Fatal("a short shard taken as whole")
	}
	if spansWhole(l, size, from, to, []int{0, 1}, []shardReply{reply(8193), reply(4106)}) {
		t.Fatal("a long shard taken as whole")
	}
}
