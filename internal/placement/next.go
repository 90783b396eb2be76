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
//   - when OSDs only left a view (out, weight lowered, a domain gone), a
//     PG keeps its placement unless it holds an OSD of a domain that
//     changed: every other domain's straw2 score is the same and the
//     changed ones only score lower, so none of them can enter it;
//   - anything else (an OSD in again, a weight raised, a pool's rule
//     changed) starts that view's PGs afresh.
//
// The result is exactly NewTable(m)'s; next_test.go checks it over random
// changes.
func (t *Table) Next(m *clustermap.Map) *Table {
	nt := NewTable(m)
	up := upByID(m)
	pools := map[clustermap.PoolID]*poolCache{}
	for id, pc := range *t.pools.Load() {
		pool, ok := m.Pool(id)
		if !ok || !pc.matches(pool) {
			continue
		}
		nv := nt.view(pc.class, pc.level)
		keep := keepPlacement(pc.v, nv)
		if keep == nil {
			continue
		}
		pools[id] = nextPoolCache(pc, nv, keep, up)
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
// placed on the given OSDs keeps its placement.
func keepPlacement(old, nv *view) func(place []clustermap.OSDID) bool {
	if old == nil {
		return nil
	}
	changed := map[clustermap.OSDID]bool{} // the members of domains that changed
	j := 0
	for i := range old.domains {
		od := &old.domains[i]
		if j < len(nv.domains) && nv.domains[j].key == od.key {
			nd := &nv.domains[j]
			j++
			if sameDomain(od, nd) {
				continue
			}
			if !shrunk(od, nd) {
				return nil
			}
		}
		for _, mb := range od.osds {
			changed[mb.id] = true
		}
	}
	if j != len(nv.domains) {
		return nil // a domain is new, or the order changed
	}
	return func(place []clustermap.OSDID) bool {
		for _, o := range place {
			if changed[o] {
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
func nextPoolCache(pc *poolCache, nv *view, keep func([]clustermap.OSDID) bool, up []bool) *poolCache {
	npc := &poolCache{size: pc.size, pgNum: pc.pgNum, class: pc.class, level: pc.level, v: nv,
		ents: make([]atomic.Pointer[entry], len(pc.ents))}
	for i := range pc.ents {
		e := pc.ents[i].Load()
		if e == nil || !keep(e.place) {
			continue
		}
		if !sameUp(e, up) {
			acting := make([]clustermap.OSDID, 0, len(e.place))
			for _, o := range e.place {
				if isUp(up, o) {
					acting = append(acting, o)
				}
			}
			e = &entry{place: e.place, acting: acting}
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
