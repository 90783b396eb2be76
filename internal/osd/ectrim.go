package osd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Trims and rollbacks travel as OpShardTrim and OpShardRollBack, a list
// of objects (proto.ShardEntry) of one PG at a time. A rollback is sent
// by peering, before the PG goes active, and fails the peering if it
// fails. Trims are off the write's path: an acknowledged write queues its
// trim (queueTrim), and the trimmer sends what queued within trimLinger to every
// position of its PGs as the newest map places them, one OpShardTrims to
// each OSD for all its PGs (one commit there, not one per write). The
// queue is bounded: a trim that finds it full is dropped, as one lost on
// the way would be; peering trims again what it finds complete.

// Bounds of the trimmer.
const (
	maxQueuedTrims = 4096                   // trims waiting to be sent
	trimLinger     = 20 * time.Millisecond  // how long the trimmer gathers a batch
	trimTimeout    = 10 * time.Second       // one OpShardTrim
	peerTrimsMax   = proto.MaxShardEntries  // trims peering keeps for once the PG is clean
	rollBackWait   = 20 * time.Second       // every rollback of a peering
	trimRetryAfter = 100 * time.Millisecond // the trimmer's pause after a failed send
)

// shardTrim is one object of an erasure-coded PG whose write at ver is
// complete.
type shardTrim struct {
	pg    clustermap.PGID
	entry proto.ShardEntry
}

// queueTrim queues the trim of name's shards at ver, or drops it if the
// queue is full.
func (s *Server) queueTrim(id clustermap.PGID, name string, ver pg.EVersion) {
	select {
	case s.trims <- shardTrim{pg: id, entry: proto.ShardEntry{Object: name, Ver: [2]uint64{ver.Epoch, ver.Version}}}:
	default:
	}
}

// trimLoop sends the queued trims, gathering each batch for trimLinger.
func (s *Server) trimLoop(ctx context.Context) {
	for {
		var first shardTrim
		select {
		case <-ctx.Done():
			return
		case first = <-s.trims:
		}
		var batch trimBatch
		batch.add(first)
		linger := time.After(trimLinger)
	gather:
		for n := 1; n < maxQueuedTrims; n++ {
			select {
			case t := <-s.trims:
				batch.add(t)
			case <-linger:
				break gather
			}
		}
		if err := s.sendTrims(ctx, s.view.Table(), batch.byPG); err != nil && ctx.Err() == nil {
			time.Sleep(trimRetryAfter) // dropped: peering trims what is left
		}
	}
}

// trimBatch is the trims the trimmer gathered, one per object: the
// newest write's. Writes to an object are sent one at a time, each once
// the last is complete on every position, so a shard at the newest
// version holds no older write's rollback state to trim, and the trims of
// the older ones would find nothing to do.
type trimBatch struct {
	byPG map[clustermap.PGID][]proto.ShardEntry
	at   map[trimKey]int // the object's entry in byPG
}

type trimKey struct {
	pg   clustermap.PGID
	name string
}

// add adds t, or puts it in place of its object's older trim.
func (b *trimBatch) add(t shardTrim) {
	if b.byPG == nil {
		b.byPG, b.at = map[clustermap.PGID][]proto.ShardEntry{}, map[trimKey]int{}
	}
	k := trimKey{t.pg, t.entry.Object}
	es := b.byPG[t.pg]
	if i, ok := b.at[k]; ok {
		if entryVer(es[i]).Less(entryVer(t.entry)) {
			es[i] = t.entry
		}
		return
	}
	b.at[k] = len(es)
	b.byPG[t.pg] = append(es, t.entry)
}

func entryVer(e proto.ShardEntry) pg.EVersion {
	return pg.EVersion{Epoch: e.Ver[0], Version: e.Ver[1]}
}

// sendTrims sends the trims of batch to every position of their PGs: one
// OpShardTrims to each OSD for all its PGs (split past MaxShardEntries),
// so a batch costs each OSD one request and one commit, not one per PG.
// Every OSD is tried; the first error is returned.
func (s *Server) sendTrims(ctx context.Context, t *placement.Table, batch map[clustermap.PGID][]proto.ShardEntry) error {
	perOSD := map[clustermap.OSDID][]proto.PGShardEntries{}
	for id, es := range batch {
		pool, ok := t.Map().Pool(id.Pool)
		if !ok || !pool.Erasure() {
			continue
		}
		_, positions := t.Positions(pool, id)
		for _, o := range positions {
			if o != placement.NoOSD {
				perOSD[o] = append(perOSD[o], proto.PGShardEntries{PG: id, Entries: es})
			}
		}
	}
	var first error
	for o, gs := range perOSD {
		for _, part := range splitTrims(gs, proto.MaxShardEntries) {
			if err := s.sendShardOp(ctx, t, o, clustermap.PGID{}, proto.OpShardTrims, part); err != nil {
				if first == nil {
					first = fmt.Errorf("%s to %s: %w", proto.OpShardTrims, o, err)
				}
				break
			}
		}
	}
	return first
}

