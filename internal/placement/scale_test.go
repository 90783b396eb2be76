package placement

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// A cluster far larger than any test machine, built as a map only (no
// processes): what one host and one rack failure cost at that size. Run
// by hand at full size (1,000 hosts × 10 OSDs in 50 racks, 100 PGs per
// OSD) with
//
//	go test ./internal/placement -run TestScale -v -scale full
//
// and at a tenth of it in `make test`. It prints the figures; the only
// assertions are on data movement, which does not depend on the machine.
var scale = flag.String("scale", "small", "TestScale's size: small (100 hosts) or full (1,000 hosts)")

type scaleSize struct {
	racks, hosts, osdsPerHost int
	pgsPerOSD, size           int
}

func (z scaleSize) osds() int { return z.hosts * z.osdsPerHost }

// pools spreads the PGs over as many pools as MaxPGNum requires.
func (z scaleSize) pools() []uint32 {
	total := z.osds() * z.pgsPerOSD / z.size
	var out []uint32
	for total > 0 {
		n := min(total, clustermap.MaxPGNum)
		out = append(out, uint32(n))
		total -= n
	}
	return out
}

// scaleMap builds the map as a cluster of that size would hold it: real
// addresses and up-since times, hosts in racks, pools by host.
func scaleMap(z scaleSize) *clustermap.Map {
	m := &clustermap.Map{Epoch: 1, FSID: "5c0e4a8e-0f6c-4f0e-9d7b-4a1f0c2b9e11", NextOSDID: clustermap.OSDID(z.osds())}
	since := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for h := 0; h < z.hosts; h++ {
		m.Hosts = append(m.Hosts, clustermap.Host{Name: fmt.Sprintf("node%04d", h), Rack: fmt.Sprintf("rack%02d", h%z.racks)})
		for i := 0; i < z.osdsPerHost; i++ {
			m.OSDs = append(m.OSDs, clustermap.OSD{
				ID: clustermap.OSDID(h*z.osdsPerHost + i), Host: fmt.Sprintf("node%04d", h),
				Addr:  fmt.Sprintf("10.%d.%d.%d:%d", h/250, h%250, 10+i, 6800+i),
				Class: clustermap.ClassHDD, Weight: 16, Up: true, In: true, UpSince: since.Add(time.Duration(h) * time.Second),
			})
		}
	}
	for i, n := range z.pools() {
		m.Pools = append(m.Pools, clustermap.Pool{ID: clustermap.PoolID(i + 1), Name: fmt.Sprintf("pool%d", i+1), Size: z.size, MinSize: 2, PGNum: n, FailureDomain: clustermap.DomainHost})
	}
	m.NextPoolID = clustermap.PoolID(len(m.Pools) + 1)
	return m
}

// placement of every PG of every pool, as an OSD that looks at all of
// them after a map change (checkPGs) computes it.
type scaleRun struct {
	up, acting [][]clustermap.OSDID // by PG, pools one after the other
	took       time.Duration
}

func placeEvery(m *clustermap.Map) scaleRun { return placeEveryWith(NewTable(m)) }

// placeEveryWith looks up every PG in t, timing the table's making too
// when the caller starts the clock; here it starts at the first lookup.
func placeEveryWith(t *Table) scaleRun {
	start := time.Now()
	m := t.Map()
	var r scaleRun
	for i := range m.Pools {
		p := &m.Pools[i]
		for s := uint32(0); s < p.PGNum; s++ {
			pg := clustermap.PGID{Pool: p.ID, Seed: s}
			r.up = append(r.up, t.Place(p, pg))
			r.acting = append(r.acting, t.Acting(p, pg))
		}
	}
	r.took = time.Since(start)
	return r
}

// scaleChange is what one change of the map costs.
type scaleChange struct {
	what                   string
	actingChanged          int // PGs that peer again: one record write each
	copiesMoved, ideal     int // PG copies placed elsewhere; those the failed (or returning) OSDs held (take)
	applyDecode, applyRest time.Duration
	applyNext              time.Duration // Table.Next from the previous table, then every PG
}

// change applies f to a copy of m (a new epoch) and measures it against
// before, whose table prev is.
func change(t *testing.T, m *clustermap.Map, prev *Table, before scaleRun, what string, f func(*clustermap.Map)) scaleChange {
	next := m.Clone()
	next.Epoch++
	f(next)
	enc := next.Encode()
	start := time.Now()
	dec, err := clustermap.Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	c := scaleChange{what: what, applyDecode: time.Since(start)}
	after := placeEvery(dec)
	c.applyRest = after.took
	start = time.Now()
	derived := placeEveryWith(prev.Next(dec))
	c.applyNext = time.Since(start)
	for i := range after.acting {
		if !equalIDs(after.acting[i], derived.acting[i]) || !equalIDs(after.up[i], derived.up[i]) {
			t.Fatalf("%s: pg #%d: Table.Next gives %v, a fresh table %v", what, i, derived.up[i], after.up[i])
		}
	}
	for i := range before.acting {
		if !equalIDs(before.acting[i], after.acting[i]) {
			c.actingChanged++
		}
		for _, o := range before.up[i] {
			if osd, _ := dec.OSD(o); !osd.In {
				c.ideal++
			}
		}
		for _, o := range after.up[i] {
			if !contains(before.up[i], o) {
				c.copiesMoved++
			}
			if osd, _ := m.OSD(o); !osd.In {
				c.ideal++ // back in: it takes its share again
			}
		}
	}
	return c
}

