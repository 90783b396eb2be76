package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Recovery copies the objects peering found missing from the members of a
// PG, in the background, a bounded number at a time, so client operations
// keep priority. An operation on a missing object recovers that object
// first (ensureObject).

// copyChunk is how much of an object one recovery message carries.
const copyChunk = 4 << 20

// recoveryStats counts recovery work for status.
type recoveryStats struct {
	objects atomic.Int64
	bytes   atomic.Int64
	started atomic.Int64 // unix nanos of the current burst; 0 when idle
	// progress is when recovery last got anything done (an object copied
	// or a record settled), in unix nanos; with lastErr it lets status say
	// that recovery is stuck, and why.
	progress atomic.Int64
	errMu    sync.Mutex
	lastErr  string
}

// Recovery of a PG that failed is tried again after recoveryRetryMin,
// twice as long after each further failure, up to recoveryRetryMax; a new
// interval (peering) starts it afresh.
const (
	recoveryRetryMin = 250 * time.Millisecond
	recoveryRetryMax = 10 * time.Second
	recoveryIdle     = time.Second // how often an idle loop looks for work
)

// clientIdle is how long after the last client operation recovery runs at
// full speed again.
const clientIdle = 200 * time.Millisecond

// clientBusy reports whether clients used this OSD in the last clientIdle.
func (s *Server) clientBusy() bool {
	return time.Since(time.Unix(0, s.lastClientOp.Load())) < clientIdle
}

func (s *Server) wakeRecovery() {
	select {
	case s.recoveryWake <- struct{}{}:
	default:
	}
}

// recoveryLoop drains the missing sets of this OSD's active primary PGs and
// keeps their records true, retrying what fails.
func (s *Server) recoveryLoop(ctx context.Context) {
	for ctx.Err() == nil {
		did, pending, wait := s.recoverSome(ctx)
		if did {
			continue
		}
		if !pending {
			s.recovery.started.Store(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.recoveryWake:
		case <-time.After(wait):
		}
	}
}

// recoverSome settles the records of PGs whose missing sets emptied, then
// recovers up to one batch of objects of one PG. It says whether it did
// anything, whether work is left that waits after a failure, and how long
// to wait before looking again.
func (s *Server) recoverSome(ctx context.Context) (did, pending bool, wait time.Duration) {
	now := time.Now()
	unsettled, wait := s.settleRecords(ctx, now)
	id, p, waiting, next := s.nextToRecover(now)
	if p == nil {
		return false, unsettled || waiting, min(wait, next)
	}
	if s.recovery.started.Load() == 0 {
		s.recovery.objects.Store(0)
		s.recovery.bytes.Store(0)
		s.recovery.started.Store(now.UnixNano())
	}
	p.mu.Lock()
	names := p.prim.SomeMissing(64)
	epoch := p.prim.Epoch
	p.mu.Unlock()
	err := s.recoverObjects(ctx, id, p, names)
	if err == nil {
		err = s.noteRecovered(ctx, id, p, epoch)
	}
	s.recoveryOutcome(id, p, epoch, err)
	return true, true, 0
}

// settleRecords writes the record of every active PG whose members all
// hold everything now but whose record does not say so yet (client writes
// and deletes empty missing sets too). It says whether one is left
// unsettled, and how long until the next one in backoff may be tried.
func (s *Server) settleRecords(ctx context.Context, now time.Time) (unsettled bool, wait time.Duration) {
	wait = recoveryIdle
	for _, pe := range s.primaryPGs() {
		id, p := pe.id, pe.p
		if !p.needsRecord() {
			continue
		}
		p.mu.Lock()
		epoch, at := p.prim.Epoch, p.retryAt
		p.mu.Unlock()
		if at.After(now) {
			unsettled, wait = true, min(wait, at.Sub(now))
			continue
		}
		err := s.noteRecovered(ctx, id, p, epoch)
		s.recoveryOutcome(id, p, epoch, err)
		unsettled = unsettled || err != nil
	}
	return unsettled, wait
}

type pgEntry struct {
	id clustermap.PGID
	p  *pgState
}

// primaryPGs returns the PGs this OSD holds state for.
func (s *Server) primaryPGs() []pgEntry {
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	out := make([]pgEntry, 0, len(s.pgs))
	for id, p := range s.pgs {
		out = append(out, pgEntry{id, p})
	}
	return out
}

// nextToRecover picks an active PG with objects to recover that is not
// waiting after a failure; with none, it says whether one waits, and how
// long until one may be tried again.
func (s *Server) nextToRecover(now time.Time) (id clustermap.PGID, p *pgState, waiting bool, wait time.Duration) {
	wait = recoveryIdle
	for _, pe := range s.primaryPGs() {
		if pe.p.nMissing.Load() == 0 {
			continue
		}
		pe.p.mu.Lock()
		active, at := pe.p.phase == phaseActive, pe.p.retryAt
		pe.p.mu.Unlock()
		switch {
		case !active:
		case at.After(now):
			waiting, wait = true, min(wait, at.Sub(now))
		default:
			return pe.id, pe.p, true, 0
		}
	}
	return clustermap.PGID{}, nil, waiting, wait
}

// recoverObjects brings names up to date on every member that lacks them,
// a few at a time, and returns the first error.
func (s *Server) recoverObjects(ctx context.Context, id clustermap.PGID, p *pgState, names []string) error {
	sem := make(chan struct{}, s.opts.RecoveryParallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, n := range names {
		busy := s.clientBusy()
		if busy {
			// Clients first: one object at a time, and idle twice as long
			// as each copy took, so recovery takes at most a third of one
			// stream.
			wg.Wait()
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			l := s.lock(id, n)
			l.Lock()
			err := s.ensureObject(ctx, id, p, n, ensureRecovery)
			l.Unlock()
			if err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("recovering %q: %w", n, err)
				}
				mu.Unlock()
			} else {
				s.recovery.progress.Store(time.Now().UnixNano())
			}
			if busy {
				time.Sleep(2 * time.Since(start))
			}
		}()
	}
	wg.Wait()
	return first
}

