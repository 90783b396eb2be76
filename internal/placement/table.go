package placement

import (
	"sync"
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Table caches Place and Acting of one map for the hot path of clients and
// OSDs: after the first lookup of a PG, an IO costs one atomic load, one Go
// map lookup and one slice index. It is safe for concurrent use, and
// NewTable is cheap because everything is filled lazily. Returned slices are
// shared: callers must not modify them.
type Table struct {
	m *clustermap.Map

	mu    sync.Mutex
	views map[viewKey]*view // guarded by mu
	// pools is replaced copy-on-write under mu so readers never lock.
	pools atomic.Pointer[map[clustermap.PoolID]*poolCache]
}

type viewKey struct {
	class clustermap.DeviceClass
	level string
	shard bool // buildShardView's: OSDs that are out still weigh in
}

// poolCache holds the entries of one pool of the map, by PG seed.
type poolCache struct {
	size  int
	pgNum uint32
	class clustermap.DeviceClass
	level string
	ec    bool // erasure-coded: placed by position (Shards)
	v     *view
	ents  []atomic.Pointer[entry]
}

type entry struct {
	place, acting []clustermap.OSDID
	floor         float64 // the lowest score among place's domains (placeFloor)
	// Of an erasure-coded pool, by position (NoOSD in a hole); place and
	// acting are then these without the holes, in position order.
	posPlace, posActing []clustermap.OSDID
}

// NewTable returns an empty cache over m. m must not change afterwards: a
// new map epoch gets a new Table.
func NewTable(m *clustermap.Map) *Table {
	t := &Table{m: m, views: map[viewKey]*view{}}
	empty := map[clustermap.PoolID]*poolCache{}
	t.pools.Store(&empty)
	return t
}

// Map returns the map the table was built from.
func (t *Table) Map() *clustermap.Map { return t.m }

// Place is the cached form of the package function Place over t.Map().
func (t *Table) Place(pool *clustermap.Pool, pg clustermap.PGID) []clustermap.OSDID {
	return t.lookup(pool, pg).place
}

// Acting is the cached form of the package function Acting over t.Map().
func (t *Table) Acting(pool *clustermap.Pool, pg clustermap.PGID) []clustermap.OSDID {
	return t.lookup(pool, pg).acting
}

// Positions returns the OSD of every position of a PG of an
// erasure-coded pool, placed and acting, with NoOSD where a position has
// none: shard i of the PG's objects belongs on position i. Place and
// Acting give the same OSDs without the holes, so that what serves any
// pool (the primary is Acting's first) serves these too.
func (t *Table) Positions(pool *clustermap.Pool, pg clustermap.PGID) (place, acting []clustermap.OSDID) {
	e := t.lookup(pool, pg)
	return e.posPlace, e.posActing
}

// Locate maps an object of pool to its placement group and acting set.
func (t *Table) Locate(pool *clustermap.Pool, name string) (clustermap.PGID, []clustermap.OSDID) {
	pg := PGOf(pool, name)
	return pg, t.lookup(pool, pg).acting
}

func (pc *poolCache) matches(pool *clustermap.Pool) bool {
	return pc.size == pool.Size && pc.pgNum == pool.PGNum && pc.class == pool.Class &&
		pc.level == normLevel(pool.FailureDomain) && pc.ec == pool.Erasure()
}

// place computes a PG's entry in v, a view of the pool's kind.
func place(v *view, pool *clustermap.Pool, pg clustermap.PGID) *entry {
	if !pool.Erasure() {
		p, a, floor := v.placeFloor(pg, pool.Size)
		return &entry{place: p, acting: a, floor: floor}
	}
	pp, pa := v.shards(pg, pool.Size)
	return &entry{place: dense(pp), acting: dense(pa), posPlace: pp, posActing: pa}
}

// dense is a positional list without its holes.
func dense(pos []clustermap.OSDID) []clustermap.OSDID {
	out := make([]clustermap.OSDID, 0, len(pos))
	for _, o := range pos {
		if o != NoOSD {
			out = append(out, o)
		}
	}
	return out
}

func (t *Table) lookup(pool *clustermap.Pool, pg clustermap.PGID) *entry {
	pc := (*t.pools.Load())[pg.Pool]
	if pc == nil {
		pc = t.addPool(pool, pg.Pool)
	}
	if pc == nil || !pc.matches(pool) || pg.Seed >= uint32(len(pc.ents)) {
		// A pool that is not this map's (a stale copy, a foreign PG): still
		// correct, just not cached.
		return place(t.view(pool.Class, pool.FailureDomain, pool.Erasure()), pool, pg)
	}
	slot := &pc.ents[pg.Seed]
	if e := slot.Load(); e != nil {
		return e
	}
	e := place(pc.v, pool, pg)
	if slot.CompareAndSwap(nil, e) {
		return e
	}
	return slot.Load() // another goroutine won; keep one identity per PG
}

// addPool caches pool id if the caller's pool is the map's own version of it.
func (t *Table) addPool(pool *clustermap.Pool, id clustermap.PoolID) *poolCache {
	mp, ok := t.m.Pool(id)
	if !ok || pool.ID != id || mp.Size != pool.Size || mp.PGNum != pool.PGNum ||
		mp.Class != pool.Class || normLevel(mp.FailureDomain) != normLevel(pool.FailureDomain) ||
		mp.Erasure() != pool.Erasure() || mp.Erasure() && *mp.EC != *pool.EC {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.pools.Load()
	if pc := old[id]; pc != nil {
		return pc
	}
	pc := &poolCache{
		size:  mp.Size,
		pgNum: mp.PGNum,
		class: mp.Class,
		level: normLevel(mp.FailureDomain),
		ec:    mp.Erasure(),
		v:     t.viewLocked(mp.Class, mp.FailureDomain, mp.Erasure()),
		ents:  make([]atomic.Pointer[entry], mp.PGNum),
	}
	next := make(map[clustermap.PoolID]*poolCache, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[id] = pc
	t.pools.Store(&next)
	return pc
}

func (t *Table) view(class clustermap.DeviceClass, level string, shard bool) *view {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.viewLocked(class, level, shard)
}

func (t *Table) viewLocked(class clustermap.DeviceClass, level string, shard bool) *view {
	k := viewKey{class, normLevel(level), shard}
	v := t.views[k]
	if v == nil && shard {
		v = buildShardView(t.m, class, level)
		t.views[k] = v
	}
	if v == nil {
		v = buildView(t.m, class, level)
		t.views[k] = v
	}
	return v
}