func TestScale(t *testing.T) {
	z := scaleSize{racks: 10, hosts: 100, osdsPerHost: 10, pgsPerOSD: 100, size: 3}
	if *scale == "full" {
		z = scaleSize{racks: 50, hosts: 1000, osdsPerHost: 10, pgsPerOSD: 100, size: 3}
	}
	m := scaleMap(z)
	start := time.Now()
	enc := m.Encode()
	encTook := time.Since(start)
	start = time.Now()
	if _, err := clustermap.Decode(enc); err != nil {
		t.Fatal(err)
	}
	decTook := time.Since(start)
	prev := NewTable(m)
	base := placeEveryWith(prev)
	rec, _ := json.Marshal(map[string]any{"epoch": 123456, "acting": []int{1234, 5678, 9012}, "complete": []int{1234, 5678, 9012}})

	host := m.Hosts[len(m.Hosts)/2].Name
	rack := m.Hosts[0].Rack
	mark := func(in bool, match func(o *clustermap.OSD) bool) func(*clustermap.Map) {
		return func(n *clustermap.Map) {
			for i := range n.OSDs {
				if match(&n.OSDs[i]) {
					n.OSDs[i].Up, n.OSDs[i].In = false, in
				}
			}
		}
	}
	onHost := func(o *clustermap.OSD) bool { return o.Host == host }
	hosts := map[string]string{}
	for _, h := range m.Hosts {
		hosts[h.Name] = h.Rack
	}
	inRack := func(o *clustermap.OSD) bool { return hosts[o.Host] == rack }
	// The way back: from the map with the host (rack) out, placed in full,
	// to the one with it up and in again.
	back := func(match func(o *clustermap.OSD) bool, what string) scaleChange {
		out := m.Clone()
		mark(false, match)(out)
		outTable := NewTable(out)
		outRun := placeEveryWith(outTable)
		return change(t, out, outTable, outRun, what, func(n *clustermap.Map) {
			for i := range n.OSDs {
				if match(&n.OSDs[i]) {
					n.OSDs[i].Up, n.OSDs[i].In = true, true
				}
			}
		})
	}
	changes := []scaleChange{
		change(t, m, prev, base, "one host down (10 OSDs)", mark(true, onHost)),
		change(t, m, prev, base, "that host out", mark(false, onHost)),
		back(onHost, "that host back in"),
		change(t, m, prev, base, "one rack down", mark(true, inRack)),
		change(t, m, prev, base, "that rack out", mark(false, inRack)),
		back(inRack, "that rack back in"),
	}

	var b strings.Builder
	fmt.Fprintf(&b, "cluster: %d racks, %d hosts, %d OSDs, %d PGs in %d pools (size %d, %d PGs per OSD)\n",
		z.racks, z.hosts, z.osds(), len(base.up), len(m.Pools), z.size, z.pgsPerOSD)
	fmt.Fprintf(&b, "map: %d bytes JSON, encode %s, decode+validate %s; placing every PG: %s (%.2f µs a PG)\n",
		len(enc), encTook.Round(time.Millisecond), decTook.Round(time.Millisecond), base.took.Round(time.Millisecond),
		float64(base.took.Microseconds())/float64(len(base.up)))
	fmt.Fprintf(&b, "| change | PGs peering again (record writes) | etcd bytes (map + records) | copies moved | ideal (copies of the OSDs going out or coming in) | moved/ideal | apply: decode | apply: place every PG afresh | apply: Table.Next, every PG |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range changes {
		ratio := "-"
		if c.ideal > 0 {
			ratio = fmt.Sprintf("%.3f", float64(c.copiesMoved)/float64(c.ideal))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s | %s | %s |\n", c.what, c.actingChanged,
			len(enc)+c.actingChanged*len(rec), c.copiesMoved, c.ideal, ratio, c.applyDecode.Round(time.Millisecond),
			c.applyRest.Round(time.Millisecond), c.applyNext.Round(time.Millisecond))
	}
	t.Log("\n" + b.String())

	for _, c := range changes {
		if c.ideal == 0 && c.copiesMoved != 0 {
			t.Errorf("%s: %d copies moved although no OSD went out", c.what, c.copiesMoved)
		}
		if c.ideal > 0 && float64(c.copiesMoved) > 1.1*float64(c.ideal) {
			t.Errorf("%s: %d copies moved for %d the failed OSDs held: more than 10%% over the ideal", c.what, c.copiesMoved, c.ideal)
		}
	}
}
