package osd

import (
	"context"
	"slices"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// A small partial write that asks nothing first. Once a write of the
// primary has reached every position of the acting set it did not skip,
// the primary knows which version each holds and the object's size
// (pgState.known) until the PG's interval changes or a position is marked
// missing for the object. A small write of such an object
// (ec.Codec.WriteDelta) then reads only the old bytes of the data chunks
// it covers, and sends each parity position the delta to XOR into its
// shard (proto.FlagShardXor) instead of reading the old parity first; the
// positions the write does not change are neither asked nor written
// (skipped). Nothing here is trusted for correctness: each read's reply
// must carry the known version, and every
// position checks at apply that it holds the version the write replaces
// (Prev), so a wrong memo only fails the write (which drops it), and the
// write sent again takes the paths that ask (ecpartialfast.go).

// knownVersion is the version of an object that stands, the positions it
// skipped with the version each holds (pg.PartialHeld), and the object's
// size at it.
type knownVersion struct {
	ver  pg.EVersion
	held []pg.PosVer
	size int64
}

// noteCommitted records what w, complete on every member, left on every
// position: forgotten for a delete's tombstone, or when a position had no
// OSD, or took no part though the write did not skip it.
func (p *pgState) noteCommitted(name string, w *writePlan, positions int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var m pg.ShardMeta
	for _, m = range w.shardMetas {
		break // every member's meta names the same version and positions skipped
	}
	every := len(w.shardMetas) > 0 && len(w.shardMetas)+len(m.Held) == positions
	for osd := range w.shardMetas {
		every = every && slices.Contains(w.writeSet, osd)
	}
	if !every || m.Tombstone || p.prim.Epoch != w.interval {
		p.known.forget(name)
		return
	}
	p.known.set(w.interval, name, knownVersion{ver: m.Ver, held: m.Held, size: int64(m.Size)})
}

// forgetKnown drops what the primary knows of name's positions.
func (p *pgState) forgetKnown(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known.forget(name)
}

// knownOf returns what the primary knows of name in the current interval.
func (p *pgState) knownOf(name string) (knownVersion, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known.get(p.prim.Epoch, name)
}

// partialKnown works out a small write of an object whose positions the
// primary knows: its shard updates as ec.Codec.WriteDelta gives them, or
// ok false when the write is not small, the object not known, or a read
// of its old bytes fails (the write then takes the other paths).
func (s *Server) partialKnown(ctx context.Context, t *placement.Table, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) (*ecObject, []ec.ShardUpdate, bool) {
	k, known := p.knownOf(req.Object)
	_, osds := t.Positions(pool, req.PG)
	if !known || req.Op != proto.OpWrite || slices.Contains(osds, placement.NoOSD) {
		return nil, nil, false
	}
	l := c.Layout()
	stripe, reads, ok := partialStripe(l, req)
	if !ok || !reads {
		return nil, nil, false
	}
	o := &ecObject{t: t, osds: osds, metas: make([]*pg.ShardMeta, len(osds)), size: k.size}
	o.plan.Ver, o.plan.Held = k.ver, k.held
	for i := range osds {
		o.plan.Keep = append(o.plan.Keep, i)
		o.metas[i] = &pg.ShardMeta{Ver: k.ver, Size: uint64(k.size), Position: i, Held: k.held}
	}
	rd := &shardReads{s: s, ctx: ctx, o: o, l: l, id: req.PG, name: req.Object, flags: proto.FlagForWrite, bufs: map[int][]byte{}, errs: map[int]error{}}
	rd.from, rd.to = fastSpan(l, req, stripe)
	var chunks []int
	for _, w := range l.Plan(k.size, int64(req.Offset), len(req.Data)) {
		for _, r := range w.Ranges {
			chunks = append(chunks, r.Chunk)
		}
	}
	rd.prefetch(chunks)
	ups, ok := c.WriteDelta(k.size, int64(req.Offset), req.Data, rd.read)
	if !ok && len(rd.errs) > 0 && slices.ContainsFunc(chunks, func(i int) bool { return rd.errs[i] != nil }) {
		p.forgetKnown(req.Object) // a position did not give the known version
	}
	return o, ups, ok
}
