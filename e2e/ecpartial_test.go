package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/placement"
)

// ecModel keeps what a client wrote to objects of an erasure-coded pool
// as plain bytes, and checks the pool against it.
type ecModel struct {
	t    *testing.T
	ctx  context.Context
	p    *client.Pool
	objs map[string][]byte
}

func (m *ecModel) put(name string, data []byte) {
	m.t.Helper()
	if err := m.p.Put(m.ctx, name, data); err != nil {
		m.t.Fatalf("put %s: %v", name, err)
	}
	m.objs[name] = bytes.Clone(data)
}

func (m *ecModel) writeAt(name string, off int, data []byte) {
	m.t.Helper()
	if err := m.p.WriteAt(m.ctx, name, uint64(off), data); err != nil {
		m.t.Fatalf("write %s at %d (%d bytes): %v", name, off, len(data), err)
	}
	o := m.objs[name]
	if end := off + len(data); end > len(o) {
		o = append(o, make([]byte, end-len(o))...)
	}
	copy(o[off:], data)
	m.objs[name] = o
}

func (m *ecModel) truncate(name string, size int) {
	m.t.Helper()
	if err := m.p.Truncate(m.ctx, name, uint64(size)); err != nil {
		m.t.Fatalf("truncate %s to %d: %v", name, size, err)
	}
	o := m.objs[name]
	if size > len(o) {
		o = append(o, make([]byte, size-len(o))...)
	}
	m.objs[name] = o[:size]
}

// check reads every object back whole and by ranges (in a chunk, across
// chunks and stripes, over the end, past it).
func (m *ecModel) check(when string) {
	m.t.Helper()
	stripe := 2 * clustermap.ECDefaultUnit
	for name, want := range m.objs {
		size := len(want)
		got, err := m.p.Get(m.ctx, name)
		if err != nil || !bytes.Equal(got, want) {
			m.t.Fatalf("%s: get %s: %v (%d bytes, want %d; equal: %v)", when, name, err, len(got), size, bytes.Equal(got, want))
		}
		for _, r := range [][2]int{{0, 1}, {5, 100}, {stripe - 7, 20}, {size / 3, size / 2}, {size - 1, 10}, {size + 5, 3}} {
			off, n := max(r[0], 0), max(r[1], 1)
			got, sz, err := m.p.ReadAt(m.ctx, name, uint64(off), uint64(n))
			lo, hi := min(off, size), min(off+n, size)
			if err != nil || sz != uint64(size) || !bytes.Equal(got, want[lo:hi]) {
				m.t.Fatalf("%s: read %s [%d, +%d): %v (size %d, want %d; %d bytes)", when, name, off, n, err, sz, size, len(got))
			}
		}
	}
}

