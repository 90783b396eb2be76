package e2e

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/placement"
)

// keysModel keeps what a client set of the xattrs and omap of objects of
// an erasure-coded pool, and checks the pool against it.
type keysModel struct {
	t      *testing.T
	ctx    context.Context
	p      *client.Pool
	xattrs map[string]map[string]string
	omap   map[string]map[string]string
	data   map[string][]byte
}

func (m *keysModel) setXattr(name, k, v string) {
	m.t.Helper()
	if err := m.p.SetXattr(m.ctx, name, k, []byte(v)); err != nil {
		m.t.Fatalf("setxattr %s %s: %v", name, k, err)
	}
	m.obj(name)
	m.xattrs[name][k] = v
}

func (m *keysModel) omapSet(name string, kvs map[string]string) {
	m.t.Helper()
	set := map[string][]byte{}
	for k, v := range kvs {
		set[k] = []byte(v)
	}
	if err := m.p.OmapSet(m.ctx, name, set); err != nil {
		m.t.Fatalf("omap set %s: %v", name, err)
	}
	m.obj(name)
	maps.Copy(m.omap[name], kvs)
}

func (m *keysModel) obj(name string) {
	if m.xattrs[name] == nil {
		m.xattrs[name], m.omap[name] = map[string]string{}, map[string]string{}
	}
}

// check reads every object's xattrs (listed and one by one), omap (listed
// in pages and by key) and data back.
func (m *keysModel) check(when string) {
	m.t.Helper()
	for name, want := range m.xattrs {
		xs, err := m.p.Xattrs(m.ctx, name)
		got := map[string]string{}
		for k, v := range xs {
			got[k] = string(v)
		}
		if err != nil || !maps.Equal(got, want) {
			m.t.Fatalf("%s: xattrs of %s: %v %v, want %v", when, name, got, err, want)
		}
		for k, v := range want {
			if b, err := m.p.GetXattr(m.ctx, name, k); err != nil || string(b) != v {
				m.t.Fatalf("%s: xattr %s of %s: %q %v, want %q", when, k, name, b, err, v)
			}
		}
		m.checkOmap(when, name)
		if b, err := m.p.Get(m.ctx, name); err != nil || !bytes.Equal(b, m.data[name]) {
			m.t.Fatalf("%s: data of %s: %d bytes, %v; want %d", when, name, len(b), err, len(m.data[name]))
		}
	}
}

func (m *keysModel) checkOmap(when, name string) {
	m.t.Helper()
	want, got := m.omap[name], map[string]string{}
	for start := ""; ; {
		kvs, more, err := m.p.OmapList(m.ctx, name, start, "", 2)
		if err != nil {
			m.t.Fatalf("%s: omap of %s: %v", when, name, err)
		}
		for _, kv := range kvs {
			got[kv.Key] = string(kv.Value)
			start = kv.Key + "\x00"
		}
		if !more || len(kvs) == 0 {
			break
		}
	}
	if !maps.Equal(got, want) {
		m.t.Fatalf("%s: omap of %s: %v, want %v", when, name, got, want)
	}
	keys := append(slicesOf(want), "absent")
	vals, err := m.p.OmapGet(m.ctx, name, keys...)
	if err != nil || len(vals) != len(want) {
		m.t.Fatalf("%s: omap get of %s: %v %v, want %v", when, name, vals, err, want)
	}
	for k, v := range vals {
		if want[k] != string(v) {
			m.t.Fatalf("%s: omap %s of %s: %q, want %q", when, k, name, v, want[k])
		}
	}
}

func slicesOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestECXattrsOmap: on a 2+1 pool (min_size 2) the Go client creates
// objects, sets, lists and removes xattrs and omap keys (on empty objects
// and on objects with data, which stays as it was), and reads them back;
// a delete takes them, and an object created again has none. With the
// OSD of the first position of one object's PG SIGKILLed, everything
// reads back from the other positions (while it is still counted up,
// and once down), and takes changes; the OSD restarted, recovery copies
// the keys with the shards it rebuilds there, and the reads, which the
// returned OSD serves as primary from its own position, hold every change.
func TestECXattrsOmap(t *testing.T) {
	t.Parallel()
	// The killed OSD stays in (no remapping): its positions are holes
	// until it returns, and then rebuilt on it.
	c := startCluster(t, clusterOpts{downOut: 10 * time.Minute})
	p, _ := c.createECPool(t, "eckv", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	m := &keysModel{t: t, ctx: ctx, p: p, xattrs: map[string]map[string]string{}, omap: map[string]map[string]string{}, data: map[string][]byte{}}

	if err := p.Create(ctx, "header", true); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := p.Create(ctx, "header", true); !errors.Is(err, client.ErrExists) {
		t.Fatalf("exclusive create of an existing object: %v", err)
	}
	m.obj("header")
	m.setXattr("header", "kind", "volume")
	m.omapSet("header", map[string]string{"size": "1073741824", "object_size": "4194304", "id": "abc"})
	m.omapSet("header", map[string]string{"size": "2147483648"})
	m.data["data"] = payload("data", 0, 100_000)
	if err := p.Put(ctx, "data", m.data["data"]); err != nil {
		t.Fatal(err)
	}
	m.setXattr("data", "a", "1")
	m.setXattr("data", "b", "2")
	m.omapSet("data", map[string]string{"k1": "v1", "k2": "v2", "k3": "v3"})
	if err := p.RmXattr(ctx, "data", "a"); err != nil {
		t.Fatal(err)
	}
	delete(m.xattrs["data"], "a")
	if err := p.OmapRm(ctx, "data", "k2"); err != nil {
		t.Fatal(err)
	}
	delete(m.omap["data"], "k2")
	if err := p.WriteAt(ctx, "data", 5, []byte("a write keeps the keys")); err != nil {
		t.Fatal(err)
	}
	copy(m.data["data"][5:], "a write keeps the keys")
	m.omapSet("gone", map[string]string{"old": "1"}) // creates it
	if err := p.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Xattrs(ctx, "gone"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("xattrs of a deleted object: %v", err)
	}
	if err := p.Create(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	m.xattrs["gone"], m.omap["gone"] = map[string]string{}, map[string]string{}
	m.check("written")

	m2 := currentMap(t, c)
	pool, _ := m2.PoolByName("eckv")
	_, pos := placement.NewTable(m2).Positions(pool, placement.PGOf(pool, "header"))
	victim := pos[0].String()
	c.kill(victim)
	m.check(victim + " killed")
	c.waitStatus(20*time.Second, victim+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, victim+" on host")
	})
	m.check(victim + " down")
	m.omapSet("header", map[string]string{"size": "4294967296", "new": "while down"})
	m.setXattr("data", "c", "3")
	m.check("written with " + victim + " down")

	c.restart(victim)
	c.waitHealthy(40*time.Second, "with "+victim+" back")
	// The returned OSD, primary again, reads from its own position once
	// recovery rebuilt its shards: a rebuilt shard without the keys
	// would answer with none.
	id := placement.PGOf(pool, "header").String()
	waitLog(t, c.procs[victim].Log, "pg "+id+" recovered", 30*time.Second)
	m.check(victim + " back and recovered")
}

// waitLog waits until the log at path holds want.
func waitLog(t *testing.T, path, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not say %q after %s:\n%s", path, want, timeout, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestECKeysChangeCutShort: on a 2+1 pool with min_size 2, one position
// down, an omap and xattr change is acknowledged by the two others; then
// one cut short by its primary's crash (osd.FailpointECPartialPut, which
// fires for changes of keys too) reaches only the primary's own position.
// Once the primary is back, peering rolls its shard back with the keys
// it kept, so the acknowledged keys read back and the cut change's do
// not, with the third position still down and once it is back and
// rebuilt.
func TestECKeysChangeCutShort(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "keys-change")
	c := startCluster(t, clusterOpts{downOut: 10 * time.Minute, env: []string{osd.FailpointECPartialPut + "=" + trigger}})
	p, _ := c.createECPool(t, "eckc", "2+1", "--min-size", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	m := &keysModel{t: t, ctx: ctx, p: p, xattrs: map[string]map[string]string{}, omap: map[string]map[string]string{}, data: map[string][]byte{}}
	m.data["h"] = payload("h", 0, 40_000)
	if err := p.Put(ctx, "h", m.data["h"]); err != nil {
		t.Fatal(err)
	}
	m.omapSet("h", map[string]string{"size": "1"})
	m2 := currentMap(t, c)
	pool, _ := m2.PoolByName("eckc")
	_, pos := placement.NewTable(m2).Positions(pool, placement.PGOf(pool, "h"))
	primary, stale := pos[0].String(), pos[2].String()

	c.kill(stale)
	c.waitStatus(20*time.Second, stale+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, stale+" on host")
	})
	m.omapSet("h", map[string]string{"size": "2"}) // acknowledged by positions 0 and 1
	m.setXattr("h", "kind", "volume")
	if err := os.WriteFile(trigger, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.OmapSet(wctx, "h", map[string][]byte{"size": []byte("3"), "cut": []byte("short")})
	wcancel()
	if err == nil {
		t.Fatal("the change the failpoint cuts short was acknowledged")
	}
	if log, _ := os.ReadFile(c.procs[primary].Log); !strings.Contains(string(log), "failpoint "+osd.FailpointECPartialPut) {
		t.Fatalf("%s did not fire the failpoint (change: %v)", primary, err)
	}
	c.restart(primary)
	m.check("the primary back, " + stale + " still down")
	if log, _ := os.ReadFile(c.procs[primary].Log); !strings.Contains(string(log), "rolled back 1 shard(s)") {
		t.Fatalf("%s's log does not show the change rolled back", primary)
	}
	c.restart(stale)
	c.waitHealthy(40*time.Second, "with every position back")
	m.check("every position back")
}
