package placement

import (
	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Erasure-coded PGs place by position: shard i of every object of a PG
// lives on position i's OSD. A replicated PG may reorder its copies (any
// copy serves any read), an erasure-coded one may not: if an OSD going out
// shifted every later position, each of them would have to rebuild a
// shard it does not hold. So each position draws on its own, and a
// position that loses its OSD leaves a hole (acting) or draws again
// (placement) without moving the others.
//
// The draw, frozen like Place's (changing it moves data):
//
//   - the draws see every OSD with weight of the pool's class, out or
//     in, so an OSD marked out changes no domain's weight and no other
//     position's race (Ceph's CRUSH treats out the same way);
//   - first, in round r (0, 1, ...), each position i still empty, in
//     order, runs a straw2 race over the failure domains with selector
//     selShard + i<<16 + r; a domain another position drew first is
//     passed over; otherwise the position takes the domain's OSD as Place
//     draws it, or, if that OSD is out, steps aside, keeping the domain
//     drawn so that no other position's outcome changes;
//   - then the positions that stepped aside draw among the domains no
//     position took (selectors from selShard + i<<16 + shardRounds on),
//     and among the OSDs in there that are in;
//   - a position still empty takes the free domain with an OSD in that
//     wins its last race, or stays NoOSD when none is left.
//
// An OSD or a host going out therefore moves only its own positions, when
// no other OSD of the PG's draw was out before; TestShardMovement checks
// it.

// NoOSD marks a position without an OSD: no domain was left for it, or
// (in an acting set) its OSD is down.
const NoOSD clustermap.OSDID = -1

const (
	selShard    = 3 << 32
	shardRounds = 50
)

// Shards returns the OSD of each of n positions of pg in m, for a pool
// whose failure domain is level and device class class, and the acting
// form (NoOSD where the OSD is down).
func Shards(m *clustermap.Map, class clustermap.DeviceClass, level string, pg clustermap.PGID, n int) (place, acting []clustermap.OSDID) {
	return buildShardView(m, class, level).shards(pg, n)
}

func (v *view) shards(pg clustermap.PGID, n int) (place, acting []clustermap.OSDID) {
	pgk := pgKey(pg)
	s := &shardDraw{v: v, pgk: pgk, dom: make([]int, n), osd: make([]int, n), taken: map[int]bool{}}
	for i := range s.dom {
		s.dom[i], s.osd[i] = -1, -1
	}
	deferred := s.first()
	s.again(deferred)
	s.last()
	place, acting = make([]clustermap.OSDID, n), make([]clustermap.OSDID, n)
	for i, d := range s.dom {
		place[i], acting[i] = NoOSD, NoOSD
		if d < 0 {
			continue
		}
		mb := &v.domains[d].osds[s.osd[i]]
		place[i] = mb.id
		if mb.up {
			acting[i] = mb.id
		}
	}
	return place, acting
}

// shardDraw is one PG's draw of its positions.
type shardDraw struct {
	v        *view
	pgk      uint64
	dom, osd []int // by position: domain and member index, -1 while empty
	taken    map[int]bool
}

func (s *shardDraw) take(i, d, o int) { s.dom[i], s.osd[i], s.taken[d] = d, o, true }

func (s *shardDraw) sel(i, r int) uint64 { return selShard + uint64(i)<<16 + uint64(r) }

// first runs the rounds of the positions whose draws meet no OSD that is
// out: a position whose domain's OSD is out steps aside (it is returned),
// its domain stays drawn, and no other position's draw changes because
// of it.
func (s *shardDraw) first() []int {
	drawnBy := map[int]int{}
	var deferred []int
	out := make([]bool, len(s.dom))
	for r := 0; r < shardRounds && len(s.v.domains) > 0; r++ {
		for i := range s.dom {
			if s.dom[i] >= 0 || out[i] {
				continue
			}
			d := s.v.race(s.pgk, s.sel(i, r), nil)
			if by, ok := drawnBy[d]; ok && by != i {
				continue
			}
			drawnBy[d] = i
			o := s.v.domains[d].pickOSD(s.pgk)
			if !s.v.domains[d].osds[o].in {
				out[i] = true
				deferred = append(deferred, i)
				continue
			}
			s.take(i, d, o)
		}
	}
	return deferred
}

// again draws the positions that met an OSD that is out, among the
// domains no position took, and the OSDs in there.
func (s *shardDraw) again(deferred []int) {
	for r := 0; r < shardRounds; r++ {
		for _, i := range deferred {
			if s.dom[i] >= 0 {
				continue
			}
			d := s.v.race(s.pgk, s.sel(i, shardRounds+r), func(d int) bool { return !s.taken[d] })
			if d < 0 {
				return
			}
			if o := s.v.domains[d].pickAmong(s.pgk, selOSD+uint64(r+1)<<16, true); o >= 0 {
				s.take(i, d, o)
			}
		}
	}
}

// last gives each position still empty the best free domain with an OSD
// in, if any is left.
func (s *shardDraw) last() {
	for i := range s.dom {
		if s.dom[i] >= 0 {
			continue
		}
		d := s.v.race(s.pgk, s.sel(i, 2*shardRounds), func(d int) bool { return !s.taken[d] && s.v.domains[d].anyIn() })
		if d >= 0 {
			s.take(i, d, s.v.domains[d].pickAmong(s.pgk, selOSD+2*shardRounds<<16, true))
		}
	}
}

// race is the straw2 winner among the domains ok accepts (nil: all) for
// one selector, or -1 if it accepts none; ties go to the earlier domain in
// sorted order.
func (v *view) race(pgk, sel uint64, ok func(int) bool) int {
	best, bestScore := -1, 0.0
	for i := range v.domains {
		if ok != nil && !ok(i) {
			continue
		}
		d := &v.domains[i]
		x := lnUnit(drawHash(pgk, d.key, sel)) / d.w
		if best < 0 || x > bestScore {
			best, bestScore = i, x
		}
	}
	return best
}

func (d *domain) anyIn() bool {
	for _, mb := range d.osds {
		if mb.in {
			return true
		}
	}
	return false
}

// pickAmong is a straw2 draw among the domain's OSDs (only those in, if
// onlyIn) with selector sel; -1 if there is none.
func (d *domain) pickAmong(pgk, sel uint64, onlyIn bool) int {
	best, bestScore := -1, 0.0
	for i := range d.osds {
		mb := &d.osds[i]
		if onlyIn && !mb.in {
			continue
		}
		x := lnUnit(drawHash(pgk, uint64(uint32(mb.id)), sel)) / mb.w
		if best < 0 || x > bestScore {
			best, bestScore = i, x
		}
	}
	return best
}
