package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Reading an erasure-coded object from its positions, without its
// primary: the primary would gather the same spans from the same
// positions and relay them, so each byte crosses the network once
// instead of twice. The client asks every position of the PG at once for
// its shard's meta (proto.FlagSettled: meta and bytes read under the
// shard's lock), and the data positions the range lies in for their span
// as well. It serves the read only if all K+M answer with the same
// version, none able to roll it back and none a tombstone
// (pg.DecideSettled); the PG's primary, one of them, answers only while
// the PG is active and clean (only peering knows that the positions hold
// every acknowledged write):
//
//   - take the earliest answer: no position had applied a newer write
//     then (it would have answered with it), and a write is acknowledged
//     only once min_size positions applied it, so none was acknowledged;
//     the read takes effect at that moment, on the version every position
//     held;
//   - a version no position can roll back was complete on all of them, so
//     peering never undoes it.
//
// Anything else (a position down or lacking the object, another version,
// a write not yet trimmed, bytes failing their checksums) and the read
// goes to the primary, which decides, rebuilds and repairs.

// settledWait bounds how long a read waits for the positions before it
// asks the primary instead (which has its own view of a slow position).
const settledWait = 5 * time.Second

// ReadSettledPieces is ReadAtPooled that, in an erasure-coded pool, reads
// the positions itself when they all agree (see above), and else asks the
// primary. It pays off for ranges over several data chunks of objects read
// much more often than written (S3's data stripes, written once); a range
// in one chunk, a replicated pool or a snapshot is read as ReadAtPooled
// reads it. The data comes in pieces to send one after another: views of
// the positions' replies, one a chunk, where the pool's chunks are at least
// MinPiece bytes (so a caller writing them out saves a copy of every byte
// at the price of a write a chunk); else one piece.
func (p *Pool) ReadSettledPieces(ctx context.Context, name string, off, length uint64) (pieces [][]byte, size uint64, release func(), err error) {
	whole := func() ([][]byte, uint64, func(), error) {
		data, size, release, err := p.ReadAtPooled(ctx, name, off, length)
		return [][]byte{data}, size, release, err
	}
	if length == 0 || length > MaxChunk || p.snap != 0 || proto.ValidateObjectName(name) != nil {
		return whole()
	}
	t := p.c.view.Table()
	pool, ok := t.Map().Pool(p.id)
	if !ok || !pool.Erasure() || off >= 1<<62 || len(ec.LayoutOf(*pool.EC).DataChunks(int64(off), int64(off+length))) < 2 {
		// A range in one chunk: the primary serves it in one round trip
		// to one position (often itself), where this would ask them all.
		return whole()
	}
	dctx, cancel := context.WithTimeout(ctx, settledWait)
	defer cancel()
	pieces, size, release, ok = p.readPositions(dctx, t, pool, name, int64(off), int64(off+length))
	if ok {
		return pieces, size, release, nil
	}
	return whole()
}

// MinPiece is the smallest chunk ReadSettledPieces hands out as a piece of
// its own: below it, a write a chunk costs more than copying the chunks
// into one buffer.
const MinPiece = 64 << 10

// positionReply is one position's answer: its shard's meta and span.
type positionReply struct {
	meta pg.ShardMeta
	resp *proto.Response
	err  error
}

// readPositions reads bytes [off, end) of name from the positions of its
// PG, in pieces (ReadSettledPieces); ok is false when their answers do not
// settle the read.
func (p *Pool) readPositions(ctx context.Context, t *placement.Table, pool *clustermap.Pool, name string, off, end int64) ([][]byte, uint64, func(), bool) {
	l := ec.LayoutOf(*pool.EC)
	id, _ := t.Locate(pool, name)
	_, osds := t.Positions(pool, id)
	if len(osds) != l.K+l.M {
		return nil, 0, nil, false
	}
	from, to := l.Span(off, end)
	replies := p.askPositions(ctx, t, id, osds, name, from, to, l.DataChunks(off, end))
	releaseAll := func() {
		for _, r := range replies {
			if r.resp != nil {
				r.resp.Release()
			}
		}
	}
	size, ok := agreed(replies)
	end = min(end, int64(size))
	if !ok || end <= off {
		releaseAll()
		return nil, size, func() {}, ok
	}
	spans := make([][]byte, l.K)
	for i := range spans {
		if replies[i].resp != nil {
			spans[i] = replies[i].resp.Data
		}
	}
	for _, i := range l.DataChunks(off, end) {
		if int64(len(spans[i])) != max(0, min(to, l.ShardLen(int64(size), i))-from) {
			releaseAll()
			return nil, 0, nil, false // the shard is not as long as its meta says
		}
	}
	if l.Unit >= MinPiece {
		if pieces, ok := l.Pieces(off, end, from, spans); ok {
			return pieces, size, releaseAll, true
		}
		releaseAll()
		return nil, 0, nil, false
	}
	defer releaseAll()
	buf := bufpool.Get(int(end - off))
	if !l.Assemble(buf, off, from, spans) {
		bufpool.Put(buf)
		return nil, 0, nil, false
	}
	return [][]byte{buf}, size, func() { bufpool.Put(buf) }, true
}

// askPositions asks every position at once for its shard's meta, and
// those in chunks for bytes [from, to) of their shard as well.
func (p *Pool) askPositions(ctx context.Context, t *placement.Table, id clustermap.PGID, osds []clustermap.OSDID, name string, from, to int64, chunks []int) []positionReply {
	out := make([]positionReply, len(osds))
	var wg sync.WaitGroup
	for i, osd := range osds {
		o, ok := t.Map().OSD(osd)
		if osd == placement.NoOSD || !ok || !o.Up {
			out[i].err = fmt.Errorf("position %d has no OSD up", i)
			continue
		}
		req := &proto.Request{Op: proto.OpReadReplica, Flags: proto.FlagSettled, Epoch: t.Map().Epoch, PG: id, Object: name, Offset: uint64(from)}
		for _, c := range chunks {
			if c == i {
				req.Length = uint64(to - from)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = p.askPosition(ctx, o.Addr, i, req)
		}()
	}
	wg.Wait()
	return out
}

// askPosition sends req to the OSD at addr, which holds position i.
func (p *Pool) askPosition(ctx context.Context, addr string, i int, req *proto.Request) positionReply {
	resp, err := p.c.peers.Call(ctx, addr, req)
	switch {
	case err != nil:
		return positionReply{err: err}
	case resp.Status != proto.StatusOK || len(resp.KVs) != 1:
		resp.Release()
		return positionReply{err: fmt.Errorf("position %d: %s %s", i, resp.Status, resp.Message)}
	}
	meta, err := pg.DecodeShardMeta(resp.KVs[0].Value)
	if err == nil && meta.Position != i {
		err = errors.New("the shard's meta names another position")
	}
	return positionReply{meta: meta, resp: resp, err: err}
}

// agreed decides, with pg.DecideSettled, whether the positions' answers
// let the client serve the read, and returns the object's size.
func agreed(replies []positionReply) (uint64, bool) {
	shards := make([]pg.ShardCopy, len(replies))
	for i, r := range replies {
		m := r.meta
		shards[i] = m.Copy()
		shards[i].Listed = r.err == nil
		if r.err == nil && m.Size != replies[0].meta.Size {
			return 0, false
		}
	}
	if _, ok := pg.DecideSettled(shards); !ok {
		return 0, false
	}
	return replies[0].meta.Size, true
}
