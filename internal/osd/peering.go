package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

type pgPhase int

const (
	phaseIdle    pgPhase = iota // not primary here, or not peered yet
	phasePeering                // peering is running
	phaseActive                 // serving
	phaseDown                   // cannot go active: reason says why
)

func (p pgPhase) String() string {
	return [...]string{"idle", "peering", "active", "down"}[p]
}

// peerRetry is how often a PG that could not go active tries again.
const peerRetry = 2 * time.Second

// peeringLoop starts peering for every PG this OSD is primary of whose
// acting set changed, on every map and every peerRetry.
func (s *Server) peeringLoop(ctx context.Context) {
	t := time.NewTicker(peerRetry)
	defer t.Stop()
	for {
		ch := s.view.Changed()
		s.checkPGs(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-t.C:
		case <-s.kick:
		}
	}
}

func (s *Server) checkPGs(ctx context.Context) {
	t := s.view.Table()
	m := t.Map()
	for i := range m.Pools {
		pool := &m.Pools[i]
		for seed := uint32(0); seed < pool.PGNum; seed++ {
			id := clustermap.PGID{Pool: pool.ID, Seed: seed}
			acting := t.Acting(pool, id)
			primary := len(acting) > 0 && acting[0] == s.id
			s.pgMu.Lock()
			p := s.pgs[id]
			if p == nil && primary {
				p = &pgState{changed: make(chan struct{})}
				s.pgs[id] = p
			}
			s.pgMu.Unlock()
			if p == nil {
				continue
			}
			p.mu.Lock()
			switch {
			case !primary:
				if p.phase != phaseIdle {
					p.setPhase(phaseIdle)
					p.setPrim(pg.Primary{})
				}
			case p.peering:
			case p.phase == phaseIdle, !slices.Equal(p.prim.Acting, acting), p.phase == phaseDown,
				p.phase == phaseActive && p.upHash != upHash(m, acting):
				s.startPeering(ctx, id, p)
			}
			p.mu.Unlock()
		}
	}
	s.checkedEpoch.Store(uint64(m.Epoch))
	s.kickStats()
	// PGs of pools that are gone.
	s.pgMu.Lock()
	for id, p := range s.pgs {
		if _, ok := m.Pool(id.Pool); !ok {
			p.mu.Lock()
			p.setPhase(phaseIdle)
			p.setPrim(pg.Primary{})
			p.mu.Unlock()
		}
	}
	s.pgMu.Unlock()
}

// upHash sums when each member of acting last came up. An interval ends
// when a member goes down and comes up again, even if the acting set then
// looks as before and this OSD never saw the maps in between (it was
// frozen, or lost its lease while the others went on): a PG peered before
// must peer again, or it would serve what it had then.
func upHash(m *clustermap.Map, acting []clustermap.OSDID) uint64 {
	h := uint64(14695981039346656037) // FNV-1a
	for _, o := range acting {
		var t int64
		if osd, ok := m.OSD(o); ok {
			t = osd.UpSince.UnixNano()
		}
		h = (h ^ uint64(t)) * 1099511628211
	}
	return h
}

// startPeering starts a peering attempt; the caller holds p.mu and has
// checked that none runs.
func (s *Server) startPeering(ctx context.Context, id clustermap.PGID, p *pgState) {
	p.peering = true
	p.setPhase(phasePeering)
	go s.peer(ctx, id, p)
}

// setPrim replaces what the primary knows, keeping the count of missing
// objects equal to it: a count left over from an interval this OSD no
// longer leads would keep recovery busy with a PG it cannot recover. The
// caller holds p.mu.
func (p *pgState) setPrim(ps pg.Primary) {
	p.prim = ps
	p.nMissing.Store(int64(ps.MissingCount()))
	p.retryAt, p.backoff, p.lastErr = time.Time{}, 0, ""
}

// setPhase changes the phase and wakes waiters; the caller holds p.mu.
func (p *pgState) setPhase(ph pgPhase) {
	p.phase = ph
	close(p.changed)
	p.changed = make(chan struct{})
}

// peer runs one peering attempt and records its outcome in p.
func (s *Server) peer(ctx context.Context, id clustermap.PGID, p *pgState) {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ps, up, err := s.doPeer(pctx, id)
	defer s.kickStats()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peering = false
	// The acting set may have changed while peering ran: check again now
	// rather than at the next tick.
	defer s.kickPeering()
	if err != nil {
		if p.phase != phaseDown || p.prim.Reason != err.Error() {
			s.logf("%s: pg %s cannot go active: %v", s.id, id, err)
		}
		p.setPrim(pg.Primary{Acting: ps.Acting, Reason: err.Error()})
		p.setPhase(phaseDown)
		return
	}
	if ps.LastUpdate > p.version {
		p.version = ps.LastUpdate
	}
	p.setPrim(ps.Primary)
	s.peeringTrims(id, p, ps)
	p.upHash = up
	if pool, ok := s.view.Map().Pool(id.Pool); ok {
		p.poolSize = pool.Size
	}
	p.setPhase(phaseActive)
	if n := ps.MissingCount(); n > 0 {
		s.logf("%s: pg %s active at epoch %d, %d objects to recover (authoritative copy on %s)", s.id, id, ps.Epoch, n, ps.Auth)
		s.wakeRecovery()
	}
}

