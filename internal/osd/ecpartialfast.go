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

// A partial write in one round trip before its shard writes, when it is
// small: the primary asks every position at once for its shard's meta
// and its chunk of the one stripe the write does not rewrite whole. If
// every position answers, none is stale and all hold one version, that
// version stands (every position votes for it) and every position holds
// it, as ecStanding would find; the chunks are then all the write reads.
// Anything else (a hole in the acting set, a position down, failing, at
// another version or stale, a write touching two stripes it does not
// cover) takes ecStanding and readStripes: two round trips, with the
// rebuilds they do.

// partialStripe returns the one stripe req reads (ok false if it may read
// two), and whether it reads one at all.
func partialStripe(l ec.Layout, req *proto.Request) (stripe int64, reads, ok bool) {
	sb := l.StripeBytes()
	lo := int64(req.Offset)
	if req.Op == proto.OpTruncate {
		return lo / sb, lo%sb != 0, true
	}
	if len(req.Data) == 0 {
		return 0, false, true
	}
	hi := lo + int64(len(req.Data))
	first, last := lo/sb, (hi-1)/sb
	headPart, tailPart := lo%sb != 0 || hi < (first+1)*sb, hi%sb != 0
	switch {
	case first == last:
		return first, headPart, true
	case headPart && tailPart:
		return 0, false, false
	case headPart:
		return first, true, true
	case tailPart:
		return last, true, true
	}
	return 0, false, true
}

// partialFast decides req's object and reads its stripe in one round
// trip, or returns nil if the answers do not settle it.
func (s *Server) partialFast(ctx context.Context, t *placement.Table, pool *clustermap.Pool, l ec.Layout, p *pgState, req *proto.Request) (*ecObject, *stripeReads) {
	stripe, reads, ok := partialStripe(l, req)
	_, osds := t.Positions(pool, req.PG)
	if !ok || slices.Contains(osds, placement.NoOSD) {
		return nil, nil
	}
	var from, to int64
	var all []int
	if reads {
		from, to = fastSpan(l, req, stripe)
		for i := range osds {
			all = append(all, i)
		}
	}
	replies := s.askShards(ctx, t, osds, req.PG, req.Object, from, to, all, proto.FlagForWrite)
	defer func() {
		for i := range replies {
			replies[i].release()
		}
	}()
	o := decideAll(l.K, p, osds, req.Object, replies)
	if o == nil {
		return nil, nil
	}
	o.t = t
	r := &stripeReads{unit: int64(l.Unit), by: map[int64]*shardReads{}}
	if !reads {
		return o, r
	}
	rd := &shardReads{s: s, ctx: ctx, o: o, l: l, id: req.PG, name: req.Object, from: from, to: to, flags: proto.FlagForWrite, bufs: map[int][]byte{}, errs: map[int]error{}}
	for i := range osds {
		want := max(0, min(to, l.ShardLen(o.sizeNow(), i))-from)
		var data []byte
		if replies[i].resp != nil {
			data = replies[i].resp.Data
		}
		if int64(len(data)) != want {
			return nil, nil // a shard longer or shorter than its meta says
		}
		buf := make([]byte, to-from)
		copy(buf, data)
		rd.bufs[i] = buf
	}
	r.by[stripe] = rd
	return o, r
}

// fastSpan is the span of each shard the fast path reads of stripe: as
// stripeSpan for a write (planned as if the object were empty, which makes
// any stripe it covers in part a delta; where the object makes it a
// reread, the whole chunks are fetched then), the whole chunk for a
// truncate.
func fastSpan(l ec.Layout, req *proto.Request, stripe int64) (from, to int64) {
	if req.Op != proto.OpTruncate {
		for _, w := range l.Plan(0, int64(req.Offset), len(req.Data)) {
			if w.Stripe == stripe {
				return stripeSpan(l, w)
			}
		}
	}
	return stripe * int64(l.Unit), (stripe + 1) * int64(l.Unit)
}

// decideAll decides an object from every position's answer: nil unless
// each answered (a shard, or none), none is stale, and all hold the
// version that stands.
func decideAll(k int, p *pgState, osds []clustermap.OSDID, name string, replies []shardReply) *ecObject {
	o, copies := shardVotes(p, osds, name, replies)
	if o == nil || slices.ContainsFunc(copies, func(c pg.ShardCopy) bool { return c.Stale }) {
		return nil
	}
	o.plan = pg.DecideShards(k, copies)
	if o.plan.Unfound || len(o.plan.Keep) != len(osds) {
		return nil
	}
	found := o.plan.Ver == (pg.EVersion{})
	for i, m := range o.metas {
		if m != nil && m.Holding() == o.plan.Holds(i) {
			o.size, o.tomb, found = int64(m.Size), m.Tombstone, true
		}
	}
	if !found || len(o.lagging()) > 0 {
		return nil
	}
	return o
}
