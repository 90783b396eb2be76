package osd

import (
	"context"
	"fmt"
	"sync"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Partial writes of erasure-coded objects: a write at an offset
// (OpWrite) and a truncate (OpTruncate). Under the object's lock the
// primary decides the version that stands (ecLookup, as reads do) and has
// every position of the acting set that does not hold it rebuilt first;
// it then reads what the change needs of the stripes it touches (the data
// shards' old bytes, and the old parity for a delta: shardReads, which
// rebuilds a data shard that cannot be read from the others), and works
// out each shard's new bytes and length (ec.Codec.WriteAt, Truncate).
// Each position gets only its part: plain bytes at offsets (so a resend
// lands once; the parity deltas of a small write of a known version are
// the exception, ecpartialknown.go), its new length, and the meta of the
// new version, whose Prev is the version the write replaces
// (proto.FlagShardPartial): a position at another version refuses it
// (expectShard) and is rebuilt before the write is sent again, so no
// bytes are ever written over a stale shard. Each position keeps what it
// needs to roll back in the same transaction: the old bytes of what the
// write changes (an undo record, ecundo.go) or, for a large change, the
// whole old shard as a put does (keepRollBack), so trims and peering are
// a put's.

// maxPartialEnd bounds where a write or truncate may leave an object's
// end, so offsets never overflow the shard arithmetic.
const maxPartialEnd = 1 << 50

// ecPartialWrite runs a write at an offset or a truncate of an
// erasure-coded object. The caller holds the object's lock.
func (s *Server) ecPartialWrite(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	end := req.Offset
	if req.Op == proto.OpWrite {
		end += uint64(len(req.Data))
	}
	if req.Offset > maxPartialEnd || end > maxPartialEnd {
		return s.fail(proto.StatusInvalid, "%s of %q at %d: past the largest object an erasure-coded pool holds (%d bytes)", req.Op, req.Object, req.Offset, uint64(maxPartialEnd))
	}
	t := s.view.Table()
	if bad := s.ecWriteReady(ctx, t, pool, p, req); bad != nil {
		return bad
	}
	p.mu.Lock()
	w := &writePlan{t: t, interval: p.prim.Epoch, writeSet: p.prim.WriteSet, acting: p.prim.Acting, partial: true}
	p.mu.Unlock()
	o, ups, known := s.partialKnown(ctx, t, pool, c, p, req)
	s.metrics.notePartial(known)
	var rd *stripeReads
	if !known {
		if o, rd = s.partialFast(ctx, t, pool, c.Layout(), p, req); o == nil {
			var bad *proto.Response
			if o, bad = s.ecStanding(ctx, pool, p, req, w.interval); bad != nil {
				return bad
			}
		}
	}
	if req.Op == proto.OpWrite || int64(req.Offset) > o.sizeNow() {
		if bad := s.refuseFull(req, w.writeSet); bad != nil {
			return bad
		}
	}
	if len(w.acting) < pool.MinSize {
		return s.belowMinSize(pool, req, w)
	}
	newSize := o.size // a known write lies inside the object
	if !known {
		var err error
		if ups, newSize, err = s.partialUpdates(ctx, c, o, req, rd); err != nil {
			return s.fail(proto.StatusUnavailable, "pg %s: reading the stripes of %q that the %s changes: %v", req.PG, req.Object, req.Op, err)
		}
	}
	w.ver = p.nextVersion()
	if bad := s.planPartial(pool, req, w, o, ups, newSize); bad != nil {
		return bad
	}
	return s.ecCommit(ctx, pool, p, req, w)
}

// sizeNow is the object's size as the version that stands has it (0 if
// it is absent).
func (o *ecObject) sizeNow() int64 {
	if !o.exists() {
		return 0
	}
	return o.size
}

// lagging returns the positions with an OSD whose shard does not hold the
// version that stands (or, for an absent object, holds a shard that is
// not a tombstone).
func (o *ecObject) lagging() []int {
	var out []int
	for i, osd := range o.osds {
		if osd == placement.NoOSD {
			continue
		}
		m := o.metas[i]
		ok := m != nil && !m.Tombstone && m.Holding() == o.plan.Holds(i)
		if !o.exists() {
			ok = m == nil || m.Tombstone
		}
		if !ok {
			out = append(out, i)
		}
	}
	return out
}

// ecStanding decides the version of req's object that stands and makes
// sure every position of the acting set holds it: one that does not (a
// write it refused, a rollback it keeps) is marked missing and rebuilt,
// once; a position still lagging then fails the write, to be retried.
func (s *Server) ecStanding(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, interval clustermap.Epoch) (*ecObject, *proto.Response) {
	for try := 0; ; try++ {
		o, bad := s.ecLookup(ctx, pool, p, req.PG, req.Object)
		if bad != nil {
			return nil, bad
		}
		lag := o.lagging()
		if len(lag) == 0 {
			return o, nil
		}
		if try > 0 {
			return nil, s.fail(proto.StatusUnavailable, "pg %s: positions %v do not hold version %s of %q after they were rebuilt; retry", req.PG, lag, o.plan.Ver, req.Object)
		}
		for _, i := range lag {
			p.markMissing(o.osds[i], req.Object, interval)
		}
		if err := s.ensureObject(ctx, req.PG, p, req.Object, ensureAll); err != nil {
			return nil, s.fail(proto.StatusUnavailable, "pg %s: rebuilding the shards of %q at positions %v before writing it: %v", req.PG, req.Object, lag, err)
		}
	}
}

// partialUpdates reads what req needs of the object's touched stripes
// (unless rd, from the fast path, holds them already) and returns each
// shard's update, and the object's size afterwards.
func (s *Server) partialUpdates(ctx context.Context, c *ec.Codec, o *ecObject, req *proto.Request, rd *stripeReads) ([]ec.ShardUpdate, int64, error) {
	l := c.Layout()
	size, off := o.sizeNow(), int64(req.Offset)
	lo, hi := off, off+int64(len(req.Data))
	if req.Op == proto.OpTruncate {
		hi = lo // as ec.Codec.Truncate: a cut inside a stripe zeroes the rest of it
		if off < size && off%l.StripeBytes() != 0 {
			hi = min(size, (off/l.StripeBytes()+1)*l.StripeBytes())
		}
	}
	if rd == nil {
		rd = s.readStripes(ctx, l, o, req, l.Plan(size, lo, int(hi-lo)))
	}
	if req.Op == proto.OpTruncate {
		ups, err := c.Truncate(size, off, rd.read)
		return ups, off, err
	}
	ups, err := c.WriteAt(size, off, req.Data, rd.read)
	if len(req.Data) == 0 {
		return ups, size, err
	}
	return ups, max(size, hi), err
}

// stripeReads serves a partial write's reads of the stripes it does not
// rewrite whole (at most its first and last), each shard's chunk of such
// a stripe read once, all at once.
type stripeReads struct {
	unit int64
	by   map[int64]*shardReads // by stripe
}

// readStripes fetches, in parallel, what the stripes of work read.
func (s *Server) readStripes(ctx context.Context, l ec.Layout, o *ecObject, req *proto.Request, work []ec.StripeWork) *stripeReads {
	r := &stripeReads{unit: int64(l.Unit), by: map[int64]*shardReads{}}
	var wg sync.WaitGroup
	for _, w := range work {
		if w.Kind == ec.Full || !o.exists() {
			continue // nothing to read: bytes past the end read as zeros
		}
		rd := &shardReads{s: s, ctx: ctx, o: o, l: l, id: req.PG, name: req.Object, flags: proto.FlagForWrite, bufs: map[int][]byte{}, errs: map[int]error{}}
		rd.from, rd.to = stripeSpan(l, w)
		r.by[w.Stripe] = rd
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.prefetch(stripeShards(l, w))
		}()
	}
	wg.Wait()
	return r
}

