package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Repair on read of erasure-coded objects. A read that met a shard
// failing its checksums answers the client from the others (ecRead) and
// queues the shard's rewrite; the client's reply never waits for it. A
// few repairers (readRepairsAtOnce) take the queue in order: under the
// object's lock, each checks again the shards the read named (deep: every
// byte, each block's checksum verified) and the others (their version and
// keys), and rebuilds what pg.BadShards picks from K good shards, as
// scrub does (rebuildBadShards: marked missing, then rebuilt by the
// recovery path). A shard a write has replaced since is found sound and
// left. Each shard the read named is then reported as a replicated pool
// reports a copy repaired on read: a "corruption" event of the OSD that
// holds it, "repaired from" the others (OBJECT_REPAIRED), or "served
// from" them with why it was not (still a warning: the client got good
// bytes, and scrub rebuilds it). The queue is bounded: a read that finds
// it full leaves the shard for scrub and says so; a read of an object
// already queued adds its positions to that repair, and one of an object
// being repaired adds nothing (the next read or scrub sees to it).

// Bounds of the repairs on read.
const (
	readRepairsAtOnce = 2           // repairs running at once
	readRepairsQueued = 64          // repairs waiting
	readRepairTimeout = time.Minute // one repair
)

// readRepairs is the queue of repairs on read, and the objects queued or
// being repaired.
type readRepairs struct {
	mu      sync.Mutex
	pending map[readRepairKey]*readRepair
	queue   chan *readRepair
}

type readRepairKey struct {
	pg   clustermap.PGID
	name string
}

// readRepair is the repair of one object's shards that reads found
// failing their checksums (found, by position), in the PG's interval
// that began at epoch.
type readRepair struct {
	p       *pgState
	epoch   clustermap.Epoch
	key     readRepairKey
	found   map[int]*shardError
	started bool
}

// corruptShards returns the shards of a read that failed their checksums,
// by position.
func corruptShards(rd *shardReads, failed []int) map[int]*shardError {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	out := map[int]*shardError{}
	for _, i := range failed {
		var se *shardError
		if errors.As(rd.errs[i], &se) && se.status == proto.StatusCorrupt {
			out[i] = se
		}
	}
	return out
}

// afterCorruptRead sees to the shards a read found failing their
// checksums: queued for their rewrite when the read was rebuilt from the
// others, else reported as unreadable (an error: fewer than K verify).
func (s *Server) afterCorruptRead(p *pgState, id clustermap.PGID, name string, found map[int]*shardError, rebuilt bool) {
	if len(found) == 0 {
		return
	}
	if !rebuilt {
		s.reportReadShards(id, name, found, func(int) string { return "" })
		return
	}
	if s.queueReadRepair(p, id, name, found) {
		return
	}
	s.reportReadShards(id, name, found, func(int) string {
		return fmt.Sprintf("; served from the other shards; not rewritten: %d repairs on read wait already, left for scrub", readRepairsQueued)
	})
}

// queueReadRepair queues the rewrite of name's shards found failing their
// checksums, or adds them to the repair of name already queued. It returns
// false if the queue is full.
func (s *Server) queueReadRepair(p *pgState, id clustermap.PGID, name string, found map[int]*shardError) bool {
	q := &s.readRepairs
	key := readRepairKey{id, name}
	q.mu.Lock()
	defer q.mu.Unlock()
	if r := q.pending[key]; r != nil {
		if !r.started {
			for pos, se := range found {
				if r.found[pos] == nil {
					r.found[pos] = se
				}
			}
		}
		return true
	}
	p.mu.Lock()
	epoch := p.prim.Epoch
	p.mu.Unlock()
	r := &readRepair{p: p, epoch: epoch, key: key, found: found}
	select {
	case q.queue <- r:
	default:
		return false
	}
	if q.pending == nil {
		q.pending = map[readRepairKey]*readRepair{}
	}
	q.pending[key] = r
	return true
}

// readRepairLoop runs the queued repairs on read, one at a time; the OSD
// runs readRepairsAtOnce of them.
func (s *Server) readRepairLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.readRepairs.queue:
			s.runReadRepair(ctx, r)
		}
	}
}