// recoveryOutcome schedules the PG's next attempt: at once after success,
// later and later after failures, each logged once per kind of error.
func (s *Server) recoveryOutcome(id clustermap.PGID, p *pgState, epoch clustermap.Epoch, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prim.Epoch != epoch {
		return // peered again since: a fresh start
	}
	if err == nil {
		p.retryAt, p.backoff, p.lastErr = time.Time{}, 0, ""
		return
	}
	p.backoff = min(max(2*p.backoff, recoveryRetryMin), recoveryRetryMax)
	p.retryAt = time.Now().Add(p.backoff)
	msg := fmt.Sprintf("pg %s: %v", id, err)
	s.recovery.errMu.Lock()
	s.recovery.lastErr = msg
	s.recovery.errMu.Unlock()
	if p.lastErr != msg {
		p.lastErr = msg
		s.logf("%s: %s; trying again in %v, and later and later (up to %v) while it fails so", s.id, msg, p.backoff, recoveryRetryMax)
	}
}

// ensureScope says which copies ensureObject brings up to date.
type ensureScope int

const (
	ensureSelf     ensureScope = iota // this OSD's copy only: it is about to read it
	ensureAll                         // every member of the write set: a client write follows
	ensureRecovery                    // every member with room: background recovery, which never fills a disk
)

