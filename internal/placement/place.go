package placement

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// member is an eligible OSD inside a failure domain.
type member struct {
	id clustermap.OSDID
	w  float64
	up bool
	in bool // false only in a shard view (buildShardView)
}

// domain is a failure domain holding at least one eligible OSD.
type domain struct {
	key  uint64  // frozen item key of the domain
	w    float64 // sum of member weights, summed in ID order
	osds []member
}

// view is the eligible part of a map for one (device class, failure domain
// level): what a draw looks at. It is immutable once built, so a Table
// shares it between goroutines.
type view struct {
	domains []domain
}

// normLevel maps a pool's failure domain to the level DomainOf uses: any
// unknown value means host, as in clustermap.
func normLevel(level string) string {
	switch level {
	case clustermap.DomainOSD, clustermap.DomainRack:
		return level
	}
	return clustermap.DomainHost
}

func eligible(o *clustermap.OSD, class clustermap.DeviceClass) bool {
	return o.In && weighs(o, class)
}

// weighs reports whether o takes part in draws of class at all, in or out.
func weighs(o *clustermap.OSD, class clustermap.DeviceClass) bool {
	// Weight > 0 is false for NaN; Inf would break the draw, so refuse it.
	return o.Weight > 0 && !math.IsInf(o.Weight, 1) && (class == "" || o.Class == class)
}

// buildView groups the eligible OSDs of m by failure domain. Domains and
// members are sorted (by name, by ID) so that the result does not depend on
// the order in which the map lists OSDs. It allocates a handful of slices,
// whatever the size of the map.
func buildView(m *clustermap.Map, class clustermap.DeviceClass, level string) *view {
	return buildViewOf(m, class, level, eligible)
}

// buildShardView is buildView with the OSDs that are out kept in (their
// member says so), so their weight still counts in every draw: marking an
// OSD out then changes no other position's race (shards.go).
func buildShardView(m *clustermap.Map, class clustermap.DeviceClass, level string) *view {
	return buildViewOf(m, class, level, weighs)
}

func buildViewOf(m *clustermap.Map, class clustermap.DeviceClass, level string, eligible func(*clustermap.OSD, clustermap.DeviceClass) bool) *view {
	level = normLevel(level)
	type ent struct {
		name string // failure domain; unused at level osd
		o    *clustermap.OSD
	}
	ents := make([]ent, 0, len(m.OSDs))
	for i := range m.OSDs {
		o := &m.OSDs[i]
		if !eligible(o, class) {
			continue
		}
		e := ent{o: o}
		if level != clustermap.DomainOSD || o.Flash != "" {
			e.name = m.DomainOf(o, level)
		}
		ents = append(ents, e)
	}
	slices.SortFunc(ents, func(a, b ent) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return cmp.Compare(a.o.ID, b.o.ID)
	})
	// At level osd an OSD is its own domain unless it shares a flash
	// device (a name) with others; a device behind one OSD keeps the OSD's
	// key, so naming it moves nothing.
	alone := func(i int) bool { return ents[i].name == "" }
	members := make([]member, len(ents))
	ndom := 0
	for i, e := range ents {
		members[i] = member{id: e.o.ID, w: e.o.Weight, up: e.o.Up, in: e.o.In}
		if alone(i) || i == 0 || e.name != ents[i-1].name {
			ndom++
		}
	}
	seed := uint64(seedHostName)
	switch level {
	case clustermap.DomainRack:
		seed = seedRackName
	case clustermap.DomainOSD:
		seed = seedFlashName
	}
	v := &view{domains: make([]domain, 0, ndom)}
	for i := 0; i < len(ents); {
		j := i + 1
		for !alone(i) && j < len(ents) && ents[j].name == ents[i].name {
			j++
		}
		d := domain{osds: members[i:j:j]}
		if level == clustermap.DomainOSD && j == i+1 {
			d.key = uint64(uint32(ents[i].o.ID))
		} else {
			d.key = xxh3.HashStringSeed(ents[i].name, seed)
		}
		for _, mb := range d.osds {
			d.w += mb.w
		}
		v.domains = append(v.domains, d)
		i = j
	}
	return v
}

// pick is one chosen replica: a domain index and a member index in it.
type pick struct {
	dom, osd int32
}

