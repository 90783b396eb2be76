package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
)

// TestECPutCutShort closes the write hole of erasure-coded puts on a real
// cluster, in the case the power-cut run found: a 2+1 pool with min_size
// 2 writes on while one position is down (stale), then a put cut short
// by its primary's crash (the osd.FailpointECPartialPut failpoint) reaches
// only the primary's own position. Once that OSD is back, peering rolls
// its shard back and the acknowledged version reads back, with the
// stale position still down and once it is back and rebuilt; a delete
// acknowledged while it was down stays deleted. On every position's disk
// the object's shard then holds the acknowledged version, with nothing
// left to roll back.
func TestECPutCutShort(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "partial-put")
	c := startCluster(t, clusterOpts{env: []string{osd.FailpointECPartialPut + "=" + trigger}})
	p, _ := c.createECPool(t, "ecw", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ecw")
	id := placement.PGOf(pool, "w")
	_, pos := placement.NewTable(m).Positions(pool, id)
	const size = 1<<20 + 777
	mustPut := func(name string, gen int) {
		t.Helper()
		if err := p.Put(ctx, name, payload(name, gen, size)); err != nil {
			t.Fatalf("put %s (%d): %v", name, gen, err)
		}
	}
	mustPut("w", 0)
	dead := "gone"
	for placement.PGOf(pool, dead) != id {
		dead += "x"
	}
	mustPut(dead, 0)

	stale := pos[2]
	c.kill(stale.String())
	c.waitStatus(20*time.Second, stale.String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, stale.String()+" on host")
	})
	mustPut("w", 1) // acknowledged by positions 0 and 1
	if err := p.Delete(ctx, dead); err != nil {
		t.Fatalf("delete %s: %v", dead, err)
	}

	if err := os.WriteFile(trigger, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.Put(pctx, "w", payload("w", 2, size))
	pcancel()
	if err == nil {
		t.Fatal("the put the failpoint cuts short was acknowledged")
	}
	primary := pos[0]
	if log, _ := os.ReadFile(c.procs[primary.String()].Log); !strings.Contains(string(log), "failpoint "+osd.FailpointECPartialPut) {
		t.Fatalf("%s did not fire the failpoint (put: %v)", primary, err)
	}
	c.restart(primary.String())
	check := func(when string) {
		t.Helper()
		if got, err := p.Get(ctx, "w"); err != nil || !bytes.Equal(got, payload("w", 1, size)) {
			t.Fatalf("%s: get w: %v (%d bytes; the acknowledged version: %v)", when, err, len(got), bytes.Equal(got, payload("w", 1, size)))
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		defer scancel()
		if _, err := p.Stat(sctx, dead); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s: %s, deleted, came back: %v", when, dead, err)
		}
	}
	check("the primary back, " + stale.String() + " still down")
	if log, _ := os.ReadFile(c.procs[primary.String()].Log); !strings.Contains(string(log), "rolled back 1 shard(s)") {
		t.Fatalf("%s's log does not show the partial put rolled back", primary)
	}
	c.restart(stale.String())
	c.waitHealthy(40*time.Second, "with every position back")
	check("every position back")
	time.Sleep(time.Second) // the trims of the last writes
	c.stop()
	checkShardsOnDisk(t, c, id.String(), pos, "w", size)
}

// checkShardsOnDisk opens the stores of a stopped cluster's OSDs at
// positions pos and checks that each holds name's shard of one and the
// same version (pg.DecideSettled), of the object's size, with nothing
// kept to roll back.
func checkShardsOnDisk(t *testing.T, c *cluster, pgName string, pos []clustermap.OSDID, name string, size int) {
	t.Helper()
	copies := make([]pg.ShardCopy, len(pos))
	for i, o := range pos {
		st, err := objstore.Open(objstore.Options{Dir: c.procs[o.String()].Data, ReserveBytes: -1, DataCacheBytes: -1})
		if err != nil {
			t.Fatalf("open %s's store: %v", o, err)
		}
		coll := fmt.Sprintf("%ss%d", pgName, i)
		raw, err := st.GetXattr(coll, name, "\x00ec")
		_, rbErr := st.Stat(coll, "\x00r"+name)
		st.Close()
		if err != nil {
			t.Fatalf("%s: shard %d of %s: %v", o, i, name, err)
		}
		m, err := pg.DecodeShardMeta(raw)
		switch {
		case err != nil:
			t.Fatalf("%s: shard %d of %s: %v", o, i, name, err)
		case m.CanRollBack || m.Tombstone || !errors.Is(rbErr, objstore.ErrNotFound):
			t.Errorf("%s: shard %d of %s keeps rollback state: %+v (kept shard: %v)", o, i, name, m, rbErr)
		case m.Size != uint64(size):
			t.Errorf("%s: shard %d of %s is at %s, size %d, want size %d", o, i, name, m.Ver, m.Size, size)
		}
		copies[i] = m.Copy()
	}
	// A position a partial write skipped holds an older version's shard,
	// the one the newest names for it.
	if _, ok := pg.DecideSettled(copies); !ok {
		t.Errorf("the shards of %s do not all hold one version: %+v", name, copies)
	}
}