// TestECPartialWrites: a 2+1 pool takes writes at an offset and
// truncates through the client: small writes inside a chunk (a parity
// delta), across chunks and stripes, whole stripes, writes that extend
// the object or leave a hole past its end (zeros), a write that creates
// an object, cuts inside a stripe and growth; every object reads back
// whole and by range as a plain byte model says. After one OSD holding a
// data shard of them is SIGKILLed, everything still reads back (rebuilt
// from the other two shards), while it is still counted up and once the
// map has it down.
func TestECPartialWrites(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{metrics: true})
	p, _ := c.createECPool(t, "ecpw", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := &ecModel{t: t, ctx: ctx, p: p, objs: map[string][]byte{}}
	unit, stripe := clustermap.ECDefaultUnit, 2*clustermap.ECDefaultUnit

	m.put("a", payload("a", 0, 3*stripe+5000))
	m.writeAt("a", 5, []byte("a small write inside a chunk"))
	m.writeAt("a", unit-10, payload("a", 1, 20))                 // across two chunks
	m.writeAt("a", stripe-100, payload("a", 2, stripe+200))      // across three stripes
	m.writeAt("a", stripe, payload("a", 3, stripe))              // one whole stripe
	m.writeAt("a", len(m.objs["a"])-10, payload("a", 4, 9000))   // over the end
	m.writeAt("a", len(m.objs["a"])+70000, payload("a", 5, 300)) // a hole, then bytes
	m.writeAt("b", 40000, payload("b", 0, 5000))                 // creates b
	m.put("c", payload("c", 0, 2*stripe+100))
	m.truncate("c", stripe+unit+77) // inside a stripe
	m.writeAt("c", 3, []byte("after the cut"))
	m.truncate("c", 4*stripe+1) // growing: zeros
	m.truncate("d", 12345)      // creates d
	m.put("big", payload("big", 0, 1<<20+3))
	m.writeAt("big", 1<<19+11, payload("big", 1, 4096))
	m.check("written")
	// The small writes after a put or a write of their object needed no
	// version asked first: their parity positions XORed in deltas.
	known := osdMetricSum(t, c, `cairn_osd_ec_partial_writes_total{osd="%s",version="known"}`)
	asked := osdMetricSum(t, c, `cairn_osd_ec_partial_writes_total{osd="%s",version="asked"}`)
	if known < 4 || asked < 5 {
		t.Fatalf("partial writes with the version known %g, asked %g: want the 4 small ones known", known, asked)
	}
	// Every shard is whole and at its version: no read had to rebuild
	// around one (a shard of the wrong length or version would be served
	// around, silently but for this log line).
	for name, proc := range c.procs {
		if log, _ := os.ReadFile(proc.Log); bytes.Contains(log, []byte("shards at positions")) {
			t.Fatalf("%s rebuilt a read around a shard with every OSD up:\n%s", name, log)
		}
	}

	m2 := currentMap(t, c)
	pool, _ := m2.PoolByName("ecpw")
	_, pos := placement.NewTable(m2).Positions(pool, placement.PGOf(pool, "a"))
	victim := pos[1] // a data shard, not the primary: the primary rebuilds it
	c.kill(victim.String())
	m.check(victim.String() + " killed")
	c.waitStatus(20*time.Second, victim.String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, victim.String()+" on host")
	})
	m.check(victim.String() + " down")
}

// TestECPartialWriteCutShort: on a 2+1 pool with min_size 2, one
// position down, writes at an offset go on (acknowledged by the two
// others); then one cut short by its primary's crash
// (osd.FailpointECPartialPut) reaches only the primary's own position,
// leaving the PG with too few positions to peer without it. Once the
// primary is back, peering rolls its shard back (the old bytes of what
// the write changed, which it kept), and the acknowledged bytes read back, whole and by range, with
// the third position still down and once it is back and rebuilt; the
// object takes partial writes again, and on every position's disk its
// shard ends at one version, of the object's size, keeping nothing.
func TestECPartialWriteCutShort(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "partial-write")
	c := startCluster(t, clusterOpts{env: []string{osd.FailpointECPartialPut + "=" + trigger}})
	p, _ := c.createECPool(t, "ecwc", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := &ecModel{t: t, ctx: ctx, p: p, objs: map[string][]byte{}}
	stripe := 2 * clustermap.ECDefaultUnit
	m.put("w", payload("w", 0, 8*stripe+999))
	m2 := currentMap(t, c)
	pool, _ := m2.PoolByName("ecwc")
	id := placement.PGOf(pool, "w")
	_, pos := placement.NewTable(m2).Positions(pool, id)
	primary, stale := pos[0], pos[2]

	c.kill(stale.String())
	c.waitStatus(20*time.Second, stale.String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, stale.String()+" on host")
	})
	m.writeAt("w", 100, payload("w", 1, 3000))         // acknowledged by positions 0 and 1
	m.writeAt("w", 8*stripe+900, payload("w", 2, 500)) // growing
	if err := os.WriteFile(trigger, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.WriteAt(wctx, "w", 50, payload("w", 3, stripe+7))
	wcancel()
	if err == nil {
		t.Fatal("the write the failpoint cuts short was acknowledged")
	}
	if log, _ := os.ReadFile(c.procs[primary.String()].Log); !strings.Contains(string(log), "failpoint "+osd.FailpointECPartialPut) {
		t.Fatalf("%s did not fire the failpoint (write: %v)", primary, err)
	}
	c.restart(primary.String())
	m.check("the primary back, " + stale.String() + " still down")
	if log, _ := os.ReadFile(c.procs[primary.String()].Log); !strings.Contains(string(log), "rolled back 1 shard(s)") {
		t.Fatalf("%s's log does not show the partial write rolled back", primary)
	}
	c.restart(stale.String())
	c.waitHealthy(40*time.Second, "with every position back")
	m.check("every position back")
	m.writeAt("w", 7, []byte("after the rollback"))
	m.check("written again")
	time.Sleep(time.Second) // the trims of the last writes
	c.stop()
	checkShardsOnDisk(t, c, id.String(), pos, "w", len(m.objs["w"]))
}

