package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Table.Next must give exactly what a fresh table gives, whatever changed:
// random chains of map changes, each applied to a table whose PGs were
// partly looked up, compared PG by PG with NewTable of the new map.
func TestNextMatchesAFreshTable(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		m := buildMap(layout{racks: 3, hosts: 4 + r.IntN(6), osdsPerHost: 1 + r.IntN(4)})
		addPool(m, 3, 64, clustermap.DomainHost, "")
		addPool(m, 2, 32, clustermap.DomainOSD, "")
		addPool(m, 3, 16, clustermap.DomainRack, "")
		addPool(m, 6, 32, clustermap.DomainHost, "")
		m.Pools[len(m.Pools)-1].EC = &clustermap.ECProfile{K: 4, M: 2, StripeUnit: 4096}
		tab := NewTable(m)
		for step := 0; step < 12; step++ {
			lookUpSome(r, tab)
			next, what := randomChange(r, tab.Map())
			got, want := tab.Next(next), NewTable(next)
			for i := range next.Pools {
				p := &next.Pools[i]
				for s := uint32(0); s < p.PGNum; s++ {
					pg := clustermap.PGID{Pool: p.ID, Seed: s}
					if !equalIDs(got.Place(p, pg), want.Place(p, pg)) || !equalIDs(got.Acting(p, pg), want.Acting(p, pg)) {
						t.Fatalf("seed %d step %d (%s): pg %s: Next gives %v acting %v, a fresh table %v acting %v",
							seed, step, what, pg, got.Place(p, pg), got.Acting(p, pg), want.Place(p, pg), want.Acting(p, pg))
					}
					gp, ga := got.Positions(p, pg)
					wp, wa := want.Positions(p, pg)
					if !equalIDs(gp, wp) || !equalIDs(ga, wa) {
						t.Fatalf("seed %d step %d (%s): pg %s: Next gives positions %v acting %v, a fresh table %v acting %v",
							seed, step, what, pg, gp, ga, wp, wa)
					}
				}
			}
			tab = got
		}
	}
}

// lookUpSome fills a random part of tab's cache, as an IO path would.
func lookUpSome(r *rand.Rand, tab *Table) {
	m := tab.Map()
	for i := range m.Pools {
		p := &m.Pools[i]
		for s := uint32(0); s < p.PGNum; s++ {
			if r.IntN(3) > 0 {
				tab.Acting(p, clustermap.PGID{Pool: p.ID, Seed: s})
			}
		}
	}
}

// randomChange returns the next epoch of m with one change of the kinds a
// cluster sees, and names it.
func randomChange(r *rand.Rand, m *clustermap.Map) (*clustermap.Map, string) {
	n := m.Clone()
	n.Epoch++
	o := &n.OSDs[r.IntN(len(n.OSDs))]
	switch k := r.IntN(10); k {
	case 9:
		id := n.NextOSDID
		n.NextOSDID++
		host := fmt.Sprintf("host-%02d", 20+r.IntN(3))
		n.UpsertHost(host, fmt.Sprintf("rack-%d", r.IntN(4)))
		n.UpsertOSD(clustermap.OSD{ID: id, Host: host, Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true})
		return n, fmt.Sprintf("%s added on %s", id, host)
	case 0, 1:
		o.Up = !o.Up
		return n, fmt.Sprintf("%s up=%v", o.ID, o.Up)
	case 2, 3:
		o.In = !o.In
		return n, fmt.Sprintf("%s in=%v", o.ID, o.In)
	case 4:
		o.Weight = []float64{0, 0.5, 1, 2}[r.IntN(4)]
		return n, fmt.Sprintf("%s weight %g", o.ID, o.Weight)
	case 5:
		for i := range n.OSDs {
			if n.OSDs[i].Host == o.Host {
				n.OSDs[i].Up, n.OSDs[i].In = false, r.IntN(2) == 0
			}
		}
		return n, "host " + o.Host + " down"
	case 6:
		h, _ := n.Host(o.Host)
		h.Rack = fmt.Sprintf("rack-%d", r.IntN(4))
		return n, "host " + o.Host + " to " + h.Rack
	case 7:
		o.Addr = fmt.Sprintf("127.0.0.%d:%d", r.IntN(9), r.IntN(9999))
		return n, fmt.Sprintf("%s new address", o.ID)
	default:
		p := &n.Pools[r.IntN(len(n.Pools))]
		p.PGNum = []uint32{16, 32, 64}[r.IntN(3)]
		return n, fmt.Sprintf("pool %d pg_num %d", p.ID, p.PGNum)
	}
}

// An up/down change keeps every placement: Next computes nothing.
func BenchmarkNextUpDown(b *testing.B) {
	m := scaleMap(scaleSize{racks: 10, hosts: 100, osdsPerHost: 10, pgsPerOSD: 100, size: 3})
	tab := NewTable(m)
	placeEveryIn(tab)
	n := m.Clone()
	n.Epoch++
	n.OSDs[17].Up = false
	b.ResetTimer()
	for b.Loop() {
		placeEveryIn(tab.Next(n))
	}
}

func placeEveryIn(t *Table) {
	m := t.Map()
	for i := range m.Pools {
		p := &m.Pools[i]
		for s := uint32(0); s < p.PGNum; s++ {
			t.Acting(p, clustermap.PGID{Pool: p.ID, Seed: s})
		}
	}
}
