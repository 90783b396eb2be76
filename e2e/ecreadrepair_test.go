package e2e

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/placement"
)

// TestECReadRepair: a flipped byte in a data shard of a 2+1 pool is
// repaired by the read that meets it, with no scrub. A ranged read of the
// chunk holding the byte gets the right bytes (rebuilt from the other two
// shards); then, in the background, the shard file on its OSD is
// rewritten with the shard's right bytes, status reports the repair on
// read (OBJECT_REPAIRED, the shard's position, "repaired from the other
// shards"), and a deep scrub of the PG afterwards finds nothing.
func TestECReadRepair(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, _ := c.createECPool(t, "ecrr", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const size = 1<<20 + 4096
	want := payload("rot", 0, size)
	if err := p.Put(ctx, "rot", want); err != nil {
		t.Fatal(err)
	}
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ecrr")
	l := ec.LayoutOf(*pool.EC)
	codec, err := ec.New(l)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := codec.EncodeObject(want)
	if err != nil {
		t.Fatal(err)
	}
	id := placement.PGOf(pool, "rot")
	_, pos := placement.NewTable(m).Positions(pool, id)
	dir := c.procs[pos[1].String()].Data // position 1: a data shard, not the primary's
	shardLen := l.ShardLen(size, 1)
	flipByteInDataFile(t, dir, shardLen, 3000)

	// Shard 1's byte 3000 is the object's byte Unit+3000 (stripe 0, chunk 1).
	off := uint64(clustermap.ECDefaultUnit) + 1000
	got, sz, err := p.ReadAt(ctx, "rot", off, 8192)
	if err != nil || sz != size || !bytes.Equal(got, want[off:off+8192]) {
		t.Fatalf("ranged read over the flipped byte: %v (size %d, %d bytes)", err, sz, len(got))
	}
	c.waitStatus(20*time.Second, "the shard reported repaired on read", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OBJECT_REPAIRED") && strings.Contains(raw, "shard at position 1") && strings.Contains(raw, "repaired from the other shards")
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(newestDataFile(t, dir, shardLen))
		if err == nil && bytes.Equal(b, shards[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shard file of position 1 on %s was not rewritten with the shard's bytes (%v)", pos[1], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := c.cli(nil, "scrub", "--deep", "--json", id.String()); err != nil || !strings.Contains(string(out), `"errors": 0`) {
		t.Fatalf("deep scrub of %s after the repair on read: want nothing found: %v\n%s", id, err, out)
	}
	if got, err := p.Get(ctx, "rot"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get after the repair: %v", err)
	}
}