// TestECSmallWriteSkipsPositions: a small write to a 2+1 object changes
// one data chunk and the parity; the other data position takes no part
// (its OSD gets no shard write) and keeps its older shard, which the new
// version names for it. The object reads back with the written data
// position's OSD down (the parity and the skipped position rebuild its
// chunk), takes writes to the other chunk meanwhile, deep scrub finds
// nothing once every OSD is back, and on disk every position holds one
// version with nothing left to roll back.
func TestECSmallWriteSkipsPositions(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{metrics: true})
	p, _ := c.createECPool(t, "ecskip", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := &ecModel{t: t, ctx: ctx, p: p, objs: map[string][]byte{}}
	stripe := 2 * clustermap.ECDefaultUnit
	m.put("s", payload("s", 0, 4*stripe))
	mp := currentMap(t, c)
	pool, _ := mp.PoolByName("ecskip")
	id := placement.PGOf(pool, "s")
	_, pos := placement.NewTable(mp).Positions(pool, id)
	shardWrites := func(o clustermap.OSDID) float64 {
		return metricValue(t, httpGet(t, "http://"+c.devJSON()[o.String()].Metrics+"/metrics"), fmt.Sprintf(`cairn_osd_requests_total{op="replicate",osd="%s"}`, o))
	}
	other, parity := shardWrites(pos[1]), shardWrites(pos[2])
	const writes = 8
	for i := range writes { // 4 KiB inside data chunk 0 of each stripe
		m.writeAt("s", (i%4)*stripe+4096*(1+i/4), payload("s", 1+i, 4096))
	}
	if got := shardWrites(pos[1]) - other; got != 0 {
		t.Errorf("%d small writes to data chunk 0 sent %v shard writes to position 1, which they do not change", writes, got)
	}
	if got := shardWrites(pos[2]) - parity; got < writes {
		t.Errorf("%d small writes sent the parity position %v shard writes", writes, got)
	}
	m.check("after small writes to chunk 0")

	c.kill(pos[0].String())
	c.waitStatus(20*time.Second, pos[0].String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, pos[0].String()+" on host")
	})
	m.check("with the data position the writes changed down")
	m.writeAt("s", stripe+clustermap.ECDefaultUnit+100, payload("s", 20, 3000)) // chunk 1, position 0 skipped
	m.check("after a write to chunk 1 with position 0 down")
	c.restart(pos[0].String())
	c.waitHealthy(40*time.Second, "with every position back")
	m.check("every position back")
	if out, err := c.cli(nil, "scrub", "--deep", "--json", id.String()); err != nil || !strings.Contains(string(out), `"errors": 0`) {
		t.Fatalf("deep scrub of %s after writes that skipped positions: %v\n%s", id, err, out)
	}
	time.Sleep(time.Second) // the trims of the last writes
	c.stop()
	checkShardsOnDisk(t, c, id.String(), pos, "s", len(m.objs["s"]))
}
