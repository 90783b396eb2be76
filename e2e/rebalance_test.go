package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// TestNewHostRebalances adds a fourth host to a three-host cluster holding
// data: the PGs placement moves to it are backfilled there, the old copies
// are removed once the new ones are whole, and in the end every OSD holds
// exactly the objects placement assigns it: no more (nothing left behind),
// no fewer (nothing lost).
func TestNewHostRebalances(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	var names []string
	for i := range 400 {
		name := fmt.Sprintf("r-%03d", i)
		data := payload(name, 0, 1+i*97%(96<<10))
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
		names = append(names, name)
	}
	dir := t.TempDir()
	startOSDProcess(t, c, dir, "127.0.0.4", "--data", filepath.Join(dir, "data"), "--host", "host4")
	added := time.Now()
	c.waitStatus(30*time.Second, "osd.3 up", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(4)
	})
	c.waitHealthy(120*time.Second, "after adding host4")
	t.Logf("host4 added and backfilled to HEALTH_OK in %.1f s", time.Since(added).Seconds())

	m := currentMap(t, c)
	pool, _ := m.PoolByName("default")
	want := map[clustermap.OSDID]int{}
	for _, n := range names {
		for _, o := range placement.Place(m, pool, placement.PGOf(pool, n)) {
			want[o]++
		}
	}
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	peers := rpc.NewPool(cfg.ClusterKey)
	defer peers.Close()
	count := func(o clustermap.OSDID) (int, error) {
		osd, _ := m.OSD(o)
		n := 0
		for seed := uint32(0); seed < pool.PGNum; seed++ {
			start := ""
			for {
				resp, err := peers.Call(ctx, osd.Addr, &proto.Request{Op: proto.OpList, Flags: proto.FlagLocal, Epoch: m.Epoch,
					PG: clustermap.PGID{Pool: pool.ID, Seed: seed}, Start: []byte(start), Limit: 1000})
				if err != nil {
					return 0, err
				}
				if resp.Status != proto.StatusOK {
					return 0, fmt.Errorf("%s: %s", resp.Status, resp.Message)
				}
				n += len(resp.Names)
				if !resp.More {
					break
				}
				start = string(resp.Data)
			}
		}
		return n, nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := map[clustermap.OSDID]int{}
		for _, o := range m.OSDs {
			n, err := count(o.ID)
			if err != nil {
				t.Fatalf("listing %s: %v", o.ID, err)
			}
			got[o.ID] = n
		}
		same := len(got) == len(want)
		for o, n := range want {
			same = same && got[o] == n
		}
		if same {
			t.Logf("objects per OSD match placement exactly: %v (osd.3 holds %.0f%% of the copies)", got, 100*float64(got[3])/float64(3*len(names)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("objects per OSD %v, placement says %v", got, want)
		}
		time.Sleep(2 * time.Second)
	}
	if want[3] < len(names)/2 {
		t.Fatalf("placement put only %d of %d objects on the new host", want[3], len(names))
	}
	exp.verify(t, p, "after rebalance")
}
