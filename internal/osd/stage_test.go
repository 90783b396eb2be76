package osd

import (
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
)

// The stage area keeps each shard once under its key until a put takes
// it, refuses a second stage of the same key and stages past its bound,
// and drops shards that waited longer than stageTTL, giving their frames
// back to the pool.
func TestStageArea(t *testing.T) {
	var a stageArea
	now := time.Now()
	key := func(token string, pos int) stageKey {
		return stageKey{token: token, pg: clustermap.PGID{Pool: 1, Seed: 2}, object: "o", pos: pos}
	}
	shard := func(n int, at time.Time) *stagedShard {
		f := bufpool.Get(n)
		return &stagedShard{data: f[:n], frame: f, at: at}
	}
	if err := a.put(key("a", 0), shard(1<<20, now)); err != nil {
		t.Fatal(err)
	}
	if err := a.put(key("a", 0), shard(1<<20, now)); err == nil {
		t.Fatal("a second stage under the same key was taken")
	}
	if a.take(key("a", 1)) != nil || a.take(key("b", 0)) != nil {
		t.Fatal("a take found a shard staged under another position or token")
	}
	sh := a.take(key("a", 0))
	if sh == nil || len(sh.data) != 1<<20 {
		t.Fatalf("take: %v", sh)
	}
	sh.release()
	if a.take(key("a", 0)) != nil || a.bytes != 0 {
		t.Fatalf("a shard was taken twice, or %d bytes are still counted", a.bytes)
	}

	// The bound: stages past maxStagedBytes are refused until some are
	// taken.
	n := 0
	for ; n < 2*maxStagedBytes/(4<<20); n++ {
		if err := a.put(key("full", n), shard(4<<20, now)); err != nil {
			break
		}
	}
	if a.bytes > maxStagedBytes || n*(4<<20) > maxStagedBytes || n == 0 {
		t.Fatalf("%d stages of 4 MiB were taken, %d bytes held; the bound is %d", n, a.bytes, maxStagedBytes)
	}
	a.take(key("full", 0)).release()
	if err := a.put(key("full", 0), shard(4<<20, now)); err != nil {
		t.Fatalf("a stage once room was made: %v", err)
	}

	// Expiry: a stage at now+TTL drops every shard staged at now.
	late := now.Add(stageTTL)
	if err := a.put(key("late", 0), shard(4096, late)); err != nil {
		t.Fatal(err)
	}
	if len(a.shards) != 1 || a.take(key("full", 1)) != nil {
		t.Fatalf("%d shards held after their TTL passed, want only the late one", len(a.shards))
	}
	a.mu.Lock()
	a.expireLocked(late.Add(stageTTL))
	a.mu.Unlock()
	if len(a.shards) != 0 || a.bytes != 0 {
		t.Fatalf("%d shards, %d bytes held once all expired", len(a.shards), a.bytes)
	}
}