// splitTrims cuts gs into requests of at most max entries each, a PG's
// entries split across two where they must.
func splitTrims(gs []proto.PGShardEntries, max int) [][]proto.PGShardEntries {
	var out [][]proto.PGShardEntries
	var cur []proto.PGShardEntries
	n := 0
	for _, g := range gs {
		for es := g.Entries; len(es) > 0; {
			k := min(len(es), max-n)
			cur = append(cur, proto.PGShardEntries{PG: g.PG, Entries: es[:k]})
			es, n = es[k:], n+k
			if n == max {
				out, cur, n = append(out, cur), nil, 0
			}
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// sendShardEntries sends op with es to the OSDs of PG id at t: to those
// of only when only is not nil, else to every position. Every OSD is
// tried; the first error is returned.
func (s *Server) sendShardEntries(ctx context.Context, t *placement.Table, id clustermap.PGID, op proto.Op, only map[clustermap.OSDID]bool, es []proto.ShardEntry) error {
	pool, ok := t.Map().Pool(id.Pool)
	if !ok || !pool.Erasure() {
		return nil
	}
	_, positions := t.Positions(pool, id)
	var first error
	for _, o := range positions {
		if o == placement.NoOSD || only != nil && !only[o] {
			continue
		}
		for rest := es; len(rest) > 0; {
			n := min(len(rest), proto.MaxShardEntries)
			if err := s.sendShardOp(ctx, t, o, id, op, []proto.PGShardEntries{{PG: id, Entries: rest[:n]}}); err != nil {
				if first == nil {
					first = fmt.Errorf("%s to %s: %w", op, o, err)
				}
				break
			}
			rest = rest[n:]
		}
	}
	return first
}

// sendShardOp sends one OpShardTrim or OpShardRollBack of PG id (gs: its
// entries alone), or an OpShardTrims (gs: the entries of its PGs), to osd;
// this OSD applies it itself.
func (s *Server) sendShardOp(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, op proto.Op, gs []proto.PGShardEntries) error {
	req := &proto.Request{Op: op, Epoch: t.Map().Epoch, PG: id}
	if op == proto.OpShardTrims {
		req.Data = proto.AppendPGShardEntries(nil, gs)
	} else {
		req.Data = proto.AppendShardEntries(nil, gs[0].Entries)
	}
	var resp *proto.Response
	switch {
	case osd == s.id && op == proto.OpShardTrims:
		resp = s.shardTrims(t, req)
	case osd == s.id:
		resp = s.shardEntries(t, req)
	default:
		o, ok := t.Map().OSD(osd)
		if !ok || !s.peerUp(osd) {
			return fmt.Errorf("%s is down", osd)
		}
		cctx, cancel := context.WithTimeout(ctx, trimTimeout)
		defer cancel()
		var err error
		if resp, err = s.peers.Call(cctx, o.Addr, req); err != nil {
			return err
		}
	}
	if resp.Status != proto.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, resp.Message)
	}
	return nil
}

// shardEntries serves OpShardTrim and OpShardRollBack on this OSD's
// position of an erasure-coded PG, under the PG's fence as a write.
func (s *Server) shardEntries(t *placement.Table, req *proto.Request) *proto.Response {
	coll, bad := s.collFor(t, req.PG)
	if bad != nil {
		return bad
	}
	es, err := proto.DecodeShardEntries(req.Data)
	if err != nil {
		return s.fail(proto.StatusInvalid, "%s: %v", req.Op, err)
	}
	_, unlock, bad := s.fenceReplica(req)
	defer unlock()
	if bad != nil {
		return bad
	}
	if err := s.applyShardEntries(coll, req.Op, es); err != nil {
		if s.store.Err() != nil {
			return s.failErr(err)
		}
		return s.fail(proto.StatusInvalid, "%s on %s: %v", req.Op, s.id, err)
	}
	return s.ok()
}

// shardTrims serves OpShardTrims: the trims of this OSD's positions of
// several PGs, as one transaction. A PG this OSD holds no position of (the
// map moved on) is skipped, as a trim lost on the way would be. Unlike
// a rollback it takes no PG fence: a trim only follows an acknowledged
// write, which no peering rolls back, and trimTxn checks each shard's
// version under its lock.
func (s *Server) shardTrims(t *placement.Table, req *proto.Request) *proto.Response {
	gs, err := proto.DecodePGShardEntries(req.Data)
	if err != nil {
		return s.fail(proto.StatusInvalid, "%s: %v", req.Op, err)
	}
	var keys []string
	colls := make([]string, len(gs))
	for i, g := range gs {
		if pool, ok := t.Map().Pool(g.PG.Pool); !ok || !pool.Erasure() {
			continue
		}
		if coll, bad := s.collFor(t, g.PG); bad == nil {
			colls[i] = coll
			for _, e := range g.Entries {
				keys = append(keys, coll+"/"+e.Object)
			}
		}
	}
	if err := s.applyTrims(colls, keys, gs); err != nil {
		return s.failErr(err)
	}
	return s.ok()
}

// applyTrims applies the trims of gs, each group's in colls[i] (""
// skips it), as one transaction, under the locks of keys, their shards.
func (s *Server) applyTrims(colls, keys []string, gs []proto.PGShardEntries) error {
	defer s.shards.lockKeys(s.seed, keys)()
	txn := &objstore.Txn{}
	for i, g := range gs {
		for _, e := range g.Entries {
			if colls[i] == "" {
				break
			}
			err := s.trimTxn(colls[i], e, txn)
			if err != nil && !objstore.IsCorruption(err) && !errors.Is(err, pg.ErrBadShardMeta) {
				return err
			} // a damaged shard keeps its state: scrub rebuilds it
		}
	}
	if txn.Len() == 0 {
		return nil
	}
	return s.apply(txn)
}

// rollBackShards carries out peering's rollbacks on every OSD that has
// some, before the PG goes active.
func (s *Server) rollBackShards(ctx context.Context, t *placement.Table, id clustermap.PGID, rbs map[clustermap.OSDID][]pg.ShardRollBack) error {
	ctx, cancel := context.WithTimeout(ctx, rollBackWait)
	defer cancel()
	for o, list := range rbs {
		es := make([]proto.ShardEntry, len(list))
		for i, r := range list {
			es[i] = proto.ShardEntry{Object: r.Name, Ver: [2]uint64{r.Ver.Epoch, r.Ver.Version}, To: [2]uint64{r.To.Epoch, r.To.Version}}
		}
		if err := s.sendShardEntries(ctx, t, id, proto.OpShardRollBack, map[clustermap.OSDID]bool{o: true}, es); err != nil {
			return fmt.Errorf("rolling back %d shard(s) of writes cut short: %w", len(es), err)
		}
		s.logf("%s: pg %s: %s rolled back %d shard(s) of writes that reached too few positions to stand, e.g. %q to %s",
			s.id, id, o, len(list), list[0].Name, list[0].To)
	}
	return nil
}

// peeringTrims sends the trims peering found (objects every position
// holds, some still able to roll back) once the PG is clean: now if it
// is, else when recovery ends (noteRecovered); at most peerTrimsMax are
// kept. The caller holds p.mu.
func (s *Server) peeringTrims(id clustermap.PGID, p *pgState, res pg.Peered) {
	p.pendingTrims = nil
	if len(res.Trims) == 0 {
		return
	}
	trims := res.Trims[:min(len(res.Trims), peerTrimsMax)]
	if res.MissingCount() > 0 || len(res.Unfound) > 0 || len(res.Acting) < len(res.Positions) {
		p.pendingTrims = trims
		return
	}
	for _, tr := range trims {
		s.queueTrim(id, tr.Name, tr.Ver)
	}
}

// sendPendingTrims queues the trims peering kept for once the PG is
// clean; recovery just made every acting position complete. The caller
// holds p.mu.
func (s *Server) sendPendingTrims(id clustermap.PGID, p *pgState) {
	if len(p.prim.Acting) < len(p.prim.Positions) {
		return // a hole: not clean yet
	}
	for _, tr := range p.pendingTrims {
		s.queueTrim(id, tr.Name, tr.Ver)
	}
	p.pendingTrims = nil
}
