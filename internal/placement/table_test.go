package placement

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Oracle: on random maps and pools, Table agrees with direct Place/Acting,
// also when many goroutines fill it at once.
func TestTableOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for range 60 {
		m := randomMap(rng)
		for range 1 + rng.IntN(3) {
			randomPool(rng, m)
		}
		tab := NewTable(m)
		if tab.Map() != m {
			t.Fatal("Table.Map is not the map it was built from")
		}
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		for g := range 4 {
			wg.Go(func() {
				for i := range m.Pools {
					pool := &m.Pools[i]
					for _, pg := range pgs(pool) {
						if g%2 == 1 { // different fill orders
							pg.Seed = pool.PGNum - 1 - pg.Seed
						}
						if got, want := tab.Place(pool, pg), Place(m, pool, pg); !equalIDs(got, want) {
							errs <- fmt.Sprintf("pool %d pg %v: Table.Place %v, Place %v", pool.ID, pg, got, want)
							return
						}
						if got, want := tab.Acting(pool, pg), Acting(m, pool, pg); !equalIDs(got, want) {
							errs <- fmt.Sprintf("pool %d pg %v: Table.Acting %v, Acting %v", pool.ID, pg, got, want)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
		for i := range m.Pools {
			pool := &m.Pools[i]
			for j := range 50 {
				name := fmt.Sprintf("obj-%d-%d", i, j)
				pg, acting := tab.Locate(pool, name)
				if pg != PGOf(pool, name) || !equalIDs(acting, Acting(m, pool, pg)) {
					t.Fatalf("Locate(%q) = %v %v, want %v %v", name, pg, acting, PGOf(pool, name), Acting(m, pool, pg))
				}
			}
		}
	}
}

// A pool that is not the map's own (stale copy, other pg_num) is computed,
// not cached, and still right.
func TestTableForeignPool(t *testing.T) {
	m := buildMap(layout{racks: 2, hosts: 6, osdsPerHost: 3})
	pool := addPool(m, 3, 64, clustermap.DomainHost, "")
	tab := NewTable(m)
	stale := *pool
	stale.Size = 2
	stale.FailureDomain = clustermap.DomainRack
	unknown := stale
	unknown.ID = 77
	for _, p := range []*clustermap.Pool{&stale, pool, &unknown, &stale} {
		for _, pg := range pgs(p) {
			if got, want := tab.Place(p, pg), Place(m, p, pg); !equalIDs(got, want) {
				t.Fatalf("pool %+v pg %v: Table %v, Place %v", *p, pg, got, want)
			}
		}
		// A seed beyond pg_num is a caller bug, but must not panic.
		pg := clustermap.PGID{Pool: p.ID, Seed: p.PGNum + 5}
		if got, want := tab.Acting(p, pg), Acting(m, p, pg); !equalIDs(got, want) {
			t.Fatalf("pool %+v pg %v: Table %v, Acting %v", *p, pg, got, want)
		}
	}
}

// The hot path does not allocate once a PG is cached.
func TestTableLocateAllocs(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, 256, clustermap.DomainHost, "")
	tab := NewTable(m)
	tab.Locate(pool, "warm")
	if n := testing.AllocsPerRun(100, func() { tab.Locate(pool, "warm") }); n != 0 {
		t.Fatalf("Locate of a cached PG allocates %.1f times", n)
	}
}

func benchMap() (*clustermap.Map, *clustermap.Pool) {
	m := buildMap(layout{racks: 3, hosts: 12, osdsPerHost: 8})
	return m, addPool(m, 3, 4096, clustermap.DomainHost, "")
}

// Direct Place on 12 hosts x 8 OSDs: builds the view every call.
func BenchmarkPlace(b *testing.B) {
	m, pool := benchMap()
	b.ReportAllocs()
	var i uint32
	for b.Loop() {
		Place(m, pool, clustermap.PGID{Pool: pool.ID, Seed: i % pool.PGNum})
		i++
	}
}

// The draw alone, as a Table computes a PG the first time.
func BenchmarkPlaceCachedView(b *testing.B) {
	m, pool := benchMap()
	v := buildView(m, pool.Class, pool.FailureDomain)
	b.ReportAllocs()
	var i uint32
	for b.Loop() {
		v.place(clustermap.PGID{Pool: pool.ID, Seed: i % pool.PGNum}, pool.Size)
		i++
	}
}

// Warm Table: hash the name, find the PG's cached acting set.
func BenchmarkTableLocate(b *testing.B) {
	m, pool := benchMap()
	tab := NewTable(m)
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("rbd_data.5f2a.%016x", i)
		tab.Locate(pool, names[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tab.Locate(pool, names[i&1023])
		i++
	}
}

// An erasure-coded pool's table gives Shards' positions, and Place and
// Acting are them without holes, in position order, so the primary is the
// first position up.
func TestTableErasureCodedPool(t *testing.T) {
	m := buildMap(layout{hosts: 5, osdsPerHost: 2})
	pool := addPool(m, 6, 64, clustermap.DomainHost, "")
	pool.EC = &clustermap.ECProfile{K: 4, M: 2, StripeUnit: 4096}
	o := mustOSD(t, m, 3)
	o.Up = false
	tab := NewTable(m)
	holes := 0
	for _, pg := range pgs(pool) {
		wantPlace, wantActing := Shards(m, pool.Class, pool.FailureDomain, pg, pool.Size)
		place, acting := tab.Positions(pool, pg)
		if !equalIDs(place, wantPlace) || !equalIDs(acting, wantActing) {
			t.Fatalf("%s: table positions %v acting %v, Shards %v acting %v", pg, place, acting, wantPlace, wantActing)
		}
		var dense []clustermap.OSDID
		for _, o := range acting {
			if o != NoOSD {
				dense = append(dense, o)
			} else {
				holes++
			}
		}
		if got := tab.Acting(pool, pg); !equalIDs(got, dense) {
			t.Fatalf("%s: Acting %v, want the positions up in order %v", pg, got, dense)
		}
		if len(tab.Place(pool, pg)) != 5 {
			t.Fatalf("%s: placed %v: 5 hosts give 5 of 6 positions", pg, tab.Place(pool, pg))
		}
	}
	if holes == 0 {
		t.Fatal("no PG has a hole, yet OSD 3 is down and each host's OSDs serve some positions")
	}
	// The same pool read as replicated is placed the replicated way.
	rep := *pool
	rep.EC = nil
	if _, a := tab.Positions(&rep, pgs(pool)[0]); a != nil {
		t.Fatalf("a replicated pool has positions %v", a)
	}
}
