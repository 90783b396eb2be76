package osd

import (
	"context"
	"fmt"
	"slices"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// fanout carries one client write to the other members of its write set.
// The transaction is encoded once for all of them (shareTxn); the first
// sends go out from the handler's goroutine before the primary's own apply,
// so the replicas start at once (rpc's inline.go says why that matters),
// and their answers are collected after it. A member sent the write again
// after a map change gets it encoded afresh from its own goroutine. A
// write to an erasure-coded PG gives each member its own transaction (its
// shard): each is then encoded for its member alone.
type fanout struct {
	s       *Server
	ctx     context.Context
	req     *proto.Request
	w       *writePlan
	shared  map[clustermap.OSDID]*rpc.Shared // by member; one value for all of a replicated write
	sharedT *placement.Table
	results chan replicaResult
	pending int // answers not yet read from results
	first   []startedCall
}

type replicaResult struct {
	osd   clustermap.OSDID
	epoch clustermap.Epoch // of the map the write was sent with
	resp  *proto.Response
	err   error
}

func (r replicaResult) errText() string {
	if r.err != nil {
		return r.err.Error()
	}
	return r.resp.Message
}

type startedCall struct {
	osd  clustermap.OSDID
	addr string
	call rpc.Pending
}

// startFanout encodes the write for the replicas and starts sending it.
func (s *Server) startFanout(ctx context.Context, req *proto.Request, w *writePlan) (*fanout, error) {
	t := w.t // a member with a newer map refuses it; replicaFailed decides then
	f := &fanout{s: s, ctx: ctx, req: req, w: w, sharedT: t, results: make(chan replicaResult, len(w.writeSet))}
	if !slices.ContainsFunc(w.writeSet, func(o clustermap.OSDID) bool { return o != s.id }) {
		return f, nil
	}
	f.shared = make(map[clustermap.OSDID]*rpc.Shared, len(w.writeSet))
	var one *rpc.Shared
	for _, r := range w.writeSet {
		if r == s.id {
			continue
		}
		sh := one
		if sh == nil {
			var err error
			if sh, err = s.shareTxn(f.request(t, r, nil), req, w.txnFor(r), w.bufs); err != nil {
				f.drain()
				f.release()
				return nil, err
			}
			if w.shards == nil {
				one = sh
			}
		}
		f.shared[r] = sh
		f.pending++
		o, ok := t.Map().OSD(r)
		if !ok {
			f.results <- replicaResult{osd: r, epoch: t.Map().Epoch, err: fmt.Errorf("%s not in map", r)}
			continue
		}
		f.first = append(f.first, startedCall{r, o.Addr, s.peers.StartShared(ctx, o.Addr, sh)})
	}
	return f, nil
}

// request is the OpReplicate of this write to osd at t's epoch.
func (f *fanout) request(t *placement.Table, osd clustermap.OSDID, txn []byte) *proto.Request {
	r := &proto.Request{Op: proto.OpReplicate, Epoch: t.Map().Epoch, PG: f.req.PG, Object: f.req.Object, PGVersion: f.w.ver, Txn: txn}
	if m, ok := f.w.shardMetas[osd]; ok {
		r.Flags |= proto.FlagShardWrite | f.w.shardFlags(osd)
		r.KVs = []proto.KV{{Key: []byte(shardMetaXattr), Value: m.Encode()}}
		r.Key = f.w.stage
	}
	return r
}

// collect waits for the first sends' answers and queues them as results.
func (f *fanout) collect() {
	for _, c := range f.first {
		resp, err := c.call.Wait(f.ctx)
		resp, err = f.s.retryBroken(f.ctx, c.osd, c.addr, resp, err, func() (*proto.Response, error) {
			return f.s.peers.CallShared(f.ctx, c.addr, f.shared[c.osd])
		})
		f.results <- replicaResult{osd: c.osd, epoch: f.sharedT.Map().Epoch, resp: resp, err: err}
	}
	f.first = nil
}

// send sends the write to osd again, at t's map, and queues its answer.
func (f *fanout) send(t *placement.Table, osd clustermap.OSDID) {
	o, ok := t.Map().OSD(osd)
	if !ok {
		f.results <- replicaResult{osd: osd, epoch: t.Map().Epoch, err: fmt.Errorf("%s not in map", osd)}
		return
	}
	call := func() (*proto.Response, error) {
		if sh := f.shared[osd]; t == f.sharedT && sh != nil {
			return f.s.peers.CallShared(f.ctx, o.Addr, sh)
		}
		// After a map change: encoded again, and copied into the frame
		// (the request's bytes are ours only until the write returns).
		return f.s.peers.Call(f.ctx, o.Addr, f.request(t, osd, f.w.txnFor(osd).Marshal()))
	}
	resp, err := call()
	resp, err = f.s.retryBroken(f.ctx, osd, o.Addr, resp, err, call)
	f.results <- replicaResult{osd: osd, epoch: t.Map().Epoch, resp: resp, err: err}
}

// drain waits for every answer still due, so no sender outlives the write.
func (f *fanout) drain() {
	f.collect()
	for ; f.pending > 0; f.pending-- {
		<-f.results
	}
}

// release hands the shared encoding back once every send is done.
func (f *fanout) release() {
	var done []*rpc.Shared
	for _, sh := range f.shared {
		if !slices.Contains(done, sh) {
			sh.Release()
			done = append(done, sh)
		}
	}
}

// retryBroken calls again once when a call to a member failed because its
// connection broke (the member still up in the newest map: a frozen OSD
// marked down would only hold the new dial). A refused connection means
// its process is gone: its lease is ended now rather than waited for.
func (s *Server) retryBroken(ctx context.Context, osd clustermap.OSDID, addr string, resp *proto.Response, err error, again func() (*proto.Response, error)) (*proto.Response, error) {
	if err != nil && !isRefused(err) && ctx.Err() == nil && s.peerUp(osd) {
		resp, err = again()
	}
	if isRefused(err) {
		s.suspect(osd, addr)
	}
	return resp, err
}