// ensureObject brings name up to date on this OSD (from the authoritative
// copy) and, as scope says, on the members of the write set that lack it.
// Recovery leaves out members that are backfill-full and then returns
// errTooFull. The caller holds the object's lock for writing.
func (s *Server) ensureObject(ctx context.Context, id clustermap.PGID, p *pgState, name string, scope ensureScope) error {
	if p.nMissing.Load() == 0 {
		return nil
	}
	if pool, ok := s.view.Map().Pool(id.Pool); ok && pool.Erasure() {
		return s.ensureShards(ctx, pool, id, p, name, scope)
	}
	p.mu.Lock()
	auth, epoch := p.prim.Auth, p.prim.Epoch
	_, selfMissing := p.prim.Missing[s.id][name]
	var targets []clustermap.OSDID
	if scope != ensureSelf {
		for _, o := range p.prim.WriteSet {
			if _, ok := p.prim.Missing[o][name]; ok && o != s.id {
				targets = append(targets, o)
			}
		}
	}
	p.mu.Unlock()
	var tooFull error
	if selfMissing && scope == ensureRecovery && s.backfillFull(s.id) {
		selfMissing, tooFull = false, errTooFull{s.id}
	}
	if selfMissing {
		if err := s.copyObject(ctx, id, name, auth, s.id, scope == ensureRecovery); err != nil {
			return fmt.Errorf("from %s: %w", auth, err)
		}
		p.clearMissing(s.id, name, epoch)
	}
	for _, o := range targets {
		if scope == ensureRecovery && s.backfillFull(o) {
			tooFull = errTooFull{o}
			continue
		}
		if err := s.copyObject(ctx, id, name, s.id, o, scope == ensureRecovery); err != nil {
			return fmt.Errorf("to %s: %w", o, err)
		}
		p.clearMissing(o, name, epoch)
	}
	return tooFull
}

// clearMissing notes that osd now has name, if the PG is still in the
// interval the copy was made for.
func (p *pgState) clearMissing(osd clustermap.OSDID, name string, epoch clustermap.Epoch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prim.Epoch == epoch && p.prim.ClearMissing(osd, name) {
		p.nMissing.Add(-1)
	}
}

// noteRecovered records members that have nothing missing any more as
// complete in the PG's record; once every acting member is, the
// authoritative copy outside the acting set stops receiving writes.
func (s *Server) noteRecovered(ctx context.Context, id clustermap.PGID, p *pgState, epoch clustermap.Epoch) error {
	p.mu.Lock()
	if p.prim.Epoch != epoch || p.phase != phaseActive {
		p.mu.Unlock()
		return nil
	}
	complete, writeSet, allActing, changed := p.prim.AfterRecovery()
	rec := pg.Record{Epoch: epoch, Acting: p.prim.Acting, Complete: complete, Positions: p.prim.Positions, Sources: p.prim.Sources}
	rev := p.prim.RecRev
	p.mu.Unlock()
	if !changed {
		return nil
	}
	newRev, err := s.putRecord(ctx, id, rec, rev)
	if err != nil {
		return fmt.Errorf("recording recovery: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prim.Epoch == epoch {
		p.prim.Complete, p.prim.WriteSet, p.prim.RecRev = complete, writeSet, newRev
		if allActing {
			p.prim.Auth = s.id
			s.sendPendingTrims(id, p)
		}
	}
	s.recovery.progress.Store(time.Now().UnixNano())
	s.kickStats()
	if allActing {
		s.logf("%s: pg %s recovered: every acting member holds every object", s.id, id)
	}
	return nil
}

// putRecord writes the record of a PG this OSD leads, at revision rev. If
// the record changed since, it is written over only when it was written for
// an interval no newer than this one (by an earlier primary, which cannot
// have acknowledged writes since): the primary of the current interval
// knows best which copies are complete. A newer interval's record means
// this OSD's map is behind; it steps down once its map catches up.
func (s *Server) putRecord(ctx context.Context, id clustermap.PGID, rec pg.Record, rev int64) (int64, error) {
	newRev, err := s.meta.PutPGRecord(ctx, id.String(), rec, rev)
	if !errors.Is(err, meta.ErrPGRecordRaced) {
		return newRev, err
	}
	cur, curRev, rerr := s.meta.PGRecord(ctx, id.String())
	if rerr != nil {
		return 0, rerr
	}
	if cur == nil {
		// Peering wrote it, so only a removed pool takes it away: do not
		// bring it back.
		return 0, fmt.Errorf("its record was removed (its pool too?)")
	}
	if err := pg.Replaces(cur, rec.Epoch); err != nil {
		return 0, err
	}
	return s.meta.PutPGRecord(ctx, id.String(), rec, curRev)
}

// activeFor reports whether the PG is active for acting, with no peering
// begun since.
func (p *pgState) activeFor(acting []clustermap.OSDID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase == phaseActive && slices.Equal(p.prim.Acting, acting)
}

// activeIn reports whether the PG is active in the interval that began at
// epoch, with no peering since.
func (p *pgState) activeIn(epoch clustermap.Epoch) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase == phaseActive && p.prim.Epoch == epoch
}

