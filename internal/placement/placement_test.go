package placement

import (
	"math/rand/v2"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// checkPlacement asserts every invariant of one PG's Place and Acting.
func checkPlacement(t *testing.T, m *clustermap.Map, pool *clustermap.Pool, pg clustermap.PGID, place, acting []clustermap.OSDID) {
	t.Helper()
	level := normLevel(pool.FailureDomain)
	want := min(pool.Size, m.CountDomains(level, pool.Class))
	if len(place) != want {
		t.Fatalf("pg %v: Place gave %d OSDs %v, want min(size %d, %d domains) = %d", pg, len(place), place, pool.Size, m.CountDomains(level, pool.Class), want)
	}
	seen := map[string]clustermap.OSDID{}
	for _, id := range place {
		o := mustOSD(t, m, id)
		if !o.In || o.Weight <= 0 {
			t.Fatalf("pg %v: Place chose %s with in=%v weight=%v: %v", pg, id, o.In, o.Weight, place)
		}
		if pool.Class != "" && o.Class != pool.Class {
			t.Fatalf("pg %v: pool class %q but Place chose %s of class %q", pg, pool.Class, id, o.Class)
		}
		d := m.DomainOf(o, level)
		if prev, dup := seen[d]; dup {
			t.Fatalf("pg %v: %s and %s share %s %q: %v", pg, prev, id, level, d, place)
		}
		seen[d] = id
	}
	var up []clustermap.OSDID
	for _, id := range place {
		if mustOSD(t, m, id).Up {
			up = append(up, id)
		}
	}
	if !equalIDs(up, acting) {
		t.Fatalf("pg %v: Acting = %v, want the up OSDs of %v in order: %v", pg, acting, place, up)
	}
}

func TestInvariantsRandomMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 150 {
		m := randomMap(rng)
		pool := randomPool(rng, m)
		for _, pg := range pgs(pool) {
			checkPlacement(t, m, pool, pg, Place(m, pool, pg), Acting(m, pool, pg))
		}
	}
}

func TestInvariantsEachLevel(t *testing.T) {
	m := buildMap(layout{
		racks: 3, hosts: 9, osdsPerHost: 4,
		weight: func(h, i int) float64 { return []float64{1, 2, 0, 1.5}[(h+i)%4] },
		class: func(h, i int) clustermap.DeviceClass {
			if i == 3 {
				return clustermap.ClassSSD
			}
			return clustermap.ClassHDD
		},
	})
	m.OSDs[5].In = false
	m.OSDs[6].Up = false
	m.OSDs[17].Up = false
	for _, level := range []string{clustermap.DomainOSD, clustermap.DomainHost, clustermap.DomainRack} {
		for _, class := range []clustermap.DeviceClass{"", clustermap.ClassHDD, clustermap.ClassSSD} {
			for _, size := range []int{1, 2, 3, 5} {
				pool := addPool(m, size, 256, level, class)
				for _, pg := range pgs(pool) {
					checkPlacement(t, m, pool, pg, Place(m, pool, pg), Acting(m, pool, pg))
				}
			}
		}
	}
}

func TestFewDomains(t *testing.T) {
	m := buildMap(layout{racks: 1, hosts: 2, osdsPerHost: 3})
	for _, c := range []struct {
		level string
		size  int
		want  int
	}{
		{clustermap.DomainHost, 3, 2},
		{clustermap.DomainHost, 16, 2},
		{clustermap.DomainRack, 3, 1},
		{clustermap.DomainOSD, 8, 6},
		{clustermap.DomainOSD, 6, 6},
	} {
		pool := addPool(m, c.size, 64, c.level, "")
		for _, pg := range pgs(pool) {
			p := Place(m, pool, pg)
			if len(p) != c.want {
				t.Fatalf("level %s size %d: pg %v got %d OSDs %v, want %d", c.level, c.size, pg, len(p), p, c.want)
			}
			checkPlacement(t, m, pool, pg, p, Acting(m, pool, pg))
		}
	}
	// No eligible OSD at all: empty, not a panic.
	pool := addPool(m, 3, 8, clustermap.DomainHost, clustermap.ClassNVMe)
	if p := Place(m, pool, clustermap.PGID{Pool: pool.ID}); len(p) != 0 {
		t.Fatalf("no nvme OSDs, but Place gave %v", p)
	}
	if p := Place(&clustermap.Map{}, pool, clustermap.PGID{Pool: pool.ID}); len(p) != 0 {
		t.Fatalf("empty map, but Place gave %v", p)
	}
	pool.Size = 0
	if p := Place(m, pool, clustermap.PGID{Pool: pool.ID}); len(p) != 0 {
		t.Fatalf("size 0, but Place gave %v", p)
	}
}

