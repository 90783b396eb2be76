package pg

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// A deterministic simulation of a pool: several PGs on 5 to 9 OSDs, each
// OSD with its own map epoch (maps reach OSDs in different orders), driven
// through client writes whose messages reach members one at a time (or are
// lost, or arrive after their sender gave up), members that refuse a write,
// crashes that lose what an OSD kept in memory, restarts, OSDs marked down,
// up and out by the keeper, peering split in two (listing, then recording),
// recovery, and scrub finding rotten copies. It drives the code the OSD
// runs: Admit for every message, Replaces and Decide for peering, Primary's
// bookkeeping, AfterRecovery, and Choose.
//
// After every step it checks that
//   - every OSD the PG's record names complete holds every acknowledged
//     write (or the outcome of a later write that failed and so may have
//     landed);
//   - the primary of the newest map, once active, serves every
//     acknowledged write (recovering the object first where its copy is
//     stale, as ensureObject does);
//
// and at the end, with every OSD back and every map delivered, that each
// PG goes active and its copies converge. A failing seed replays exactly:
// go test ./internal/pg -run TestPoolSimulation -seed N prints its history.

type simCopy struct {
	ver    EVersion
	value  uint64
	rotten bool // its bytes no longer match their checksums
}

type simAck struct {
	ver     EVersion
	value   uint64
	deleted bool
	// later holds the writes to the object after this one that failed:
	// each may or may not have landed on some copies.
	later []simAck
}

// holdsAcked reports whether copies hold the acknowledged state of name,
// or the outcome of a later write that failed (and so may have landed).
func holdsAcked(objs map[string]simCopy, name string, a simAck) bool {
	c, ok := objs[name]
	for _, w := range append([]simAck{a}, a.later...) {
		if w.deleted && !ok || !w.deleted && ok && c.ver == w.ver && c.value == w.value {
			return true
		}
	}
	return false
}

// pgCopy is one OSD's copy of one PG.
type pgCopy struct {
	objs       map[string]simCopy // on disk
	deleted    uint64             // the newest delete's version, on disk (pglog.go)
	lastUpdate uint64             // in memory: lost in a crash
}

// leader is what an OSD keeps in memory about a PG it leads (pgState).
type leader struct {
	prim    *Primary // nil unless active
	version uint64   // the PG's newest version handed out
	upHash  string   // when the acting members came up, at peering
	peer    *peerAttempt
	busy    map[string]bool // objects with a write in flight (the object lock)
}

type simOSD struct {
	alive bool             // its process runs
	epoch clustermap.Epoch // the newest map it has
	pgs   []*pgCopy
	lead  map[int]*leader // lost in a crash
}

// simMap is one epoch of the cluster map, as far as placement goes.
type simMap struct {
	up, in  []bool
	upSince []clustermap.Epoch
}

// msg is one replicated write on its way to one member, sent with the
// sender's map epoch.
type msg struct {
	to    clustermap.OSDID
	epoch clustermap.Epoch
	lost  bool // the member was not there; the primary sends it again
}

type simWrite struct {
	pg       int
	prim     clustermap.OSDID
	interval clustermap.Epoch
	acting   []clustermap.OSDID
	name     string
	ack      simAck
	pending  []msg
}

type poolSim struct {
	t       *testing.T
	seed    uint64
	r       *rand.Rand
	trace   strings.Builder
	osds    []*simOSD
	maps    []simMap             // maps[e-1] is epoch e
	prefs   [][]clustermap.OSDID // each PG's placement preference
	size    int
	minSize int
	recs    []*Record // in etcd
	revs    []int64
	writes  []*simWrite
	orphans []*simWrite // writes that failed: their messages may still arrive
	acked   []map[string]simAck
	nextVal uint64
}

var objNames = []string{"a", "b", "c", "d", "e", "f"}

func newPoolSim(t *testing.T, seed uint64) *poolSim {
	s := &poolSim{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, seed^0x5eed)), size: 3, minSize: 2}
	nOSD, nPG := 5+s.r.IntN(5), 2+s.r.IntN(3)
	m := simMap{}
	for i := 0; i < nOSD; i++ {
		o := &simOSD{alive: true, epoch: 1, lead: map[int]*leader{}}
		for p := 0; p < nPG; p++ {
			o.pgs = append(o.pgs, &pgCopy{objs: map[string]simCopy{}})
		}
		s.osds = append(s.osds, o)
		m.up, m.in, m.upSince = append(m.up, true), append(m.in, true), append(m.upSince, 1)
	}
	s.maps = []simMap{m}
	for p := 0; p < nPG; p++ {
		pref := make([]clustermap.OSDID, nOSD)
		for i := range pref {
			pref[i] = clustermap.OSDID(i)
		}
		s.r.Shuffle(nOSD, func(i, j int) { pref[i], pref[j] = pref[j], pref[i] })
		s.prefs = append(s.prefs, pref)
		s.recs, s.revs = append(s.recs, nil), append(s.revs, 0)
		s.acked = append(s.acked, map[string]simAck{})
	}
	s.logf("%d OSDs, %d PGs, size %d, min_size %d", nOSD, nPG, s.size, s.minSize)
	return s
}

func (s *poolSim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d (replay: go test ./internal/pg -run TestPoolSimulation -seed %d): %s\nhistory:\n%s",
		s.seed, s.seed, fmt.Sprintf(format, args...), s.trace.String())
}

func (s *poolSim) logf(format string, args ...any) {
	fmt.Fprintf(&s.trace, format+"\n", args...)
}

func (s *poolSim) latest() clustermap.Epoch { return clustermap.Epoch(len(s.maps)) }