// choose fills out with up to len(out) picks for pg and returns how many;
// scores is scratch space of the same length.
//
// Every domain draws once with input (pg, domain) and scores ln(u)/weight;
// the replicas are the len(out) best scores, best first. That is an
// exponential race, so it has the distribution of drawing straw2 winners
// one replica at a time without replacement (redrawing on collision), but
// it needs one pass, never runs out of tries, and keeps straw2's promise
// for the whole set: a domain's weight change only moves that domain in or
// out of a PG, never swaps two other domains.
//
// The OSD inside a domain is drawn with input (pg, osd) alone, so a domain
// that shifts to another replica slot keeps the same OSD and its data.
func (v *view) choose(pg clustermap.PGID, out []pick, scores []float64) int {
	pgk := pgKey(pg)
	k := min(len(out), len(v.domains))
	n := 0
	for i := 0; i < len(v.domains) && k > 0; i++ {
		d := &v.domains[i]
		x := lnUnit(drawHash(pgk, d.key, selDomain)) / d.w
		if n == k && x <= scores[k-1] {
			continue // ties go to the earlier domain in sorted order
		}
		j := k - 1
		if n < k {
			j = n
			n++
		}
		for j > 0 && scores[j-1] < x {
			scores[j], out[j] = scores[j-1], out[j-1]
			j--
		}
		scores[j], out[j] = x, pick{dom: int32(i)}
	}
	for j := range out[:n] {
		out[j].osd = int32(v.domains[out[j].dom].pickOSD(pgk))
	}
	return n
}

// pickOSD is the straw2 draw among a domain's members.
func (d *domain) pickOSD(pgk uint64) int {
	if len(d.osds) == 1 {
		return 0
	}
	best, bestDraw := 0, 0.0
	for i := range d.osds {
		mb := &d.osds[i]
		x := lnUnit(drawHash(pgk, uint64(uint32(mb.id)), selOSD)) / mb.w
		if i == 0 || x > bestDraw {
			best, bestDraw = i, x
		}
	}
	return best
}

// maxPicks bounds the stack buffer of picks; larger pools use the heap.
const maxPicks = clustermap.MaxPoolSize

// place computes Place and Acting from a view into one allocation.
func (v *view) place(pg clustermap.PGID, size int) (place, acting []clustermap.OSDID) {
	place, acting, _ = v.placeFloor(pg, size)
	return place, acting
}

// placeFloor is place that also returns the lowest score among the
// chosen domains, or -Inf when fewer than size were chosen: a domain that
// does not score above it cannot enter the PG (Table.Next).
func (v *view) placeFloor(pg clustermap.PGID, size int) (place, acting []clustermap.OSDID, floor float64) {
	floor = math.Inf(-1)
	if size <= 0 {
		return nil, nil, floor
	}
	var buf [maxPicks]pick
	var sbuf [maxPicks]float64
	ps, scores := buf[:], sbuf[:]
	if size <= maxPicks {
		ps, scores = buf[:size], sbuf[:size]
	} else {
		ps, scores = make([]pick, size), make([]float64, size)
	}
	n := v.choose(pg, ps, scores)
	if n == size {
		floor = scores[n-1]
	}
	ids := make([]clustermap.OSDID, n, 2*n)
	for i, p := range ps[:n] {
		ids[i] = v.domains[p.dom].osds[p.osd].id
	}
	acting = ids[n:n]
	for _, p := range ps[:n] {
		if mb := &v.domains[p.dom].osds[p.osd]; mb.up {
			acting = append(acting, mb.id)
		}
	}
	return ids[:n:n], acting, floor
}

// Place returns the ordered OSDs that should hold pg: up to pool.Size OSDs,
// each in a distinct failure domain of level pool.FailureDomain, drawn only
// from OSDs that are In, have Weight > 0 and match pool.Class (empty: any).
// It returns fewer than Size when there are fewer domains. It ignores
// Up/Down so that a briefly down OSD does not move data. The draw uses pg
// (pool and seed) as its input; pool supplies the rule.
func Place(m *clustermap.Map, pool *clustermap.Pool, pg clustermap.PGID) []clustermap.OSDID {
	p, _ := buildView(m, pool.Class, pool.FailureDomain).place(pg, pool.Size)
	return p
}

// Acting is Place filtered to the OSDs that are Up, in order; Acting[0] is
// the primary.
func Acting(m *clustermap.Map, pool *clustermap.Pool, pg clustermap.PGID) []clustermap.OSDID {
	_, a := buildView(m, pool.Class, pool.FailureDomain).place(pg, pool.Size)
	return a
}