func (s *Server) doPeer(ctx context.Context, id clustermap.PGID) (pg.Peered, uint64, error) {
	t := s.view.Table()
	m := t.Map()
	var res pg.Peered
	pool, ok := m.Pool(id.Pool)
	if !ok {
		return res, 0, fmt.Errorf("pool %d is gone", id.Pool)
	}
	acting := t.Acting(pool, id)
	res.Acting, res.Epoch = acting, m.Epoch
	if len(acting) == 0 || acting[0] != s.id {
		return res, 0, errors.New("no longer primary")
	}
	up := upHash(m, acting)
	if pool.Erasure() {
		res, err := s.doPeerEC(ctx, t, pool, id, acting)
		return res, up, err
	}
	rec, rev, err := s.meta.PGRecord(ctx, id.String())
	if err != nil {
		return res, 0, err
	}
	if err := pg.Replaces(rec, m.Epoch); err != nil {
		return res, 0, err
	}
	probe := slices.Clone(acting)
	if rec != nil {
		for _, o := range rec.Complete {
			if osd, ok := m.OSD(o); ok && osd.Up && !slices.Contains(probe, o) {
				probe = append(probe, o)
			}
		}
	}
	lists := make(map[clustermap.OSDID]*pg.Listing, len(probe))
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(map[clustermap.OSDID]error)
	for _, o := range probe {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.listPG(ctx, t, o, id, 0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[o] = err
				return
			}
			lists[o] = l
		}()
	}
	wg.Wait()
	for _, o := range acting {
		if err := errs[o]; err != nil {
			return res, 0, fmt.Errorf("acting member %s did not answer: %v", o, err)
		}
	}
	res, err = pg.Decide(s.id, m.Epoch, acting, rec, lists)
	if err != nil {
		return res, 0, err
	}
	newRec := pg.Record{Epoch: m.Epoch, Acting: acting, Complete: res.Complete}
	if res.RecRev, err = s.meta.PutPGRecord(ctx, id.String(), newRec, rev); err != nil {
		return res, 0, err
	}
	return res, up, nil
}

// pgListPage bounds one OpPGList reply: objects, and bytes read when deep.
const (
	pgListPage      = 1000
	pgListDeepBytes = 64 << 20
)

// listPG returns the copy of a PG on osd (this one or a peer).
func (s *Server) listPG(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, flags uint32) (*pg.Listing, error) {
	l := &pg.Listing{Objs: map[string]pg.ObjState{}}
	var start []byte
	for {
		req := &proto.Request{Op: proto.OpPGList, Flags: flags, Epoch: t.Map().Epoch, PG: id, Start: start, Limit: pgListPage}
		var resp *proto.Response
		if osd == s.id {
			resp = s.pgList(req)
		} else {
			o, ok := t.Map().OSD(osd)
			if !ok {
				return nil, fmt.Errorf("%s is not in the map", osd)
			}
			var err error
			if resp, err = s.peers.Call(ctx, o.Addr, req); err != nil {
				if isRefused(err) {
					s.suspect(osd, o.Addr)
				}
				return nil, err
			}
		}
		if resp.Status != proto.StatusOK {
			return nil, fmt.Errorf("%s: %s", resp.Status, resp.Message)
		}
		l.LastUpdate = max(l.LastUpdate, resp.Version)
		for _, kv := range resp.KVs {
			st, err := pg.DecodeObjState(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("%s sent a bad object state for %q", osd, kv.Key)
			}
			l.Objs[string(kv.Key)] = st
		}
		if !resp.More || len(resp.Data) == 0 {
			return l, nil
		}
		start = resp.Data
	}
}

