package osd

import (
	"context"
	"fmt"
	"sync"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/proto"
)

// ecRead serves a read or stat of an erasure-coded object, in one round
// trip to the data positions when they agree (ecReadFast); else: its size from
// the standing version's shards, its bytes from the data shards the range
// touches, rebuilt from any K shards of that version where one is down or
// fails (its checksums, its version, its length). The read rewrites
// nothing itself: a shard peering found stale is rebuilt by recovery, and
// one failing its checksums is queued for its rewrite after the reply
// (afterCorruptRead, ecreadrepair.go). The caller holds the object's lock
// for reading.
func (s *Server) ecRead(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	if !p.isUnfound(req.Object) {
		if r := s.ecReadLocal(pool, c.Layout(), p, req); r != nil {
			return r
		}
		if r := s.ecReadFast(ctx, pool, c, p, req); r != nil {
			return r
		}
	}
	o, bad := s.ecLookup(ctx, pool, p, req.PG, req.Object)
	if bad != nil {
		return bad
	}
	if !o.exists() {
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	r := s.ok()
	r.Size = uint64(o.size)
	off := int64(min(req.Offset, uint64(o.size)))
	end := o.size
	if req.Length > 0 && req.Length < uint64(end-off) {
		end = off + int64(req.Length)
	}
	if req.Op == proto.OpStat || end <= off {
		return r
	}
	l := c.Layout()
	rd := &shardReads{s: s, ctx: ctx, o: o, l: l, id: req.PG, name: req.Object, bufs: map[int][]byte{}, errs: map[int]error{}}
	rd.from, rd.to = l.Span(off, end)
	rd.prefetch(l.DataChunks(off, end))
	data, failed, err := c.ReadRange(o.size, off, int(end-off), rd.read)
	if len(failed) > 0 {
		s.logf("%s: pg %s object %q: shards at positions %v failed (%s); %s", s.id, req.PG, req.Object, failed, rd.why(failed),
			map[bool]string{true: "read rebuilt from the others", false: "read failed"}[err == nil])
		s.afterCorruptRead(p, req.PG, req.Object, corruptShards(rd, failed), err == nil)
	}
	if err != nil {
		return s.fail(proto.StatusUnavailable, "pg %s: reading %q: %v (%s)", req.PG, req.Object, err, rd.why(failed))
	}
	r.Data = data
	return r
}

// ecReadLocal serves a read or stat from the primary's own shard alone,
// or returns nil. It may when that shard is a data position's, holds the
// bytes asked for, is not stale for the object (p's missing sets) and has
// nothing to roll back to: its version was then complete, acknowledged by
// every position of its write set, and no newer write can stand without
// this primary, which holds the object's lock, having made it (or, in an
// earlier interval, without peering finding this position lacking it).
// A write that failed after this position applied it marks the position
// missing (ecCommit). A read failing its checksums takes the other paths,
// which report and repair it.
func (s *Server) ecReadLocal(pool *clustermap.Pool, l ec.Layout, p *pgState, req *proto.Request) *proto.Response {
	t := s.view.Table()
	pos := s.positionIn(t, pool, req.PG)
	if pos < 0 || pos >= l.K || p.isMissing(s.id, req.Object) {
		return nil
	}
	coll := shardColl(req.PG, pos)
	m, found, err := s.shardMeta(coll, req.Object)
	if err != nil || !found || m.Tombstone || m.CanRollBack || m.Position != pos {
		return nil
	}
	off, end := fastReadRange(req)
	end = min(end, int64(m.Size))
	r := s.ok()
	r.Size = m.Size
	if req.Op == proto.OpStat || end <= off {
		return r
	}
	stripe, chunk, in := l.Locate(off)
	if chunk != pos || int64(in)+end-off > int64(l.Unit) {
		return nil // other positions hold some of it
	}
	data, _, sums, release, err := s.store.ReadShared(coll, req.Object, uint64(l.ShardOffset(stripe, in)), uint64(end-off))
	if err != nil || int64(len(data)) != end-off {
		if err == nil {
			release()
		}
		return nil
	}
	r.Data, r.Free, r.DataSums = data, release, sums
	return r
}

// shardReads reads, once per shard, the span [from, to) of every shard a
// read needs, zero-padded where the shard ends (ec.Layout.ShardLen), and
// serves ec.Codec.ReadRange from it.
type shardReads struct {
	s        *Server
	ctx      context.Context
	o        *ecObject
	l        ec.Layout
	id       clustermap.PGID
	name     string
	from, to int64
	flags    uint32 // more flags of the shard reads (proto.FlagForWrite)

	mu   sync.Mutex
	bufs map[int][]byte
	errs map[int]error
}

// prefetch reads the spans of shards in parallel.
func (r *shardReads) prefetch(shards []int) {
	if len(shards) == 1 {
		r.fetchInto(shards[0]) // a small write's one chunk: no goroutine to start
		return
	}
	var wg sync.WaitGroup
	for _, i := range shards {
		wg.Go(func() { r.fetchInto(i) })
	}
	wg.Wait()
}

// fetchInto fetches shard i's span into r.
func (r *shardReads) fetchInto(i int) {
	b, err := r.fetch(i)
	r.mu.Lock()
	r.bufs[i], r.errs[i] = b, err
	r.mu.Unlock()
}

// read is the ec.ReadShard of the read: a parity shard is read the first
// time the rebuild needs it.
func (r *shardReads) read(i int, off int64, n int) ([]byte, error) {
	r.mu.Lock()
	b, done := r.bufs[i]
	err := r.errs[i]
	r.mu.Unlock()
	if !done {
		r.prefetch([]int{i})
		return r.read(i, off, n)
	}
	if err != nil {
		return nil, err
	}
	lo := off - r.from
	if lo < 0 || lo+int64(n) > int64(len(b)) {
		return nil, fmt.Errorf("shard %d: [%d, +%d) is outside the span read", i, off, n)
	}
	return b[lo : lo+int64(n)], nil
}

// fetch reads shard i's span from its position.
func (r *shardReads) fetch(i int) ([]byte, error) {
	flags, ok := r.o.source(i)
	if !ok {
		return nil, fmt.Errorf("position %d does not hold version %s", i, r.o.plan.Holds(i))
	}
	hi := min(r.to, r.l.ShardLen(r.o.size, i))
	if hi <= r.from {
		return make([]byte, r.to-r.from), nil // the shard holds nothing there: zeros
	}
	meta, data, err := r.s.readShardFrom(r.ctx, r.o.t, r.o.osds[i], r.id, r.name, r.from, hi-r.from, flags|r.flags)
	if err != nil {
		return nil, err
	}
	if want := r.o.plan.Holds(i); meta.Holding() != want || int64(len(data)) != hi-r.from {
		return nil, fmt.Errorf("position %d holds version %s and %d bytes of the span, want %s and %d", i, meta.Holding(), len(data), want, hi-r.from)
	}
	if hi == r.to {
		return data, nil // readShardFrom's: ours
	}
	buf := make([]byte, r.to-r.from)
	copy(buf, data)
	return buf, nil
}

// why says why the shards failed, for logs and errors.
func (r *shardReads) why(failed []int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := ""
	for _, i := range failed {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf("position %d: %v", i, r.errs[i])
	}
	return out
}
