package placement

import (
	"fmt"
	"math"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// shares counts PG replicas per OSD and returns, per OSD, its replica share
// divided by its weight share, minus one (0 is perfect).
func shares(m *clustermap.Map, pool *clustermap.Pool, placed [][]clustermap.OSDID) (dev map[clustermap.OSDID]float64, perOSD float64) {
	count := map[clustermap.OSDID]int{}
	total := 0
	for _, p := range placed {
		for _, id := range p {
			count[id]++
			total++
		}
	}
	wsum := 0.0
	for _, o := range m.OSDs {
		if eligible(&o, pool.Class) {
			wsum += o.Weight
		}
	}
	dev = map[clustermap.OSDID]float64{}
	n := 0
	for _, o := range m.OSDs {
		if !eligible(&o, pool.Class) {
			continue
		}
		n++
		dev[o.ID] = (float64(count[o.ID])/float64(total))/(o.Weight/wsum) - 1
	}
	return dev, float64(total) / float64(n)
}

func worst(dev map[clustermap.OSDID]float64) (clustermap.OSDID, float64, float64) {
	var wid clustermap.OSDID
	w, ss := 0.0, 0.0
	for id, d := range dev {
		ss += d * d
		if math.Abs(d) > math.Abs(w) || (math.Abs(d) == math.Abs(w) && id < wid) {
			wid, w = id, d
		}
	}
	return wid, w, math.Sqrt(ss / float64(len(dev)))
}

// Each OSD's share of PG replicas is within ±10% of its weight share.
//
// ±10% needs about 1000+ replicas per OSD: at 100 per OSD, the Poisson noise
// of any random placement alone is ±10% (one standard deviation). The
// low-PG case below checks that the spread at ~128 per OSD is what pure
// chance gives, no more.
//
// Host weights are kept equal (unequal OSD weights sit inside each host),
// or moderately unequal with 8 hosts: with size 3 on few hosts, a host
// weighing more than 1/size of the total cannot get its share, since a PG
// holds it at most once.
func TestBalance(t *testing.T) {
	for _, c := range []struct {
		name  string
		l     layout
		level string
		size  int
		pgNum uint32
		bound float64
	}{
		{"6x4 equal, host, size 3", layout{hosts: 6, osdsPerHost: 4}, clustermap.DomainHost, 3, 16384, 0.10},
		{"6x4 half weight 2 (hosts equal), host, size 3", layout{hosts: 6, osdsPerHost: 4, weight: func(h, i int) float64 { return float64(1 + i%2) }}, clustermap.DomainHost, 3, 16384, 0.10},
		{"24 OSDs third weight 2, osd, size 3", layout{hosts: 6, osdsPerHost: 4, weight: func(h, i int) float64 { return float64(1 + b2i((h*4+i)%3 == 0)) }}, clustermap.DomainOSD, 3, 16384, 0.10},
		{"8 hosts of weight 4 or 5 (1.25x), host, size 3", layout{hosts: 8, osdsPerHost: 5, weight: func(h, i int) float64 { return float64(b2i(h < 3 || i < 4)) }}, clustermap.DomainHost, 3, 65536, 0.10},
		// Known limit, asserted loosely so that it cannot get worse: two
		// hosts of 2x weight (20% of the total each) get about 9% less than
		// their share and the light ones about 6% more, because a PG holds
		// a host at most once.
		{"8x4, 2 hosts of weight-2 OSDs (2x), host, size 3", layout{hosts: 8, osdsPerHost: 4, weight: func(h, i int) float64 { return float64(1 + b2i(h < 2)) }}, clustermap.DomainHost, 3, 65536, 0.15},
		{"4 racks x 2 hosts x 3, rack, size 2", layout{racks: 4, hosts: 8, osdsPerHost: 3}, clustermap.DomainRack, 2, 16384, 0.10},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := buildMap(c.l)
			pool := addPool(m, c.size, c.pgNum, c.level, "")
			dev, per := shares(m, pool, placeAll(m, pool))
			id, w, rms := worst(dev)
			t.Logf("%.0f replicas/OSD: worst %s %+.2f%%, rms %.2f%%", per, id, 100*w, 100*rms)
			if math.Abs(w) > c.bound {
				t.Errorf("%s holds %+.2f%% of its weight share (bound ±%.0f%%, %.0f replicas/OSD, rms %.2f%%)", id, 100*w, 100*c.bound, per, 100*rms)
			}
		})
	}
}

// At ~128 replicas per OSD the spread must match chance: rms relative
// deviation near 1/sqrt(128) = 8.8%, not worse.
func TestBalanceLowPGCount(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, 1024, clustermap.DomainHost, "")
	dev, per := shares(m, pool, placeAll(m, pool))
	id, w, rms := worst(dev)
	chance := 1 / math.Sqrt(per)
	t.Logf("%.0f replicas/OSD: worst %s %+.2f%%, rms %.2f%% (chance %.2f%%)", per, id, 100*w, 100*rms, 100*chance)
	if rms > 1.5*chance || math.Abs(w) > 4*chance {
		t.Errorf("%.0f replicas/OSD: rms deviation %.2f%%, worst %s %+.2f%%; chance alone gives rms %.2f%%", per, 100*rms, id, 100*w, 100*chance)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// movement compares two placements of the same PGs.
type movement struct {
	slots, changedSlots int // (pg, slot) assignments
	replicas, moved     int // (pg, osd) pairs in after but not before
	pgsChanged          int
}

func (mv movement) String() string {
	return fmt.Sprintf("%d/%d slots changed (%.2f%%), %d/%d replicas moved (%.2f%%), %d PGs changed",
		mv.changedSlots, mv.slots, 100*mv.slotFrac(), mv.moved, mv.replicas, 100*mv.movedFrac(), mv.pgsChanged)
}
func (mv movement) slotFrac() float64  { return float64(mv.changedSlots) / float64(mv.slots) }
func (mv movement) movedFrac() float64 { return float64(mv.moved) / float64(mv.replicas) }

func compare(before, after [][]clustermap.OSDID) movement {
	var mv movement
	for i := range before {
		b, a := before[i], after[i]
		mv.slots += max(len(a), len(b))
		mv.replicas += len(a)
		for s := range max(len(a), len(b)) {
			if s >= len(a) || s >= len(b) || a[s] != b[s] {
				mv.changedSlots++
			}
		}
		for _, id := range a {
			if !contains(b, id) {
				mv.moved++
			}
		}
		if !equalIDs(a, b) {
			mv.pgsChanged++
		}
	}
	return mv
}

func contains(ids []clustermap.OSDID, id clustermap.OSDID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