// read is the ec.ReadShard of the write: a read lies in one chunk, so in
// one stripe. A read outside the span fetched (a delta that turned into a
// reread) fetches the stripe's whole chunks.
func (r *stripeReads) read(i int, off int64, n int) ([]byte, error) {
	stripe := off / r.unit
	rd := r.by[stripe]
	if rd == nil {
		return nil, fmt.Errorf("shard %d: [%d, +%d) lies in a stripe the write does not read", i, off, n)
	}
	if off < rd.from || off+int64(n) > rd.to {
		rd = &shardReads{s: rd.s, ctx: rd.ctx, o: rd.o, l: rd.l, id: rd.id, name: rd.name, flags: rd.flags, bufs: map[int][]byte{}, errs: map[int]error{}}
		rd.from, rd.to = stripe*r.unit, (stripe+1)*r.unit
		r.by[stripe] = rd
	}
	return rd.read(i, off, n)
}

// stripeSpan is the span of each shard a partial write reads of stripe
// w: for a delta only the chunk columns it covers, in whole blocks (a
// 4 KiB write to a volume reads 4 KiB of its data and parity shards, not
// their 16 KiB chunks); the whole chunk otherwise.
func stripeSpan(l ec.Layout, w ec.StripeWork) (from, to int64) {
	base := w.Stripe * int64(l.Unit)
	if w.Kind != ec.Delta {
		return base, base + int64(l.Unit)
	}
	lo, hi := w.Columns()
	lo &^= spanAlign - 1
	hi = min(l.Unit, (hi+spanAlign-1)&^(spanAlign-1))
	return base + int64(lo), base + int64(hi)
}