// pgList serves OpPGList: this OSD's copy of a PG, a page at a time. With
// req.Object set it describes that one object (KVs empty if absent).
func (s *Server) pgList(req *proto.Request) *proto.Response {
	coll := req.PG.String()
	if t := s.view.Table(); t.Map().Epoch == req.Epoch {
		var bad *proto.Response
		if coll, bad = s.collFor(t, req.PG); bad != nil {
			return bad
		}
	} else if pool, ok := t.Map().Pool(req.PG.Pool); ok && pool.Erasure() {
		return s.fail(proto.StatusWrongEpoch, "sender has map epoch %d, %s has %d", req.Epoch, s.id, t.Map().Epoch)
	}
	deep := req.Flags&proto.FlagDeep != 0
	level := stateVersion
	switch {
	case deep:
		level = stateDeep
	case req.Flags&proto.FlagDigest != 0:
		level = stateDigest
	}
	pg, err := s.pg(req.PG)
	if err != nil {
		return s.failErr(err)
	}
	// Wait for writes in flight; later ones from older epochs are refused
	// (this OSD's map is at least req.Epoch now).
	pg.fence.Lock()
	pg.fence.Unlock()
	r := s.ok()
	pg.mu.Lock()
	r.Version = pg.version
	pg.mu.Unlock()
	var names []string
	more := false
	if req.Object != "" {
		names = []string{req.Object}
	} else {
		names, more, err = s.store.List(coll, string(req.Start), limit(req.Limit, pgListPage))
		if err != nil {
			return s.failErr(err)
		}
	}
	var read int64
	for i, n := range names {
		if strings.HasPrefix(n, proto.ReservedPrefix) {
			continue
		}
		st, nread, err := s.objState(coll, n, level)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return s.failErr(err)
		}
		r.KVs = append(r.KVs, proto.KV{Key: []byte(n), Value: st.Encode()})
		if read += nread; deep && read >= pgListDeepBytes && i < len(names)-1 {
			names, more = names[:i+1], true
			break
		}
	}
	r.More = more
	if more && len(names) > 0 {
		r.Data = []byte(names[len(names)-1])
	}
	return r
}

// objState is localState, or for a shard of an erasure-coded PG listed
// for peering its shardState.
func (s *Server) objState(coll, name string, level stateLevel) (pg.ObjState, int64, error) {
	if _, _, ec := parseShardColl(coll); ec && level == stateVersion {
		st, err := s.shardState(coll, name)
		return st, 0, err
	}
	return s.localState(coll, name, level)
}

// activeWait bounds how long an operation waits for its PG to go active
// before it is answered StatusUnavailable (the client retries).
const activeWait = 5 * time.Second

// activePG returns the PG's state once it is active for acting.
func (s *Server) activePG(ctx context.Context, id clustermap.PGID, acting []clustermap.OSDID) (*pgState, *proto.Response) {
	p, err := s.pg(id)
	if err != nil {
		return nil, s.failErr(err)
	}
	timer := time.NewTimer(activeWait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		phase, ch, same, reason := p.phase, p.changed, slices.Equal(p.prim.Acting, acting), p.prim.Reason
		if phase == phaseActive && p.upHash != upHash(s.view.Map(), acting) {
			phase = phasePeering // a member went down and up since: about to peer again
		}
		p.mu.Unlock()
		if same && phase == phaseActive {
			return p, nil
		}
		if same && phase == phaseDown {
			return nil, s.fail(proto.StatusUnavailable, "pg %s is down: %s", id, reason)
		}
		s.kickPeering()
		select {
		case <-ch:
		case <-s.view.Changed():
			return nil, s.fail(proto.StatusUnavailable, "pg %s: the map changed while it was peering; retry", id)
		case <-timer.C:
			return nil, s.fail(proto.StatusUnavailable, "pg %s is %s", id, phase)
		case <-ctx.Done():
			return nil, s.fail(proto.StatusUnavailable, "pg %s: %v", id, ctx.Err())
		}
	}
}

func (s *Server) kickStats() {
	select {
	case s.statsKick <- struct{}{}:
	default:
	}
}

func (s *Server) kickPeering() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pgSummary counts this OSD's primary PGs by state, for status.
func (s *Server) pgSummary() (map[string]int, map[string]string) {
	states, down, _ := s.pgReport()
	return states, down
}

// pgReport counts this OSD's primary PGs by state, names those that
// cannot go active (with why) and counts the unfound objects of those
// that have any (erasure-coded PGs: active+unfound, never clean).
func (s *Server) pgReport() (map[string]int, map[string]string, map[string]int) {
	states := map[string]int{}
	down := map[string]string{}
	unfound := map[string]int{}
	t := s.view.Table()
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	for id, p := range s.pgs {
		p.mu.Lock()
		phase := p.phase
		if pool, ok := t.Map().Pool(id.Pool); ok && phase != phaseIdle && (!slices.Equal(p.prim.Acting, t.Acting(pool, id)) ||
			phase == phaseActive && p.upHash != upHash(t.Map(), p.prim.Acting)) {
			phase = phasePeering // peered for an older acting set: about to peer again
		}
		switch phase {
		case phaseActive:
			if n := len(p.prim.Unfound); n > 0 {
				states["active+unfound"]++
				unfound[id.String()] = n
			} else if p.prim.MissingCount() > 0 || !p.prim.RecordComplete() {
				states["active+recovering"]++
			} else if len(p.prim.Acting) < p.poolSize {
				states["active+undersized"]++
			} else {
				states["active+clean"]++
			}
		case phasePeering:
			states["peering"]++
		case phaseDown:
			states["down"]++
			down[id.String()] = p.prim.Reason
		}
		p.mu.Unlock()
	}
	return states, down, unfound
}

// sortedNames returns a set's names in order.
func sortedNames(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
