package osd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Recovery of erasure-coded PGs, by position: peering
// (pg.DecideShardsPG) left, for each position of the acting set, the
// objects whose shard it lacks or holds at another version than the one
// that stands. The primary rebuilds each such shard from K positions that
// hold that version (whole shards, ec.Codec.Reconstruct) and writes it to
// the position, with its meta and version; an object that stands absent
// (deleted while the position was away) is deleted there. Once a
// position lacks nothing, the record names it complete (noteRecovered),
// as for replicated PGs.

// ensureShards brings name's shard up to date on every position that
// lacks it. The caller holds the object's lock for writing. Recovery
// leaves out positions that are backfill-full and then returns errTooFull.
func (s *Server) ensureShards(ctx context.Context, pool *clustermap.Pool, id clustermap.PGID, p *pgState, name string, scope ensureScope) error {
	c, err := s.codecOf(pool)
	if err != nil {
		return err
	}
	p.mu.Lock()
	epoch, positions, sources := p.prim.Epoch, p.prim.Positions, p.prim.Sources
	var targets []int
	for pos, o := range positions {
		if o >= 0 && p.prim.IsMissing(o, name) {
			targets = append(targets, pos)
		}
	}
	p.mu.Unlock()
	if len(targets) == 0 {
		return nil
	}
	o, bad := s.ecLookup(ctx, pool, p, id, name)
	if bad != nil {
		return fmt.Errorf("%s: %s", bad.Status, bad.Message)
	}
	// The shards being rebuilt are never read for it, even at the version
	// that stands: scrub marks a shard that does not code with the others.
	o.plan.Keep = slices.DeleteFunc(slices.Clone(o.plan.Keep), func(i int) bool { return slices.Contains(targets, i) })
	var shards [][]byte
	var keys *shardKeys
	copied := map[int]bool{}
	if o.exists() {
		shards, copied = s.copyHeldShards(ctx, c.Layout(), o, id, name, targets, sources)
		if len(copied) < len(targets) {
			if shards, err = s.rebuildShards(ctx, c, o, id, name); err != nil {
				return err
			}
			clear(copied) // every shard is the rebuilt one
		}
		if keys, err = s.standingKeys(ctx, o, id, name); err != nil {
			return err
		}
	}
	var tooFull error
	for _, pos := range targets {
		osd := positions[pos]
		if pos >= len(o.osds) || o.osds[pos] != osd {
			return fmt.Errorf("position %d is no longer on %s: the PG peers again", pos, osd)
		}
		if scope == ensureRecovery && s.backfillFull(osd) {
			tooFull = errTooFull{osd}
			continue
		}
		coll, txn := shardColl(id, pos), &objstore.Txn{}
		txn.Delete(coll, name)
		txn.Delete(coll, rollbackName(name)) // a rebuilt shard has nothing to roll back
		var n int
		if o.exists() {
			meta := pg.ShardMeta{Ver: o.plan.Ver, Size: uint64(o.size), Position: pos, Held: o.plan.Held}
			txn.Put(coll, name, shards[pos])
			keys.addTo(txn, coll, name)
			txn.SetXattr(coll, name, shardMetaXattr, meta.Encode())
			txn.SetXattr(coll, name, versionXattr, meta.Ver.Encode())
			n = len(shards[pos])
		}
		cp := &objectCopy{s: s, ctx: ctx, m: o.t.Map(), id: id, coll: coll, name: name, dst: osd, background: scope == ensureRecovery}
		if err := cp.apply(txn); err != nil {
			return fmt.Errorf("shard %d to %s: %w", pos, osd, err)
		}
		p.clearMissing(osd, name, epoch)
		if o.exists() {
			s.metrics.noteShard(copied[pos])
		}
		s.recovery.objects.Add(1)
		s.recovery.bytes.Add(int64(n))
	}
	return tooFull
}

// copyHeldShards reads, for each target position with a source (the OSD
// that held the position before placement moved it: pg.BackfillSources),
// that OSD's shard of the object as it is, if it holds the version that
// stands: one shard read instead of K. It returns every position's shard
// (nil where none was copied) and the positions copied.
func (s *Server) copyHeldShards(ctx context.Context, l ec.Layout, o *ecObject, id clustermap.PGID, name string, targets []int, sources []clustermap.OSDID) ([][]byte, map[int]bool) {
	shards, copied := make([][]byte, l.K+l.M), map[int]bool{}
	for _, pos := range targets {
		if pos >= len(sources) || sources[pos] < 0 {
			continue
		}
		n := l.ShardLen(o.size, pos)
		req := &proto.Request{Op: proto.OpReadReplica, Flags: proto.FlagPosition, Epoch: o.t.Map().Epoch, PG: id, Object: name, Length: uint64(n), Limit: uint32(pos)}
		meta, resp, err := s.askShardReq(ctx, o.t, sources[pos], req)
		if err != nil {
			continue // not there, or not readable: rebuilt from K instead
		}
		if meta.Holding() == o.plan.Holds(pos) && !meta.Tombstone && int64(meta.Size) == o.size && int64(len(resp.Data)) == n {
			shards[pos], copied[pos] = bytes.Clone(resp.Data), true
		}
		resp.Release()
	}
	return shards, copied
}

// rebuildShards reads the whole shards of K positions that hold the
// version that stands and rebuilds every shard of the object from them,
// each cut to its length (ec.Layout.ShardLen).
func (s *Server) rebuildShards(ctx context.Context, c *ec.Codec, o *ecObject, id clustermap.PGID, name string) ([][]byte, error) {
	l := c.Layout()
	full := l.ShardLen(o.size, 0) // the longest: parity and shard 0
	parts := make([][]byte, l.K+l.M)
	if full == 0 {
		for i := range parts {
			parts[i] = []byte{}
		}
		return parts, nil
	}
	have := 0
	var errs []error
	for _, pos := range append(slices.Clone(o.plan.Keep), o.plan.RollBack...) {
		flags, ok := o.source(pos)
		if have == l.K || !ok {
			continue
		}
		n := l.ShardLen(o.size, pos)
		meta, data, err := s.readShardFrom(ctx, o.t, o.osds[pos], id, name, 0, n, flags)
		if err == nil && (meta.Holding() != o.plan.Holds(pos) || int64(len(data)) != n) {
			err = fmt.Errorf("holds version %s and %d bytes, want %s and %d", meta.Holding(), len(data), o.plan.Holds(pos), n)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("position %d: %w", pos, err))
			continue
		}
		buf := make([]byte, full)
		copy(buf, data)
		parts[pos] = buf
		have++
	}
	if have < l.K {
		return nil, fmt.Errorf("rebuilding %q at %s: %d of the %d shards it needs could be read: %w", name, o.plan.Ver, have, l.K, errors.Join(errs...))
	}
	if err := c.Reconstruct(parts); err != nil {
		return nil, err
	}
	for i := range parts {
		parts[i] = parts[i][:l.ShardLen(o.size, i)]
	}
	return parts, nil
}
