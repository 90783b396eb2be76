package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
)

// TestECStrayPositions: an OSD marked out hands its positions of a 2+1
// pool's PGs to the other OSD of its host, which rebuilds them; once every
// position of a PG is complete, the out OSD deletes its shard collection of
// it (a stray), and only then. Every object then reads back with a third
// OSD, of another host, killed: the moved positions serve their shards.
func TestECStrayPositions(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{downOut: 10 * time.Minute, metrics: true})
	p, _ := c.createECPool(t, "ecm", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sizes := []int{0, 100, 4096, 70001, 1<<20 + 3}
	for i := range 24 {
		name := fmt.Sprintf("obj%d", i)
		if err := p.Put(ctx, name, payload(name, 0, sizes[i%len(sizes)])); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ecm")
	table := placement.NewTable(m)
	const victim = clustermap.OSDID(1)
	held := 0 // the victim's positions of the pool's PGs
	for seed := range pool.PGNum {
		place, _ := table.Positions(pool, clustermap.PGID{Pool: pool.ID, Seed: seed})
		if slices.Contains(place, victim) {
			held++
		}
	}
	if held == 0 {
		t.Fatalf("%s holds no position of pool ecm's %d PGs", victim, pool.PGNum)
	}
	if out, err := c.cli(nil, "osd", "out", "1"); err != nil {
		t.Fatalf("osd out 1: %v\n%s", err, out)
	}
	c.waitStatus(60*time.Second, "every pg clean with "+victim.String()+" out (its positions rebuilt elsewhere)", func(st map[string]any, _ string) bool {
		return st["osds_in"] == float64(5) && st["pgs_active_clean"] == st["pgs"]
	})
	deadline := time.Now().Add(40 * time.Second)
	for {
		log, _ := os.ReadFile(c.procs[victim.String()].Log)
		n := strings.Count(string(log), "removed stray shard collection")
		if n == held {
			break
		}
		if n > held || time.Now().After(deadline) {
			t.Fatalf("%s held %d positions of pool ecm and removed %d stray shard collections", victim, held, n)
		}
		time.Sleep(time.Second)
	}
	// Recovery copied the moved positions' shards from the out OSD, which
	// holds them at the version that stands: it rebuilt none from K.
	copied := osdMetricSum(t, c, `cairn_osd_recovered_shards_total{how="copied",osd="%s"}`)
	rebuilt := osdMetricSum(t, c, `cairn_osd_recovered_shards_total{how="rebuilt",osd="%s"}`)
	if copied == 0 || rebuilt != 0 {
		t.Fatalf("recovery of %s's positions copied %g shards and rebuilt %g from K: want them all copied", victim, copied, rebuilt)
	}
	t.Logf("recovery of %s's %d positions copied %g shards from it", victim, held, copied)
	// An OSD of another host: every PG it holds a position of now needs
	// the moved positions' shards.
	vo, _ := m.OSD(victim)
	second := ""
	for _, o := range m.OSDs {
		if o.Host != vo.Host {
			second = o.ID.String()
			break
		}
	}
	c.kill(second)
	for i := range 24 {
		name := fmt.Sprintf("obj%d", i)
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, payload(name, 0, sizes[i%len(sizes)])) {
			t.Fatalf("get %s with %s out and %s killed: %v (%d bytes)", name, victim, second, err, len(got))
		}
	}
}

// osdMetricSum sums one series over the OSDs of c (started with
// metrics): series names the OSD with a %s.
func osdMetricSum(t *testing.T, c *cluster, series string) float64 {
	t.Helper()
	sum := 0.0
	for name, p := range c.devJSON() {
		if strings.HasPrefix(name, "osd.") {
			sum += metricValue(t, httpGet(t, "http://"+p.Metrics+"/metrics"), fmt.Sprintf(series, name))
		}
	}
	return sum
}

// metricValue is the value of one series in a Prometheus text exposition.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in:\n%s", series, body)
	return 0
}
