package pg

import (
	"slices"
	"sort"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// The steps of the pool simulation, each what an OSD, the keeper or a
// client does in the real cluster, named after the code it mirrors.

// learn gives o the map at epoch e (its watch caught up) and lets it look
// at its PGs (checkPGs).
func (s *poolSim) learn(o clustermap.OSDID, e clustermap.Epoch) {
	if s.osds[o].epoch < e {
		s.osds[o].epoch = e
	}
	s.checkPGs(o)
}

// checkPGs starts peering where o leads a PG without being active for its
// current acting set, and forgets the PGs it no longer leads.
func (s *poolSim) checkPGs(o clustermap.OSDID) {
	for pg := range s.prefs {
		s.checkPG(o, pg)
	}
}

func (s *poolSim) checkPG(o clustermap.OSDID, pg int) {
	osd := s.osds[o]
	acting := s.acting(osd.epoch, pg)
	l := osd.lead[pg]
	if len(acting) == 0 || acting[0] != o {
		if l != nil {
			l.prim, l.peer = nil, nil
		}
		return
	}
	if l == nil {
		l = &leader{busy: map[string]bool{}}
		osd.lead[pg] = l
	}
	if l.peer == nil && (l.prim == nil || !slices.Equal(l.prim.Acting, acting) || l.upHash != s.upHash(osd.epoch, acting)) {
		s.startPeering(o, pg)
	}
}

// peerAttempt is a peering between listing the copies and recording the
// outcome: other things happen in between.
type peerAttempt struct {
	epoch  clustermap.Epoch
	acting []clustermap.OSDID
	rec    *Record
	rev    int64
	lists  map[clustermap.OSDID]*Listing
	shown  map[clustermap.OSDID]uint64 // the newest version each listed copy showed on disk
	upHash string
}

// startPeering reads the record and lists the copies (doPeer's first half):
// every probed OSD catches up with o's map or refuses.
func (s *poolSim) startPeering(o clustermap.OSDID, pg int) {
	osd := s.osds[o]
	l := osd.lead[pg]
	l.prim = nil
	e := osd.epoch
	acting := s.acting(e, pg)
	rec, rev := s.recs[pg], s.revs[pg]
	if err := Replaces(rec, e); err != nil {
		s.logf("%s e%d: pg %d down: %v", o, e, pg, err)
		return
	}
	probe := slices.Clone(acting)
	if rec != nil {
		for _, c := range rec.Complete {
			if s.mapAt(e).up[c] && !slices.Contains(probe, c) {
				probe = append(probe, c)
			}
		}
	}
	lists, shown := map[clustermap.OSDID]*Listing{}, map[clustermap.OSDID]uint64{}
	for _, t := range probe {
		if !s.reach(o, t) {
			if slices.Contains(acting, t) {
				s.logf("%s e%d: pg %d down: acting member %s did not answer", o, e, pg, t)
				return
			}
			continue
		}
		c := s.osds[t].pgs[pg]
		li := &Listing{Objs: map[string]ObjState{}, LastUpdate: c.lastUpdate}
		shown[t] = c.deleted
		for n, obj := range c.objs {
			li.Objs[n] = ObjState{Ver: obj.ver, Meta: obj.value}
			shown[t] = max(shown[t], obj.ver.Version)
		}
		lists[t] = li
	}
	if osd.lead[pg] != l || osd.epoch != e {
		return // o learned a newer map while listing: it peers again
	}
	l.peer = &peerAttempt{epoch: e, acting: acting, rec: rec, rev: rev, lists: lists, shown: shown, upHash: s.upHash(e, acting)}
}

// reach sends a message from o to t at o's epoch (checkEpoch): t catches
// up with a newer map; if t's map is newer, o learns it and the message
// fails, as it does if t is not running.
func (s *poolSim) reach(o, t clustermap.OSDID) bool {
	if o == t {
		return true
	}
	if !s.osds[t].alive {
		return false
	}
	switch Admit(s.osds[o].epoch, s.osds[t].epoch) {
	case WaitForIt:
		s.learn(t, s.osds[o].epoch)
	case Refuse:
		s.learn(o, s.osds[t].epoch)
		return false
	}
	return true
}

// finishPeering decides and records a peering attempt (doPeer's second
// half, then peer): the record's compare-and-swap fails if anyone wrote
// it since it was read.
func (s *poolSim) finishPeering() {
	type at struct {
		o  clustermap.OSDID
		pg int
	}
	var cands []at
	for o, osd := range s.osds {
		for pg := range s.prefs {
			if l := osd.lead[pg]; osd.alive && l != nil && l.peer != nil {
				cands = append(cands, at{clustermap.OSDID(o), pg})
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	c := cands[s.r.IntN(len(cands))]
	s.finishPeeringOf(c.o, c.pg)
}

func (s *poolSim) finishPeeringOf(o clustermap.OSDID, pg int) {
	l := s.osds[o].lead[pg]
	pa := l.peer
	l.peer = nil
	defer s.checkPG(o, pg) // kickPeering: the acting set may have changed meanwhile
	res, err := Decide(o, pa.epoch, pa.acting, pa.rec, pa.lists)
	if err != nil {
		s.logf("%s e%d: pg %d down: %v", o, pa.epoch, pg, err)
		return
	}
	s.checkContinues(o, pg, pa, res.LastUpdate)
	if s.revs[pg] != pa.rev {
		s.logf("%s e%d: pg %d: record changed while peering; again", o, pa.epoch, pg)
		return
	}
	s.recs[pg] = &Record{Epoch: pa.epoch, Acting: pa.acting, Complete: res.Complete}
	s.revs[pg]++
	ps := res.Primary
	ps.RecRev = s.revs[pg]
	l.prim, l.upHash = &ps, pa.upHash
	l.version = max(l.version, res.LastUpdate)
	s.logf("%s e%d: pg %d active acting=%v auth=%s complete=%v missing=%d", o, pa.epoch, pg, pa.acting, res.Auth, res.Complete, ps.MissingCount())
}

// checkContinues: the new primary numbers its writes above every version a
// copy it listed showed on disk, on an object or as its newest delete,
// whether or not that copy's OSD crashed since it reported a version.
func (s *poolSim) checkContinues(o clustermap.OSDID, pg int, pa *peerAttempt, from uint64) {
	for t, shown := range pa.shown {
		if from < shown {
			s.fatalf("%s e%d: pg %d: peering continues at version %d, below version %d that %s shows", o, pa.epoch, pg, from, shown, t)
		}
	}
}

// clientWrite sends a write or delete with the client's map (usually the
// newest) to the primary it names (osd.Serve, write, prepareObject).
func (s *poolSim) clientWrite() {
	pg, name, del := s.r.IntN(len(s.prefs)), objNames[s.r.IntN(len(objNames))], s.r.IntN(8) == 0
	ce := s.latest()
	if s.r.IntN(5) == 0 {
		ce = clustermap.Epoch(max(1, int(ce)-s.r.IntN(3)))
	}
	acting := s.acting(ce, pg)
	if len(acting) == 0 || !s.osds[acting[0]].alive {
		return
	}
	p, osd := acting[0], s.osds[acting[0]]
	switch Admit(ce, osd.epoch) {
	case Refuse:
		return // the client refreshes its map and sends again later
	case WaitForIt:
		s.learn(p, ce)
	}
	l := osd.lead[pg]
	if l == nil || l.prim == nil || !slices.Equal(l.prim.Acting, s.acting(osd.epoch, pg)) ||
		len(l.prim.Acting) < s.minSize || l.busy[name] {
		return
	}
	if !del && !s.ensure(p, pg, name) {
		return
	}
	if l.prim == nil {
		return // ensure learned a new interval
	}
	l.version++
	s.nextVal++
	w := &simWrite{pg: pg, prim: p, interval: l.prim.Epoch, acting: slices.Clone(l.prim.Acting), name: name,
		ack: simAck{ver: EVersion{uint64(l.prim.Epoch), l.version}, value: s.nextVal, deleted: del}}
	s.apply(p, w)
	for _, m := range l.prim.WriteSet {
		if m != p {
			w.pending = append(w.pending, msg{to: m, epoch: osd.epoch})
		}
	}
	l.busy[name] = true
	s.writes = append(s.writes, w)
	s.logf("%s e%d: pg %d write %s %s del=%v to %v", p, osd.epoch, pg, name, w.ack.ver, del, l.prim.WriteSet)
	if len(w.pending) == 0 {
		s.ackWrite(w)
	}
}

func (s *poolSim) apply(o clustermap.OSDID, w *simWrite) {
	c := s.osds[o].pgs[w.pg]
	if w.ack.deleted {
		delete(c.objs, w.name)
		c.deleted = max(c.deleted, w.ack.ver.Version)
	} else {
		c.objs[w.name] = simCopy{ver: w.ack.ver, value: w.ack.value}
	}
	c.lastUpdate = max(c.lastUpdate, w.ack.ver.Version)
}

// deliverWrite moves one replicated write message forward (replicate,
// replicaFailed, applyReplica).
func (s *poolSim) deliverWrite() {
	if len(s.orphans) > 0 && (len(s.writes) == 0 || s.r.IntN(4) == 0) {
		i := s.r.IntN(len(s.orphans))
		w := s.orphans[i]
		s.deliverOrphan(w, s.r.IntN(len(w.pending)))
		if len(w.pending) == 0 {
			s.orphans = slices.Delete(s.orphans, i, i+1)
		}
		return
	}
	if len(s.writes) == 0 {
		return
	}
	w := s.writes[s.r.IntN(len(s.writes))]
	s.deliverTo(w, s.r.IntN(len(w.pending)))
}

// sameInterval reports whether w's primary is still active in the
// interval w began in (replicaFailed): the same acting set is not enough,
// it may have changed and changed back, and a peering in between may have
// listed the members without w.
func (s *poolSim) sameInterval(w *simWrite) bool {
	p := s.osds[w.prim]
	l := p.lead[w.pg]
	return slices.Equal(s.acting(p.epoch, w.pg), w.acting) && l != nil && l.prim != nil && l.prim.Epoch == w.interval
}

func (s *poolSim) deliverTo(w *simWrite, i int) {
	if !s.sameInterval(w) {
		s.failWrite(w, "a new interval", false)
		return
	}
	p := s.osds[w.prim]
	m := &w.pending[i]
	t := s.osds[m.to]
	if m.lost {
		if !t.alive {
			if s.r.IntN(3) == 0 {
				s.failWrite(w, m.to.String()+" did not take it and was not marked down", true)
			}
			return
		}
		m.lost, m.epoch = false, p.epoch // sent again (retryBroken)
		return
	}
	if !t.alive {
		m.lost = true
		return
	}
	switch Admit(m.epoch, t.epoch) {
	case WaitForIt:
		s.learn(m.to, m.epoch)
	case Refuse:
		s.learn(w.prim, t.epoch)
		if !s.sameInterval(w) {
			s.failWrite(w, "a new interval", false)
			return
		}
		m.epoch = p.epoch // sent again with the newer map
		return
	}
	if s.r.IntN(40) == 0 {
		// The member refuses it (no space, an IO error): its copy is
		// stale now, and the write fails.
		if l := p.lead[w.pg]; l != nil && l.prim != nil && l.prim.Epoch == w.interval {
			l.prim.MarkMissing(m.to, w.name)
		}
		to := m.to
		w.pending = slices.Delete(w.pending, i, i+1)
		s.failWrite(w, to.String()+" refused it", true)
		return
	}
	s.apply(m.to, w)
	w.pending = slices.Delete(w.pending, i, i+1)
	if len(w.pending) == 0 {
		s.ackWrite(w)
	}
}

// deliverOrphan: a message of a write that failed reaches its member
// late, or never.
func (s *poolSim) deliverOrphan(w *simWrite, i int) {
	m := w.pending[i]
	w.pending = slices.Delete(w.pending, i, i+1)
	t := s.osds[m.to]
	if m.lost || !t.alive {
		return
	}
	switch Admit(m.epoch, t.epoch) {
	case Refuse:
		return
	case WaitForIt:
		s.learn(m.to, m.epoch)
	}
	s.apply(m.to, w)
	s.logf("%s e%d: pg %d late write %s %s applied", m.to, t.epoch, w.pg, w.name, w.ack.ver)
}

// failWrite ends a write unacknowledged: it may have landed on some copies.
// drain: the primary waited for the answers of the messages still out;
// else they are still on their way.
func (s *poolSim) failWrite(w *simWrite, why string, drain bool) {
	s.writes = slices.DeleteFunc(s.writes, func(x *simWrite) bool { return x == w })
	if l := s.osds[w.prim].lead[w.pg]; l != nil {
		l.busy[w.name] = false
	}
	a, had := s.acked[w.pg][w.name]
	if !had {
		a = simAck{deleted: true} // never written: absent
	}
	a.later = append(a.later, w.ack)
	s.acked[w.pg][w.name] = a
	s.logf("%s: pg %d write %s %s failed: %s", w.prim, w.pg, w.name, w.ack.ver, why)
	if drain {
		for len(w.pending) > 0 {
			s.deliverOrphan(w, 0)
		}
	}
	if len(w.pending) > 0 {
		s.orphans = append(s.orphans, w)
	}
}

func (s *poolSim) ackWrite(w *simWrite) {
	s.writes = slices.DeleteFunc(s.writes, func(x *simWrite) bool { return x == w })
	l := s.osds[w.prim].lead[w.pg]
	if l != nil {
		l.busy[w.name] = false
		if w.ack.deleted && l.prim != nil && l.prim.Epoch == w.interval {
			l.prim.ClearMissingAll(w.name)
		}
	}
	s.acked[w.pg][w.name] = w.ack
	s.logf("%s: pg %d ack %s %s del=%v", w.prim, w.pg, w.name, w.ack.ver, w.ack.deleted)
}

// ensure brings name up to date on o, the primary, and on every write set
// member (ensureObject); false if a member it needs did not take it.
func (s *poolSim) ensure(o clustermap.OSDID, pg int, name string) bool {
	ps := s.osds[o].lead[pg].prim
	if ps.IsMissing(o, name) {
		if !s.transfer(o, pg, ps.Auth, o, name) {
			return false
		}
		ps.ClearMissing(o, name)
	}
	for _, m := range ps.WriteSet {
		if m != o && ps.IsMissing(m, name) {
			if !s.transfer(o, pg, o, m, name) {
				return false
			}
			ps.ClearMissing(m, name)
		}
	}
	return s.osds[o].lead[pg].prim == ps
}

// transfer copies src's copy of name to dst on behalf of leader o
// (objectCopy): each OSD it talks to admits its map first.
func (s *poolSim) transfer(o clustermap.OSDID, pg int, src, dst clustermap.OSDID, name string) bool {
	if !s.reach(o, src) || !s.reach(o, dst) {
		return false
	}
	from, to := s.osds[src].pgs[pg], s.osds[dst].pgs[pg]
	if c, ok := from.objs[name]; ok {
		to.objs[name] = c
	} else {
		delete(to.objs, name)
	}
	return true
}

// recoverStep: a primary copies one missing object, then writes what
// recovery achieved into the record (recoverSome, noteRecovered).
func (s *poolSim) recoverStep() {
	o := clustermap.OSDID(s.r.IntN(len(s.osds)))
	pg := s.r.IntN(len(s.prefs))
	s.recoverOne(o, pg)
}

func (s *poolSim) recoverOne(o clustermap.OSDID, pg int) {
	osd := s.osds[o]
	l := osd.lead[pg]
	if !osd.alive || l == nil || l.prim == nil {
		return
	}
	var names []string
	for _, set := range l.prim.Missing {
		for n := range set {
			if !l.busy[n] && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) > 0 {
		sort.Strings(names)
		if !s.ensure(o, pg, names[s.r.IntN(len(names))]) || s.r.IntN(2) == 0 {
			return // the record follows at a later pass, maybe after a new map
		}
	}
	s.settle(o, pg)
}

// settle records members with nothing missing as complete (noteRecovered,
// putRecord): a record of a newer interval is left alone.
func (s *poolSim) settle(o clustermap.OSDID, pg int) {
	ps := s.osds[o].lead[pg].prim
	complete, writeSet, _, changed := ps.AfterRecovery()
	if !changed {
		return
	}
	rec := &Record{Epoch: ps.Epoch, Acting: ps.Acting, Complete: complete}
	if s.revs[pg] != ps.RecRev {
		cur := s.recs[pg]
		if err := Replaces(cur, rec.Epoch); err != nil {
			s.logf("%s: pg %d record not updated: %v", o, pg, err)
			return
		}
	}
	s.recs[pg] = rec
	s.revs[pg]++
	ps.RecRev = s.revs[pg]
	ps.Complete, ps.WriteSet = complete, writeSet
	s.logf("%s: pg %d recovered: complete=%v", o, pg, complete)
}

// crashOne stops a running OSD: what it kept in memory is gone, and the
// messages of its writes in flight may still arrive.
func (s *poolSim) crashOne() {
	o := clustermap.OSDID(s.r.IntN(len(s.osds)))
	osd := s.osds[o]
	if !osd.alive {
		return
	}
	osd.alive = false
	osd.lead = map[int]*leader{}
	for _, c := range osd.pgs {
		c.lastUpdate = c.deleted
	}
	for _, w := range slices.Clone(s.writes) {
		if w.prim == o {
			s.failWrite(w, "its primary crashed", false)
		}
	}
	s.logf("crash %s", o)
}

// restartOne starts a stopped OSD. It marks itself up with a new up-since
// time (markUp) even if the keeper had not marked it down yet: a new map,
// so each PG it serves begins a new interval, and members that learn it
// refuse the messages its previous life may still have on their way.
func (s *poolSim) restartOne() {
	o := clustermap.OSDID(s.r.IntN(len(s.osds)))
	osd := s.osds[o]
	if osd.alive {
		return
	}
	osd.alive = true
	osd.lead = map[int]*leader{}
	s.markUp(o)
	s.logf("restart %s", o)
	s.learn(o, s.latest())
}

func (s *poolSim) markUp(o clustermap.OSDID) {
	cur := s.mapAt(s.latest())
	next := simMap{up: slices.Clone(cur.up), in: slices.Clone(cur.in), upSince: slices.Clone(cur.upSince)}
	e := s.latest() + 1
	next.up[o], next.in[o], next.upSince[o] = true, true, e
	s.maps = append(s.maps, next)
	s.logf("map e%d: %s up", e, o)
}

// keeper publishes a new map: OSDs whose process stopped are marked down,
// those running marked up (and in again if they were out), and, now and
// then, one down OSD out, or one running OSD down because its lease lapsed.
func (s *poolSim) keeper(lapses bool) {
	next := simMap{up: slices.Clone(s.mapAt(s.latest()).up), in: slices.Clone(s.mapAt(s.latest()).in), upSince: slices.Clone(s.mapAt(s.latest()).upSince)}
	e := s.latest() + 1
	changed := false
	lapsed := -1
	if lapses && s.r.IntN(6) == 0 {
		// A running OSD whose lease lapsed (frozen, or cut off from
		// etcd): marked down while it still holds its state.
		lapsed = s.r.IntN(len(s.osds))
	}
	for o, osd := range s.osds {
		if o == lapsed && next.up[o] && osd.alive {
			next.up[o], changed = false, true
			continue
		}
		switch {
		case next.up[o] && !osd.alive:
			next.up[o], changed = false, true
		case !next.up[o] && osd.alive:
			next.up[o], next.in[o], next.upSince[o], changed = true, true, e, true
		case !next.up[o] && next.in[o] && lapses && s.r.IntN(3) == 0:
			next.in[o], changed = false, true
		}
	}
	if !changed {
		return
	}
	s.maps = append(s.maps, next)
	s.logf("map e%d: up=%v in=%v", e, next.up, next.in)
}

// deliverMap: one OSD's watch catches up, to the newest map or one before.
func (s *poolSim) deliverMap() {
	o := clustermap.OSDID(s.r.IntN(len(s.osds)))
	osd := s.osds[o]
	if !osd.alive || osd.epoch == s.latest() {
		return
	}
	s.learn(o, osd.epoch+1+clustermap.Epoch(s.r.IntN(int(s.latest()-osd.epoch))))
}

// tick: an OSD's peering loop looks at its PGs again (a PG that could not
// go active tries again).
func (s *poolSim) tick() {
	o := clustermap.OSDID(s.r.IntN(len(s.osds)))
	if s.osds[o].alive {
		s.checkPGs(o)
	}
}

// rotAndScrub lets some copies of one object rot (never all), then the
// primary of the newest map scrubs it (scrubObject): Choose picks the copy
// to repair from, and the others are rewritten from it.
func (s *poolSim) rotAndScrub() {
	s.scrubObject(s.r.IntN(len(s.prefs)), objNames[s.r.IntN(len(objNames))])
}

func (s *poolSim) scrubObject(pg int, name string) {
	acting := s.acting(s.latest(), pg)
	if len(acting) == 0 {
		return
	}
	p := acting[0]
	l := s.osds[p].lead[pg]
	if !s.osds[p].alive || l == nil || l.prim == nil || l.prim.MissingCount() > 0 || l.busy[name] || !slices.Equal(l.prim.Acting, acting) {
		return
	}
	for _, o := range acting {
		if !s.reach(p, o) {
			return
		}
	}
	if l.prim == nil {
		return
	}
	for _, o := range acting[:s.r.IntN(len(acting))] {
		if c, ok := s.osds[o].pgs[pg].objs[name]; ok {
			c.rotten = true
			s.osds[o].pgs[pg].objs[name] = c
			s.logf("rot pg %d %s on %s", pg, name, o)
		}
	}
	copies := make([]Copy, len(acting))
	for i, o := range acting {
		c, ok := s.osds[o].pgs[pg].objs[name]
		copies[i] = Copy{Present: ok, State: ObjState{Ver: c.ver, Meta: c.value, Data: c.value, Deep: true, Corrupt: c.rotten}}
	}
	good, same, ok := Choose(copies)
	if same || !ok {
		return
	}
	src := acting[good[0]]
	if c, has := s.osds[src].pgs[pg].objs[name]; has && c.rotten {
		s.fatalf("pg %d: scrub chose %s's rotten copy of %s to repair from", pg, src, name)
	}
	for i, o := range acting {
		if !slices.Contains(good, i) {
			s.transfer(p, pg, src, o, name)
		}
	}
	s.logf("%s: pg %d scrub repaired %s from %s", p, pg, name, src)
	if a, acked := s.acked[pg][name]; acked {
		for _, o := range acting {
			if c := s.osds[o].pgs[pg].objs[name]; c.rotten || !holdsAcked(s.osds[o].pgs[pg].objs, name, a) {
				s.fatalf("pg %d: after scrub %s's copy of %s is %+v, not acknowledged %s", pg, o, name, c, a.ver)
			}
		}
	}
}

// settleAll brings every OSD back and lets the cluster settle: every
// message arrives, every map reaches every OSD, and each PG peers and
// recovers; then scrub runs over every object.
func (s *poolSim) settleAll() {
	s.logf("-- every OSD back")
	for o, osd := range s.osds {
		if !osd.alive {
			osd.alive, osd.lead = true, map[int]*leader{}
			s.markUp(clustermap.OSDID(o))
			s.learn(clustermap.OSDID(o), s.latest())
		}
	}
	for round := 0; ; round++ {
		if round > 100 {
			s.fatalf("the pool does not settle")
		}
		s.keeper(false)
		for len(s.orphans) > 0 {
			w := s.orphans[0]
			for len(w.pending) > 0 {
				s.deliverOrphan(w, 0)
			}
			s.orphans = s.orphans[1:]
		}
		for len(s.writes) > 0 {
			s.deliverTo(s.writes[0], 0)
		}
		for o := range s.osds {
			s.learn(clustermap.OSDID(o), s.latest())
			for pg := range s.prefs {
				if l := s.osds[o].lead[pg]; l != nil && l.peer != nil {
					s.finishPeeringOf(clustermap.OSDID(o), pg)
				}
				s.recoverOne(clustermap.OSDID(o), pg)
			}
		}
		if s.settled() {
			break
		}
	}
	for pg := range s.prefs {
		for _, n := range objNames {
			s.scrubObject(pg, n)
		}
	}
}

// settled reports whether every PG's primary is active on the newest map
// with nothing missing and a record that names the acting set complete.
func (s *poolSim) settled() bool {
	for pg := range s.prefs {
		acting := s.acting(s.latest(), pg)
		l := s.osds[acting[0]].lead[pg]
		if l == nil || l.prim == nil || !slices.Equal(l.prim.Acting, acting) || l.prim.MissingCount() > 0 || !l.prim.RecordComplete() || len(s.writes) > 0 {
			return false
		}
	}
	return true
}