// runReadRepair rewrites the shards r names if they still fail their
// checksums, and reports each.
func (s *Server) runReadRepair(ctx context.Context, r *readRepair) {
	q := &s.readRepairs
	q.mu.Lock()
	r.started = true
	q.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, readRepairTimeout)
	rebuilt, err := s.rewriteShards(rctx, r)
	cancel()
	q.mu.Lock()
	delete(q.pending, r.key)
	q.mu.Unlock()
	if err != nil {
		s.logf("%s: pg %s object %q: rewriting the shards a read found corrupt: %v", s.id, r.key.pg, r.key.name, err)
	}
	n := 0
	s.reportReadShards(r.key.pg, r.key.name, r.found, func(pos int) string {
		switch {
		case err != nil:
			return "; served from the other shards; repair failed: " + err.Error()
		case slices.Contains(rebuilt, pos):
			n++
			return "; repaired from the other shards"
		}
		return "; served from the other shards; passed its checksums when repaired (rewritten since)"
	})
	if n > 0 && s.metrics != nil {
		s.metrics.repaired.WithLabelValues("read").Add(float64(n))
	}
}

// rewriteShards is the repair of r under the object's lock: the shards
// r names read deep, the others' versions and keys, and those
// pg.BadShards picks rebuilt (rebuildBadShards), whose positions it
// returns.
func (s *Server) rewriteShards(ctx context.Context, r *readRepair) ([]int, error) {
	id, name := r.key.pg, r.key.name
	pool, ok := s.view.Map().Pool(id.Pool)
	if !ok || !pool.Erasure() {
		return nil, errors.New("its pool is gone")
	}
	l := s.lock(id, name)
	l.Lock()
	defer l.Unlock()
	r.p.mu.Lock()
	positions, epoch, active := slices.Clone(r.p.prim.Positions), r.p.prim.Epoch, r.p.phase == phaseActive
	r.p.mu.Unlock()
	switch {
	case !active || epoch != r.epoch:
		return nil, errors.New("the PG peered again since the read; left for scrub")
	case slices.Contains(positions, placement.NoOSD):
		return nil, fmt.Errorf("position %d has no OSD; left for recovery and scrub", slices.Index(positions, placement.NoOSD))
	}
	t := s.view.Table()
	copies := make([]pg.Copy, len(positions))
	for i, o := range positions {
		st, present, err := s.objectState(ctx, t, o, id, name, r.found[i] != nil)
		if err != nil {
			return nil, fmt.Errorf("reading the shard on %s: %w", o, err)
		}
		copies[i] = pg.Copy{Present: present, State: st}
	}
	bad, err := s.rebuildBadShards(ctx, pool.EC.K, id, r.p, epoch, positions, name, copies)
	switch {
	case errors.Is(err, errFewGoodShards):
		return nil, fmt.Errorf("fewer than %d shards agree", pool.EC.K)
	case err != nil:
		return nil, fmt.Errorf("rebuilding positions %v: %w", bad, err)
	}
	if len(bad) > 0 {
		s.logf("%s: pg %s object %q: rebuilt positions %v after a read found corrupt shards at %v", s.id, id, name, bad, sortedPositions(r.found))
	}
	return bad, nil
}

// reportReadShards records, for status, each shard a read found failing
// its checksums, on the OSD that holds it, its detail ending with what
// became of it (outcome).
func (s *Server) reportReadShards(id clustermap.PGID, name string, found map[int]*shardError, outcome func(pos int) string) {
	for _, pos := range sortedPositions(found) {
		se := found[pos]
		detail := fmt.Sprintf("shard at position %d: %s%s", pos, se.msg, outcome(pos))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.meta.AddReport(ctx, meta.Report{Kind: "corruption", OSD: se.osd, PG: id.String(), Object: name, Detail: detail, Time: time.Now().UTC()}); err != nil {
			s.logf("%s: could not report a corrupt shard: %v", s.id, err)
		}
		cancel()
	}
}

func sortedPositions(found map[int]*shardError) []int {
	out := make([]int, 0, len(found))
	for pos := range found {
		out = append(out, pos)
	}
	slices.Sort(out)
	return out
}
