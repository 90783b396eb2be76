package osd

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// A read of an erasure-coded object in one round trip: the primary asks
// the first pg.FastReadPositions positions (the data positions, and with
// K ≤ M some parity ones) at once for their shard's meta and, where the
// range touches their chunks, the span's bytes. If pg.DecideShardsPart
// finds those answers final (every one holds the version that stands, none
// stale: the argument is in internal/pg/shardread.go), the primary serves
// them, assembled straight into the reply (ec.Layout.Assemble, one copy
// per byte, or none when the range lies in one chunk); anything else (a
// position down, failing its checksums, at another version, stale, a
// version to roll back to) falls back to ecLookup and the rebuild of
// ecRead, which ask every position.

// readToEnd stands for "to the object's end" in a range whose end is not
// known before the shards' metas say the object's size: a shard read asks
// for its span up to this and the store stops at the shard's end.
const readToEnd = math.MaxInt64 / 2

// shardReply is one position's answer to a fast read: its meta and span
// (resp.Data), or why it has none. The reply is released once served.
type shardReply struct {
	meta *pg.ShardMeta
	resp *proto.Response
	err  error
}

// release hands back the reply's buffer.
func (r *shardReply) release() {
	if r.resp != nil {
		r.resp.Release()
		r.resp = nil
	}
}

// ecReadFast serves a read or stat in one round trip, or returns nil if the
// answers it got do not settle it: the caller then runs the full lookup.
// The caller holds the object's lock for reading.
func (s *Server) ecReadFast(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	l := c.Layout()
	t := s.view.Table()
	_, osds := t.Positions(pool, req.PG)
	asked := pg.FastReadPositions(l.K, l.M)
	if len(osds) < asked {
		return nil
	}
	off, end := fastReadRange(req)
	var from, to int64
	var chunks []int
	if req.Op == proto.OpRead && end > off {
		from, to = l.Span(off, end)
		chunks = l.DataChunks(off, end)
	}
	replies := s.askShards(ctx, t, osds[:asked], req.PG, req.Object, from, to, chunks, 0)
	defer func() {
		for i := range replies {
			replies[i].release()
		}
	}()
	o, ok := decideFast(pool.EC.K, p, osds, req.Object, replies)
	if !ok {
		return nil
	}
	if !o.exists() {
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	r := s.ok()
	r.Size = uint64(o.size)
	end = min(end, o.size)
	if req.Op == proto.OpStat || end <= off {
		return r
	}
	if !spansWhole(l, o.size, from, to, chunks, replies) || !assembleInto(r, l, off, end, from, replies) {
		return nil
	}
	return r
}

// fastReadRange is the range a request asks for, its end readToEnd when
// it reads to the object's end (its size is not known yet).
func fastReadRange(req *proto.Request) (off, end int64) {
	off = int64(min(req.Offset, readToEnd))
	end = readToEnd
	if req.Length > 0 && req.Length < uint64(readToEnd-off) {
		end = off + int64(req.Length)
	}
	return off, end
}

// askShards asks each of osds (the first positions) at once for its shard's
// meta, and the positions in chunks for their span [from, to) as well,
// with flags (proto.FlagForWrite for a write's reads).
func (s *Server) askShards(ctx context.Context, t *placement.Table, osds []clustermap.OSDID, id clustermap.PGID, name string, from, to int64, chunks []int, flags uint32) []shardReply {
	out := make([]shardReply, len(osds))
	var wg sync.WaitGroup
	for i, osd := range osds {
		if osd == placement.NoOSD {
			out[i].err = errors.New("no OSD holds the position")
			continue
		}
		var n int64
		if slices.Contains(chunks, i) {
			n = to - from
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].meta, out[i].resp, out[i].err = s.askShard(ctx, t, osd, id, name, from, n, flags)
		}()
	}
	wg.Wait()
	return out
}

// decideFast runs pg.DecideShardsPart on the replies of the first
// positions (a position that holds no shard votes "absent"; a position
// peering found lacking the object is stale) and returns what stands, if
// that is final.
func decideFast(k int, p *pgState, osds []clustermap.OSDID, name string, replies []shardReply) (*ecObject, bool) {
	o, copies := shardVotes(p, osds, name, replies)
	if o == nil {
		return nil, false
	}
	plan, ok := pg.DecideShardsPart(k, copies)
	if !ok {
		return nil, false
	}
	o.plan = plan
	for _, i := range plan.Keep {
		if m := o.metas[i]; m != nil && m.Holding() == plan.Holds(i) {
			o.size, o.tomb = int64(m.Size), m.Tombstone
		}
	}
	return o, true
}

// shardVotes turns the positions' answers about name into the votes pg
// decides on (a position that holds no shard votes "absent"; one peering
// found lacking the object is stale), and an object holding their metas;
// nil if a position failed to answer.
func shardVotes(p *pgState, osds []clustermap.OSDID, name string, replies []shardReply) (*ecObject, []pg.ShardCopy) {
	copies := make([]pg.ShardCopy, len(osds))
	o := &ecObject{osds: osds, metas: make([]*pg.ShardMeta, len(osds))}
	for i, r := range replies {
		switch {
		case r.err == nil:
			m := r.meta
			o.metas[i] = m
			copies[i] = m.Copy()
		case errors.Is(r.err, objstore.ErrNotFound):
			copies[i] = pg.ShardCopy{Listed: true}
		default:
			return nil, nil
		}
		copies[i].Stale = p.isMissing(osds[i], name)
	}
	return o, copies
}

// spansWhole says whether every position asked for a span sent exactly
// what its shard holds of it for an object of size bytes (ec.ShardLen): a
// shard longer or shorter than its meta says is read the slow way, which
// rebuilds around it.
func spansWhole(l ec.Layout, size, from, to int64, chunks []int, replies []shardReply) bool {
	for _, i := range chunks {
		want := max(0, min(to, l.ShardLen(size, i))-from)
		if int64(len(replies[i].resp.Data)) != want {
			return false
		}
	}
	return true
}

// assembleInto puts bytes [off, end) of the object into r from the data
// positions' spans: the span's own buffer when the range lies in one chunk
// (r then releases that reply), else one pooled buffer they are copied
// into once.
func assembleInto(r *proto.Response, l ec.Layout, off, end, from int64, replies []shardReply) bool {
	s0, c0, in0 := l.Locate(off)
	s1, c1, _ := l.Locate(end - 1)
	if s0 == s1 && c0 == c1 {
		at := l.ShardOffset(s0, in0) - from
		span := replies[c0].resp
		if at < 0 || at+(end-off) > int64(len(span.Data)) {
			return false
		}
		r.Data, r.Free = span.Data[at:at+(end-off)], span.Release
		if n := int64(len(span.DataSums)); at%proto.Align == 0 && n >= (at+end-off)/proto.Align {
			r.DataSums = span.DataSums[at/proto.Align : (at+end-off)/proto.Align]
		}
		replies[c0].resp = nil
		return true
	}
	spans, sums := make([][]byte, l.K), make([][]uint32, l.K)
	for i := range spans {
		if replies[i].resp != nil {
			spans[i], sums[i] = replies[i].resp.Data, replies[i].resp.DataSums
		}
	}
	buf := bufpool.Get(int(end - off))
	if !l.Assemble(buf, off, from, spans) {
		bufpool.Put(buf)
		return false
	}
	// The spans' block checksums, taken as they arrived (or by the store),
	// spare the reply a pass over its bytes to checksum its frame.
	r.Data, r.Pooled, r.DataSums = buf, buf, l.AssembleSums(off, from, len(buf), proto.Align, sums)
	return true
}