// spanAlign: shards are read in whole blocks of the store's.
const spanAlign = 4096

// stripeShards returns the shards a stripe's work reads: the data shards
// it touches and the parity shards for a delta, every data shard for a
// reread (a shard missing here is read when first needed).
func stripeShards(l ec.Layout, w ec.StripeWork) []int {
	var out []int
	if w.Kind == ec.Reread {
		for i := 0; i < l.K; i++ {
			out = append(out, i)
		}
		return out
	}
	for _, r := range w.Ranges {
		out = append(out, r.Chunk)
	}
	for j := l.K; j < l.K+l.M; j++ {
		out = append(out, j)
	}
	return out
}

// planPartial gives each position of the acting set its transaction and
// the meta of its shard: its writes, its new length if the object's size
// changes, and the version the write replaces as the meta's Prev. A write
// that creates the object (or writes over a delete's tombstone) starts
// every shard empty.
func (s *Server) planPartial(pool *clustermap.Pool, req *proto.Request, w *writePlan, o *ecObject, ups []ec.ShardUpdate, newSize int64) *proto.Response {
	meta := pg.ShardMeta{Ver: pg.EVersion{Epoch: uint64(w.interval), Version: w.ver}, Size: uint64(newSize), CanRollBack: true}
	if o.exists() {
		meta.Prev = o.plan.Ver
	}
	meta.Held = skipped(o, ups, newSize)
	return s.planPositions(pool, req, w, meta, o, func(i int, coll string, txn *objstore.Txn) *proto.Response {
		if !o.exists() {
			txn.Put(coll, req.Object, nil)
		}
		for _, sw := range ups[i].Writes {
			txn.Write(coll, req.Object, uint64(sw.Off), sw.Data)
		}
		if len(ups[i].Writes) > 0 && ups[i].Writes[0].Xor {
			w.xorAt = append(w.xorAt, o.osds[i])
		}
		if !o.exists() || newSize != o.size {
			txn.Truncate(coll, req.Object, uint64(ups[i].Len))
		}
		return nil
	})
}

// skipped returns the positions a partial write need not reach, with the
// version each holds (pg.PartialHeld): those whose shard it does not
// change, when the object is there and keeps its size (a small write
// changes one data chunk and the parity, and the other data positions
// then take no part). Nil when it reaches them all.
func skipped(o *ecObject, ups []ec.ShardUpdate, newSize int64) []pg.PosVer {
	if !o.exists() || newSize != o.size {
		return nil
	}
	var wrote []int
	base := make([]pg.EVersion, len(ups))
	for i, up := range ups {
		if len(up.Writes) > 0 {
			wrote = append(wrote, i)
		}
		base[i] = o.plan.Holds(i)
	}
	if len(wrote) == 0 {
		return nil // a write of nothing: every position takes its version
	}
	return pg.PartialHeld(base, wrote)
}
