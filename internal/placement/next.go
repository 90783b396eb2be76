package placement

import (
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Next returns the table of m, a newer map, keeping t's placements where
// the change cannot have moved them, so a daemon applies a map in time
// proportional to what changed rather than to the number of PGs (placing
// every PG of a cluster of 1,000 hosts takes seconds; see scale_test.go):
//
//   - when only Up/Down (or addresses, flags) changed, every PG keeps its
//     placement and only its acting set is filtered again;
//   - when OSDs left or joined a view (out, in, a weight changed, a host
//     added), a PG keeps its placement unless it holds an OSD of a domain
//     that changed, or a domain that is new or grew now scores at or above
//     the lowest score among the PG's domains: every other domain's straw2
//     score is the same, and one that shrank only scores lower. That is one
//     draw per PG and grown domain instead of one per domain;
//   - a pool whose rule changed, or more than a few grown domains at once,
//     start afresh.
//
// The result is exactly NewTable(m)'s; next_test.go checks it over random
// changes.
func (t *Table) Next(m *clustermap.Map) *Table {
	nt := NewTable(m)
	up := upByID(m)
	pools := map[clustermap.PoolID]*poolCache{}
	for id, pc := range *t.pools.Load() {
		pool, ok := m.Pool(id)
		if !ok || !pc.matches(pool) || pc.ec {
			continue // an erasure-coded pool's PGs are placed afresh when asked
		}
		nv := nt.view(pc.class, pc.level, false)
		keep := keepPlacement(pc.v, nv)
		if keep == nil {
			continue
		}
		pools[id] = nextPoolCache(id, pc, nv, keep, up)
	}
	nt.pools.Store(&pools)
	return nt
}

// upByID says, by OSD id, whether m marks the OSD up.
func upByID(m *clustermap.Map) []bool {
	var n clustermap.OSDID
	for i := range m.OSDs {
		n = max(n, m.OSDs[i].ID+1)
	}
	up := make([]bool, n)
	for i := range m.OSDs {
		up[m.OSDs[i].ID] = m.OSDs[i].Up
	}
	return up
}

// keepPlacement compares a view with its next one. It returns nil if
// placements must be computed afresh, else a func saying whether a PG
// keeps its placement: it holds no OSD of a domain that changed, and no
// domain that is new or grew scores at or above the PG's lowest chosen
// score (the others score as before, and one that shrank or left only
// scores lower).
func keepPlacement(old, nv *view) func(pg clustermap.PGID, e *entry) bool {
	if old == nil {
		return nil
	}
	before := make(map[uint64]*domain, len(old.domains))
	for i := range old.domains {
		before[old.domains[i].key] = &old.domains[i]
	}
	changed := map[clustermap.OSDID]bool{} // the members of domains that changed
	var grown []*domain                    // domains that may now enter a PG
	for i := range nv.domains {
		nd := &nv.domains[i]
		od := before[nd.key]
		delete(before, nd.key)
		switch {
		case od == nil:
			grown = append(grown, nd)
		case sameDomain(od, nd):
		default:
			for _, mb := range od.osds {
				changed[mb.id] = true
			}
			if !shrunk(od, nd) {
				grown = append(grown, nd)
			}
		}
	}
	for _, od := range before { // gone from the view
		for _, mb := range od.osds {
			changed[mb.id] = true
		}
	}
	if len(grown) > len(nv.domains)/4 {
		return nil // about as cheap to place afresh as to draw for each
	}
	return func(pg clustermap.PGID, e *entry) bool {
		for _, o := range e.place {
			if changed[o] {
				return false
			}
		}
		pgk := pgKey(pg)
		for _, d := range grown {
			if lnUnit(drawHash(pgk, d.key, selDomain))/d.w >= e.floor {
				return false
			}
		}
		return true
	}
}

func sameDomain(a, b *domain) bool {
	if a.w != b.w || len(a.osds) != len(b.osds) {
		return false
	}
	for i := range a.osds {
		if a.osds[i].id != b.osds[i].id || a.osds[i].w != b.osds[i].w {
			return false
		}
	}
	return true
}

// shrunk reports whether b is a with members removed and no weight raised,
// so the domain scores no higher than before.
func shrunk(a, b *domain) bool {
	if b.w > a.w {
		return false
	}
	i := 0
	for _, mb := range b.osds {
		for i < len(a.osds) && a.osds[i].id != mb.id {
			i++
		}
		if i == len(a.osds) || a.osds[i].w != mb.w {
			return false
		}
	}
	return true
}

// nextPoolCache carries the computed entries of pc whose placement holds
// into a cache over the next view: the same entry when no member's Up
// changed, else the acting set filtered again.
func nextPoolCache(id clustermap.PoolID, pc *poolCache, nv *view, keep func(clustermap.PGID, *entry) bool, up []bool) *poolCache {
	npc := &poolCache{size: pc.size, pgNum: pc.pgNum, class: pc.class, level: pc.level, v: nv,
		ents: make([]atomic.Pointer[entry], len(pc.ents))}
	for i := range pc.ents {
		e := pc.ents[i].Load()
		if e == nil || !keep(clustermap.PGID{Pool: id, Seed: uint32(i)}, e) {
			continue
		}
		if !sameUp(e, up) {
			acting := make([]clustermap.OSDID, 0, len(e.place))
			for _, o := range e.place {
				if isUp(up, o) {
					acting = append(acting, o)
				}
			}
			e = &entry{place: e.place, acting: acting, floor: e.floor}
		}
		npc.ents[i].Store(e)
	}
	return npc
}

func isUp(up []bool, o clustermap.OSDID) bool { return int(o) < len(up) && up[o] }

// sameUp reports whether e's acting set is its placement filtered by up.
func sameUp(e *entry, up []bool) bool {
	j := 0
	for _, o := range e.place {
		if isUp(up, o) {
			if j == len(e.acting) || e.acting[j] != o {
				return false
			}
			j++
		}
	}
	return j == len(e.acting)
}
