package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// TestEC42LosesTwo: a 4+2 pool with one shard per OSD on six OSDs (three
// hosts) serves every object with a whole host, two OSDs and so M
// positions of every PG, SIGKILLed: each read rebuilds the data of the
// missing positions from the other four. Status says every PG can lose
// no more; a write waits for min_size (5) and says so. With the host back
// the PGs recover to HEALTH_OK, and the objects, and one written after,
// read back with the other host down.
func TestEC42LosesTwo(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, out := c.createECPool(t, "ec42", "4+2", "--failure-domain", "osd")
	if !strings.Contains(out, "erasure code 4+2, one shard per osd, any 4 rebuild an object, writes need 5: can lose 2 osds") {
		t.Fatalf("pool create --ec 4+2 does not say what it protects:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stripe := 4 * clustermap.ECDefaultUnit
	objs := map[string]int{}
	for i, size := range []int{0, 1, 4096, stripe - 1, stripe + 1, 3*stripe + 12345, 5<<20 + 7} {
		objs[fmt.Sprintf("o%d", i)] = size
	}
	for name, size := range objs {
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatalf("put %s (%d bytes): %v", name, size, err)
		}
	}
	host := hostOSDs(t, c, "host2")
	for _, o := range host {
		c.kill(o.String())
	}
	c.waitStatus(20*time.Second, "host2's OSDs down", func(_ map[string]any, raw string) bool {
		return strings.Count(raw, "on host host2 (") == 2
	})
	readEach(ctx, t, p, objs, 0, "with host2 (two positions of every pg) down")
	if out, err := c.cli(nil, "status"); err != nil || !regexp.MustCompile(`ec42 +ec 4\+2 +can lose 2 osds +now: 8 of 8 pg\(s\) can lose only 0 more OSD\(s\)`).Match(out) {
		t.Fatalf("status with two positions of every 4+2 pg down: %v\n%s", err, out)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.Put(wctx, "blocked", payload("blocked", 0, 100))
	wcancel()
	if err == nil || !strings.Contains(err.Error(), "min_size") && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put with 4 of 6 shards up, min_size 5: want it refused or held, got %v", err)
	}

	for _, o := range host {
		c.restart(o.String())
	}
	c.waitHealthy(60*time.Second, "with host2 back and its shards rebuilt")
	objs["after"] = 2*stripe + 99
	if err := p.Put(ctx, "after", payload("after", 0, objs["after"])); err != nil {
		t.Fatalf("put after recovery: %v", err)
	}
	for _, o := range hostOSDs(t, c, "host3") {
		c.kill(o.String())
	}
	readEach(ctx, t, p, objs, 0, "with host3 down, after host2's recovery")
}

// hostOSDs lists the OSDs the map places on host.
func hostOSDs(t *testing.T, c *cluster, host string) []clustermap.OSDID {
	t.Helper()
	var ids []clustermap.OSDID
	for _, o := range currentMap(t, c).OSDs {
		if o.Host == host {
			ids = append(ids, o.ID)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("host %s has OSDs %v, want 2", host, ids)
	}
	return ids
}

// readEach reads every object whole and in two ranges, and compares it
// with what was written at version ver.
func readEach(ctx context.Context, t *testing.T, p poolReader, objs map[string]int, ver int, when string) {
	t.Helper()
	for name, size := range objs {
		want := payload(name, ver, size)
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: get %s: %v (%d bytes, want %d)", when, name, err, len(got), size)
		}
		for _, r := range [][2]int{{size / 3, size / 2}, {max(size-5000, 0), 5000}} {
			got, _, err := p.ReadAt(ctx, name, uint64(r[0]), uint64(r[1]))
			hi := min(r[0]+r[1], size)
			if err != nil || !bytes.Equal(got, want[r[0]:hi]) {
				t.Fatalf("%s: read %s [%d, +%d): %v", when, name, r[0], r[1], err)
			}
		}
	}
}

// poolReader is what readEach needs of a pool.
type poolReader interface {
	Get(ctx context.Context, name string) ([]byte, error)
	ReadAt(ctx context.Context, name string, off, n uint64) ([]byte, uint64, error)
}