func (s *poolSim) mapAt(e clustermap.Epoch) *simMap { return &s.maps[e-1] }

// acting mirrors placement: the first size OSDs in the PG's preference
// order that are in, filtered to those up.
func (s *poolSim) acting(e clustermap.Epoch, pg int) []clustermap.OSDID {
	m := s.mapAt(e)
	var a []clustermap.OSDID
	placed := 0
	for _, o := range s.prefs[pg] {
		if m.in[o] && placed < s.size {
			placed++
			if m.up[o] {
				a = append(a, o)
			}
		}
	}
	return a
}

// upHash says when each acting member last came up (osd.upHash).
func (s *poolSim) upHash(e clustermap.Epoch, acting []clustermap.OSDID) string {
	return fmt.Sprint(acting, s.mapAt(e).upSince)
}

// check runs the invariants after a step.
func (s *poolSim) check(step int) {
	for pg := range s.prefs {
		if rec := s.recs[pg]; rec != nil {
			for _, o := range rec.Complete {
				for _, name := range objNames {
					if a, ok := s.expect(pg, name); ok && !holdsAcked(s.osds[o].pgs[pg].objs, name, a) {
						s.fatalf("step %d: pg %d: %s is recorded complete but lacks acknowledged %s %s (has %+v)", step, pg, o, name, a.ver, s.osds[o].pgs[pg].objs[name])
					}
				}
			}
		}
		s.checkServes(step, pg)
	}
}

// expect returns the acknowledged state of name, with the writes in
// flight as possible outcomes too; false if it was never acknowledged.
func (s *poolSim) expect(pg int, name string) (simAck, bool) {
	a, ok := s.acked[pg][name]
	if !ok {
		return a, false
	}
	a.later = slices.Clone(a.later)
	for _, w := range s.writes {
		if w.pg == pg && w.name == name {
			a.later = append(a.later, w.ack)
		}
	}
	return a, true
}

// checkServes: the primary of the newest map, active on it, serves every
// acknowledged write.
func (s *poolSim) checkServes(step, pg int) {
	e := s.latest()
	acting := s.acting(e, pg)
	if len(acting) == 0 {
		return
	}
	p := s.osds[acting[0]]
	l := p.lead[pg]
	if !p.alive || p.epoch != e || l == nil || l.prim == nil || !slices.Equal(l.prim.Acting, acting) {
		return
	}
	for _, name := range objNames {
		a, ok := s.expect(pg, name)
		if !ok {
			continue
		}
		view := p.pgs[pg].objs
		if l.prim.IsMissing(acting[0], name) {
			if !s.osds[l.prim.Auth].alive {
				continue // the read fails: it serves nothing
			}
			view = s.osds[l.prim.Auth].pgs[pg].objs
		}
		if !holdsAcked(view, name, a) {
			s.fatalf("step %d: pg %d: primary %s (epoch %d, interval %d) would serve %s without acknowledged %s", step, pg, acting[0], e, l.prim.Epoch, name, a.ver)
		}
	}
}

func (s *poolSim) run(steps int) string {
	for o := range s.osds {
		s.learn(clustermap.OSDID(o), 1)
	}
	for step := 0; step < steps; step++ {
		s.step()
		s.check(step)
	}
	s.settleAll()
	s.check(steps)
	s.checkConverged()
	return s.trace.String()
}

// step takes one random step.
func (s *poolSim) step() {
	switch k := s.r.IntN(100); {
	case k < 30:
		s.clientWrite()
	case k < 52:
		s.deliverWrite()
	case k < 64:
		s.deliverMap()
	case k < 70:
		s.finishPeering()
	case k < 80:
		s.recoverStep()
	case k < 82:
		s.rotAndScrub()
	case k < 86:
		s.crashOne()
	case k < 90:
		s.restartOne()
	case k < 96:
		s.keeper(true)
	default:
		s.tick()
	}
}

// checkConverged: each PG's acting copies are equal, the record names the
// acting set complete, and every acknowledged write is there.
func (s *poolSim) checkConverged() {
	for pg := range s.prefs {
		acting := s.acting(s.latest(), pg)
		ref := s.osds[acting[0]].pgs[pg].objs
		for _, o := range acting[1:] {
			if !copiesEqual(ref, s.osds[o].pgs[pg].objs) {
				s.fatalf("pg %d: copies differ after recovery: %s %v vs %s %v", pg, acting[0], ref, o, s.osds[o].pgs[pg].objs)
			}
		}
		if !SameSet(s.recs[pg].Complete, acting) {
			s.fatalf("pg %d: after recovery the record names %v complete, want the acting set %v", pg, s.recs[pg].Complete, acting)
		}
	}
}

func copiesEqual(a, b map[string]simCopy) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

var (
	simSeed  = flag.Uint64("seed", 0, "run only this seed of TestPoolSimulation and TestShardSimulation, printing its history")
	simSeeds = flag.Int("seeds", 2000, "how many seeds TestPoolSimulation runs (200 with -short)")
)

func TestPoolSimulation(t *testing.T) {
	const steps = 600
	if *simSeed != 0 {
		t.Log(newPoolSim(t, *simSeed).run(steps))
		return
	}
	seeds := *simSeeds
	if testing.Short() {
		seeds = 200
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		newPoolSim(t, seed).run(steps)
	}
	// One seed replays a run exactly.
	h := func(s string) uint64 { f := fnv.New64a(); f.Write([]byte(s)); return f.Sum64() }
	if a, b := newPoolSim(t, 42).run(steps), newPoolSim(t, 42).run(steps); h(a) != h(b) {
		t.Fatal("the same seed gave two different runs")
	}
}