// Raising size only appends replicas: existing copies stay where they are.
func TestSizeIsPrefix(t *testing.T) {
	m := buildMap(layout{racks: 2, hosts: 8, osdsPerHost: 3, weight: func(h, i int) float64 { return float64(1 + (h*3+i)%3) }})
	small := addPool(m, 2, 512, clustermap.DomainHost, "")
	big := addPool(m, 5, 512, clustermap.DomainHost, "")
	for _, pg := range pgs(small) {
		a, b := Place(m, small, pg), Place(m, big, pg)
		if !equalIDs(a, b[:2]) {
			t.Fatalf("pg %v: size 2 gives %v but size 5 gives %v", pg, a, b)
		}
	}
}

func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for range 40 {
		m := randomMap(rng)
		pool := randomPool(rng, m)
		clone := m.Clone()
		decoded, err := clustermap.Decode(m.Encode())
		if err != nil {
			t.Fatal(err)
		}
		// Rebuilt from scratch, same order.
		rebuilt := &clustermap.Map{Pools: m.Pools, NextPoolID: m.NextPoolID}
		for _, h := range m.Hosts {
			rebuilt.UpsertHost(h.Name, h.Rack)
		}
		for _, o := range m.OSDs {
			rebuilt.UpsertOSD(o)
		}
		// OSDs listed backwards (not a valid map, but placement must not care).
		reversed := m.Clone()
		for i, j := 0, len(reversed.OSDs)-1; i < j; i, j = i+1, j-1 {
			reversed.OSDs[i], reversed.OSDs[j] = reversed.OSDs[j], reversed.OSDs[i]
		}
		for _, pg := range pgs(pool) {
			want := Place(m, pool, pg)
			wantA := Acting(m, pool, pg)
			for name, other := range map[string]*clustermap.Map{"same map": m, "clone": clone, "decoded": decoded, "rebuilt": rebuilt, "reversed": reversed} {
				if got := Place(other, pool, pg); !equalIDs(got, want) {
					t.Fatalf("pg %v: Place on %s = %v, on original = %v", pg, name, got, want)
				}
				if got := Acting(other, pool, pg); !equalIDs(got, wantA) {
					t.Fatalf("pg %v: Acting on %s = %v, on original = %v", pg, name, got, wantA)
				}
			}
		}
	}
}

// Golden placements: a failure means the frozen draw changed and every PG
// of every cluster would move.
func TestPlaceGolden(t *testing.T) {
	m := buildMap(layout{racks: 2, hosts: 6, osdsPerHost: 4, weight: func(h, i int) float64 { return float64(1 + (h+i)%2) }})
	want := map[string][][]clustermap.OSDID{
		clustermap.DomainOSD:  {{14, 1, 22}, {4, 17, 2}, {19, 9, 16}, {7, 1, 0}, {9, 1, 5}, {5, 22, 10}, {8, 11, 20}, {15, 4, 3}},
		clustermap.DomainHost: {{22, 6, 11}, {9, 7, 20}, {11, 4, 17}, {12, 22, 6}, {7, 22, 11}, {16, 20, 1}, {11, 14, 6}, {0, 9, 14}},
		clustermap.DomainRack: {{16, 6}, {14, 3}, {4, 10}, {16, 7}, {12, 9}, {17, 14}, {17, 6}, {22, 11}},
	}
	for _, level := range []string{clustermap.DomainOSD, clustermap.DomainHost, clustermap.DomainRack} {
		pool := addPool(m, 3, 8, level, "")
		for _, pg := range pgs(pool) {
			if got := Place(m, pool, pg); !equalIDs(got, want[level][pg.Seed]) {
				t.Errorf("level %s pg %v: Place = %v, want %v (frozen format changed)", level, pg, got, want[level][pg.Seed])
			}
		}
	}
}