// needsRecord reports whether an active PG with nothing missing still has a
// record that does not name every acting member complete.
func (p *pgState) needsRecord() bool {
	if p.nMissing.Load() != 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase == phaseActive && !p.prim.RecordComplete()
}

// settled reports whether the PG is active at positions with every acting
// member complete and nothing missing or unfound: its positions then hold
// every acknowledged write, so a client may serve a read from their own
// answers (proto.FlagSettled).
func (p *pgState) settled(positions []clustermap.OSDID) bool {
	if p.nMissing.Load() != 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase == phaseActive && slices.Equal(p.prim.Positions, positions) && len(p.prim.Unfound) == 0 && p.prim.RecordComplete()
}

// isUnfound reports whether peering found no version of name on K
// positions of an erasure-coded PG.
func (p *pgState) isUnfound(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.prim.Unfound[name]
	return ok
}

// isMissing reports whether osd's copy of name is stale.
func (p *pgState) isMissing(osd clustermap.OSDID, name string) bool {
	if p.nMissing.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prim.IsMissing(osd, name)
}

// clearMissingAll notes that every member agrees on name (it was deleted
// everywhere).
func (p *pgState) clearMissingAll(name string, epoch clustermap.Epoch) {
	if p.nMissing.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prim.Epoch == epoch {
		p.nMissing.Add(-int64(p.prim.ClearMissingAll(name)))
	}
}

// markMissing notes that osd's copy of name is stale (a write failed on it).
func (p *pgState) markMissing(osd clustermap.OSDID, name string, epoch clustermap.Epoch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known.forget(name)
	if p.prim.Epoch == epoch && p.prim.MarkMissing(osd, name) {
		p.nMissing.Add(1)
	}
}

// selfMissing reports whether this OSD's copy of the PG lacks objects.
func (p *pgState) selfMissing(self clustermap.OSDID) bool {
	if p.nMissing.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.prim.Missing[self]) > 0
}

// selfWhole reports whether this OSD's copy of the PG (its position, for
// an erasure-coded PG) holds every object: complete, and missing none.
func (p *pgState) selfWhole(self clustermap.OSDID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.prim.Complete, self) && len(p.prim.Missing[self]) == 0
}

// listFrom answers OpList from the authoritative copy while this one recovers.
func (s *Server) listFrom(ctx context.Context, p *pgState, req *proto.Request) *proto.Response {
	p.mu.Lock()
	auth := p.prim.Auth
	p.mu.Unlock()
	m := s.view.Map()
	o, ok := m.OSD(auth)
	if !ok {
		return s.fail(proto.StatusUnavailable, "pg %s: authoritative copy %s left the map", req.PG, auth)
	}
	fwd := *req
	fwd.Epoch, fwd.Flags = m.Epoch, req.Flags|proto.FlagLocal
	resp, err := s.peers.Call(ctx, o.Addr, &fwd)
	if err != nil {
		return s.fail(proto.StatusUnavailable, "pg %s: listing from %s: %v", req.PG, auth, err)
	}
	return resp
}
