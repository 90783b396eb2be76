package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// layout describes a test cluster: hosts spread round-robin over racks.
type layout struct {
	racks, hosts, osdsPerHost int
	weight                    func(host, i int) float64 // nil: 1
	class                     func(host, i int) clustermap.DeviceClass
}

func buildMap(l layout) *clustermap.Map {
	m := &clustermap.Map{Epoch: 1, FSID: "test"}
	racks := max(l.racks, 1)
	id := clustermap.OSDID(0)
	for h := 0; h < l.hosts; h++ {
		name := fmt.Sprintf("host-%02d", h)
		m.UpsertHost(name, fmt.Sprintf("rack-%d", h%racks))
		for i := 0; i < l.osdsPerHost; i++ {
			o := clustermap.OSD{ID: id, Host: name, Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true}
			if l.weight != nil {
				o.Weight = l.weight(h, i)
			}
			if l.class != nil {
				o.Class = l.class(h, i)
			}
			m.UpsertOSD(o)
			id++
		}
	}
	return m
}

func addPool(m *clustermap.Map, size int, pgNum uint32, level string, class clustermap.DeviceClass) *clustermap.Pool {
	p := clustermap.Pool{
		ID: m.NextPoolID, Name: fmt.Sprintf("pool%d", m.NextPoolID), Size: size, MinSize: 1,
		PGNum: pgNum, Class: class, FailureDomain: level,
	}
	m.NextPoolID++
	m.Pools = append(m.Pools, p)
	return &m.Pools[len(m.Pools)-1]
}

// randomMap builds a messy map: varied racks, hosts, weights, classes and
// some OSDs out, down or at weight 0.
func randomMap(rng *rand.Rand) *clustermap.Map {
	classes := []clustermap.DeviceClass{clustermap.ClassHDD, clustermap.ClassSSD, clustermap.ClassNVMe}
	m := buildMap(layout{
		racks: 1 + rng.IntN(4), hosts: 1 + rng.IntN(10), osdsPerHost: 1 + rng.IntN(5),
		weight: func(int, int) float64 { return []float64{0, 0.5, 1, 1, 2, 3.7}[rng.IntN(6)] },
		class:  func(int, int) clustermap.DeviceClass { return classes[rng.IntN(3)] },
	})
	for i := range m.OSDs {
		m.OSDs[i].In = rng.IntN(8) != 0
		m.OSDs[i].Up = rng.IntN(5) != 0
		if rng.IntN(3) == 0 { // some share one of two flash devices of their host
			m.OSDs[i].Flash = []string{"nvme0", "nvme1"}[rng.IntN(2)]
		}
	}
	return m
}

func randomPool(rng *rand.Rand, m *clustermap.Map) *clustermap.Pool {
	levels := []string{clustermap.DomainOSD, clustermap.DomainHost, clustermap.DomainRack}
	classes := []clustermap.DeviceClass{"", clustermap.ClassHDD, clustermap.ClassSSD}
	return addPool(m, 1+rng.IntN(5), uint32(1+rng.IntN(64)), levels[rng.IntN(3)], classes[rng.IntN(3)])
}

func equalIDs(a, b []clustermap.OSDID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func pgs(pool *clustermap.Pool) []clustermap.PGID {
	out := make([]clustermap.PGID, pool.PGNum)
	for s := range out {
		out[s] = clustermap.PGID{Pool: pool.ID, Seed: uint32(s)}
	}
	return out
}

// placeAll places every PG of pool through a fresh Table (checked against
// direct Place by TestTableOracle) to keep large tests fast.
func placeAll(m *clustermap.Map, pool *clustermap.Pool) [][]clustermap.OSDID {
	t := NewTable(m)
	out := make([][]clustermap.OSDID, pool.PGNum)
	for _, pg := range pgs(pool) {
		out[pg.Seed] = t.Place(pool, pg)
	}
	return out
}

func mustOSD(t *testing.T, m *clustermap.Map, id clustermap.OSDID) *clustermap.OSD {
	t.Helper()
	o, ok := m.OSD(id)
	if !ok {
		t.Fatalf("placement returned %s, which is not in the map", id)
	}
	return o
}
