package osd

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// replicaWait bounds how long a write waits for a failed replica to be
// marked down (its lease to expire) before the client is told to retry.
const replicaWait = 30 * time.Second

// buildTxn turns a client write into an object-store transaction, checking
// preconditions (existence) under the object lock.
// stale says this copy lacks the object's newest state (existence was
// checked on the authoritative copy instead).
// It returns the objects the write leaves in place, which get its version.
func (s *Server) buildTxn(coll string, req *proto.Request, stale bool) (*objstore.Txn, []string, *proto.Response) {
	txn := &objstore.Txn{}
	plan, bad := s.snapTxn(coll, req, txn, stale)
	if bad != nil {
		return nil, nil, bad
	}
	if !plan.replaced {
		if bad := s.addOp(coll, req, txn); bad != nil {
			return nil, nil, bad
		}
	}
	plan.finish(coll, req.Object, txn)
	if err := txn.Validate(); err != nil {
		return nil, nil, s.fail(proto.StatusInvalid, "%v", err)
	}
	return txn, plan.touched, nil
}

// addOp adds req's own change to txn (deletes are planSnaps's: they
// depend on the object's clones).
func (s *Server) addOp(coll string, req *proto.Request, txn *objstore.Txn) *proto.Response {
	exists := func() (bool, *proto.Response) {
		_, err := s.store.Stat(coll, req.Object)
		if errors.Is(err, objstore.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, s.failErr(err)
		}
		return true, nil
	}
	switch req.Op {
	case proto.OpWrite:
		txn.WriteSummed(coll, req.Object, req.Offset, req.Data, req.DataSums)
	case proto.OpPut, proto.OpCreate:
		if req.Flags&proto.FlagExclusive != 0 {
			ok, r := exists()
			if r != nil {
				return r
			}
			if ok {
				return s.fail(proto.StatusExists, "object %q exists", req.Object)
			}
		}
		if req.Op == proto.OpPut {
			txn.PutSummed(coll, req.Object, req.Data, req.DataSums)
		} else {
			txn.Create(coll, req.Object)
		}
	case proto.OpTruncate:
		txn.Truncate(coll, req.Object, req.Offset)
	case proto.OpSetXattr:
		txn.SetXattr(coll, req.Object, req.Key, req.Data)
	case proto.OpRmXattr:
		txn.RmXattr(coll, req.Object, req.Key)
	case proto.OpOmapSet:
		for _, kv := range req.KVs {
			txn.OmapSet(coll, req.Object, kv.Key, kv.Value)
		}
	case proto.OpOmapRm:
		for _, k := range req.Keys {
			txn.OmapRm(coll, req.Object, k)
		}
	case proto.OpOmapRmRange:
		txn.OmapRmRange(coll, req.Object, req.Start, req.End)
	case proto.OpOmapTxn:
		return s.addOmapTxn(coll, req, txn)
	default:
		return s.fail(proto.StatusInvalid, "operation %d is not a write", req.Op)
	}
	return nil
}

// write runs a client write on the primary: order it, apply it here and
// on every other member of the write set in parallel, and answer only when
// every copy that counts is durable.
func (s *Server) write(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	l := s.lock(req.PG, req.Object)
	l.Lock()
	defer l.Unlock()
	stale, bad := s.prepareObject(ctx, p, req)
	if bad != nil {
		return bad
	}
	w, bad := s.planWrite(pool, p, req, stale)
	if bad != nil {
		return bad
	}
	if w.noop {
		return s.ok()
	}
	if bad := s.replicate(ctx, pool, p, req, w); bad != nil {
		return bad
	}
	if req.Op == proto.OpDelete {
		p.clearMissingAll(req.Object, w.interval)
	}
	r := s.ok()
	r.Version = w.ver
	r.Size = uint64(len(req.Data))
	return r
}

// prepareObject brings the object up to date on every member before it is
// written. It says whether this copy stays stale (a delete goes on without
// the copy). The caller holds the object's lock.
func (s *Server) prepareObject(ctx context.Context, p *pgState, req *proto.Request) (stale bool, bad *proto.Response) {
	err := s.ensureObject(ctx, req.PG, p, req.Object, ensureAll)
	switch {
	case err == nil:
		return false, nil
	case req.Op != proto.OpDelete && errors.Is(err, objstore.ErrNoSpace):
		return false, s.fail(proto.StatusNoSpace, "pg %s: %q must first be copied to a member whose disk is full (%v): delete data, add OSDs, or mark the full OSD out", req.PG, req.Object, err)
	case req.Op != proto.OpDelete:
		return false, s.fail(proto.StatusUnavailable, "pg %s: recovering %q before writing it: %v", req.PG, req.Object, err)
	}
	// A delete needs no copy of the object (so it works on a full disk):
	// it leaves every member without it, whatever each had. Only its
	// existence is checked, on the authoritative copy if this one is
	// stale. Clones of a stale copy are not known here: they stay behind
	// as garbage, never as data a reader sees.
	if r := s.checkExistsForDelete(ctx, p, req); r != nil {
		return false, r
	}
	return p.isMissing(s.id, req.Object), nil
}

// writePlan is a client write made ready to replicate: its transaction,
// with the PG version it takes, for the interval and write set it was
// ordered in.
type writePlan struct {
	txn      *objstore.Txn
	ver      uint64
	t        *placement.Table // the map it was planned at: its messages carry that epoch
	interval clustermap.Epoch
	writeSet []clustermap.OSDID
	acting   []clustermap.OSDID
	// noop: nothing to write (see noChange); answered OK as it is.
	noop bool
	// shards, for an erasure-coded PG: each member's own transaction
	// (txn is this OSD's), and the meta its shard gets (with what the
	// member keeps to roll it back: ecrollback.go).
	shards     map[clustermap.OSDID]*objstore.Txn
	shardMetas map[clustermap.OSDID]pg.ShardMeta
	// bufs holds the pooled buffers of a put's shards (ecserve.go).
	bufs *shardBufs
	// stage: the token of a staged put's shards (stage.go); ownStage is
	// this OSD's, which its own transaction puts.
	stage    string
	ownStage *stagedShard
	// partial: the shard writes change part of each shard, which must
	// hold the version they replace (proto.FlagShardPartial).
	partial bool
	// keys: the shard writes change the object's xattrs or omap, which
	// each position keeps to roll back (proto.FlagShardKeys).
	keys bool
	// localApplied: this OSD's part of the write is applied (replicate).
	localApplied bool
	// xorAt: the members whose shard writes are parity deltas to XOR in
	// (proto.FlagShardXor, ecpartialknown.go).
	xorAt []clustermap.OSDID
}

// shardFlags are the proto flags of w's shard write to osd.
func (w *writePlan) shardFlags(osd clustermap.OSDID) uint32 {
	var f uint32
	if w.partial {
		f |= proto.FlagShardPartial
	}
	if w.keys {
		f |= proto.FlagShardKeys
	}
	if slices.Contains(w.xorAt, osd) {
		f |= proto.FlagShardXor
	}
	if w.stage != "" {
		f |= proto.FlagStaged
	}
	return f
}

// txnFor is the transaction member osd applies.
func (w *writePlan) txnFor(osd clustermap.OSDID) *objstore.Txn {
	if w.shards != nil {
		return w.shards[osd]
	}
	return w.txn
}

// planWrite builds the write's transaction, refuses it if a member is full
// or too few copies are up, and gives it the PG's next version.
func (s *Server) planWrite(pool *clustermap.Pool, p *pgState, req *proto.Request, stale bool) (*writePlan, *proto.Response) {
	// A write that waited for the object's lock while the PG began to peer
	// again must not start: built on this copy and sent with the newer
	// map's epoch, it would land on members the new interval has listed
	// (and on an object whose copies that peering may have found to
	// differ). The client sends it again once the PG is active.
	t := s.view.Table()
	if !p.activeFor(t.Acting(pool, req.PG)) {
		return nil, s.fail(proto.StatusUnavailable, "pg %s is peering again; retry", req.PG)
	}
	coll := req.PG.String()
	txn, touched, bad := s.buildTxn(coll, req, stale)
	if bad != nil {
		return nil, bad
	}
	p.mu.Lock()
	w := &writePlan{txn: txn, t: t, interval: p.prim.Epoch, writeSet: p.prim.WriteSet, acting: p.prim.Acting}
	p.mu.Unlock()
	if noChange(req, txn) {
		if len(w.acting) < pool.MinSize {
			return nil, s.belowMinSize(pool, req, w)
		}
		w.noop = true
		return w, nil
	}
	if !freesSpace(req.Op) && !omapTxnFreesSpace(req) {
		if bad := s.refuseFull(req, w.writeSet); bad != nil {
			return nil, bad
		}
	}
	if len(w.acting) < pool.MinSize {
		return nil, s.belowMinSize(pool, req, w)
	}
	w.ver = p.nextVersion()
	for _, name := range touched {
		txn.SetXattr(coll, name, versionXattr, pg.EVersion{Epoch: uint64(w.interval), Version: w.ver}.Encode())
	}
	if !slices.Contains(touched, req.Object) {
		// Its object is gone: the PG keeps the version (pglog.go).
		txn.OmapSet(coll, pgMetaObject, keyDeleteVersion, encodeVersion(w.ver))
	}
	return w, nil
}

// refuseFull refuses a write that adds data when a member of its write set
// is full.
func (s *Server) refuseFull(req *proto.Request, writeSet []clustermap.OSDID) *proto.Response {
	m := s.view.Map()
	for _, o := range writeSet {
		if osd, ok := m.OSD(o); ok && osd.Full {
			return s.fail(proto.StatusNoSpace, "%s is full (over %.0f%% of its disk used): new writes to pg %s are refused until data is deleted or OSDs are added; reads and deletes go on",
				o, clustermap.FullRatio*100, req.PG)
		}
	}
	return nil
}

// belowMinSize refuses a write whose PG has fewer than min_size copies up.
func (s *Server) belowMinSize(pool *clustermap.Pool, req *proto.Request, w *writePlan) *proto.Response {
	return s.fail(proto.StatusUnavailable, "pg %s has %d of %d copies up, fewer than min_size %d: writes wait for an OSD to return",
		req.PG, len(w.acting), pool.Size, pool.MinSize)
}

// replicate applies the write here and on the other members of its write
// set, and returns nil once every one of them has it durable. A member
// that fails is sent it again in the same interval once the map says
// where it stands; a new interval, a member that refuses the write, or
// replicaWait without an answer fail it unacknowledged (the client
// retries). No goroutine it starts outlives it.
func (s *Server) replicate(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, w *writePlan) *proto.Response {
	f, err := s.startFanout(ctx, req, w)
	if err != nil {
		return s.failErr(err)
	}
	defer f.release() // after every path below drained the senders
	if err := s.applyLocal(p, pool, req, w); err != nil {
		f.drain()
		if errors.Is(err, errIntervalChanged) {
			return s.fail(proto.StatusUnavailable, "pg %s changed before the write applied; retry", req.PG)
		}
		if errors.Is(err, errShardVersion) {
			p.markMissing(s.id, req.Object, w.interval)
			return s.fail(proto.StatusUnavailable, "pg %s: %s's shard of %q: %v; it is rebuilt first when the write is sent again", req.PG, s.id, req.Object, err)
		}
		return s.failErr(err)
	}
	w.localApplied = w.txn != nil
	f.collect()
	deadline := time.Now().Add(replicaWait)
	for f.pending > 0 {
		res := <-f.results
		f.pending--
		if res.err == nil && res.resp.Status == proto.StatusOK {
			continue
		}
		if bad := s.replicaFailed(ctx, pool, p, req, w, f, res, deadline); bad != nil {
			f.drain()
			return bad
		}
	}
	return nil
}

// replicaFailed decides what a member's failure means for the write: nil
// if it was sent again (its new answer comes through f.results), else the
// response that fails the write.
func (s *Server) replicaFailed(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, w *writePlan, f *fanout, res replicaResult, deadline time.Time) *proto.Response {
	if res.err == nil && res.resp.Status == proto.StatusPrecondition {
		// A partial shard write found the shard at another version: the
		// position is rebuilt before the write is sent again.
		p.markMissing(res.osd, req.Object, w.interval)
		return s.fail(proto.StatusUnavailable, "member %s: %s; it is rebuilt first when the write is sent again", res.osd, res.resp.Message)
	}
	if res.err == nil && res.resp.Status == proto.StatusNoStage {
		// The position lacks its staged shard and applied nothing: its
		// shard is the one that stood when the write began (ecWriteReady
		// saw to that), so it keeps its vote on which version stands
		// now. The client sends the object whole instead.
		return s.fail(proto.StatusNoStage, "member %s: %s", res.osd, res.resp.Message)
	}
	if res.err == nil {
		switch res.resp.Status {
		case proto.StatusNoSpace, proto.StatusInvalid, proto.StatusIOError:
			// This copy now differs from the others: recovery brings it
			// back in line once it can take writes again.
			p.markMissing(res.osd, req.Object, w.interval)
			return s.fail(res.resp.Status, "replica %s: %s", res.osd, res.resp.Message)
		}
	}
	// The member failed (unreachable, or its store failed and it is
	// stopping) or has another map. Wait for a map in which it is down
	// (lease expired) or whose epoch it accepts.
	epoch := res.epoch
	if res.err == nil && res.resp.Status == proto.StatusWrongEpoch && res.resp.Epoch > epoch {
		s.view.WaitFor(ctx, res.resp.Epoch, epochWait)
	} else if res.err != nil || res.resp.Status == proto.StatusUnavailable {
		s.view.WaitFor(ctx, epoch+1, time.Until(deadline))
	}
	if ctx.Err() != nil || time.Now().After(deadline) {
		return s.fail(proto.StatusUnavailable, "member %s of pg %s did not take the write and was not marked down: %v", res.osd, req.PG, res.errText())
	}
	t := s.view.Table()
	if a := t.Acting(pool, req.PG); !slices.Equal(a, w.acting) || !p.activeIn(w.interval) {
		// A new interval: the PG peers again and the client retries the
		// write there. This attempt is not acknowledged. An acting set
		// that changed and changed back is a new interval too: a peering
		// in between may have listed the members without this write.
		return s.fail(proto.StatusUnavailable, "pg %s changed during the write (member %s failed); retry", req.PG, res.osd)
	}
	f.pending++
	go f.send(t, res.osd)
	return nil
}

// shareTxn encodes txn once for every replica (rpc.ShareParts): its large
// data that lies in the client's request frame is sent on from there, not
// copied, and the handler keeps that frame until the last replica's frame is
// written (a replica that times out may still have one queued when the
// write returns). The data's block checksums, taken when it arrived, go
// into the frame's sum instead of a pass over it. With bufs (an
// erasure-coded put's shards, coded into pooled buffers that nothing
// changes), large data is sent from where it lies too, and the shared
// encoding holds bufs until its last frame is written.
func (s *Server) shareTxn(r *proto.Request, req *proto.Request, txn *objstore.Txn, bufs *shardBufs) (*rpc.Shared, error) {
	kept := false
	buf, tparts := txn.AppendMarshalParts(bufpool.Get(txn.Size())[:0], func(data []byte) bool {
		if bufs != nil {
			return true
		}
		if bufpool.Contains(req.Frame, data) {
			kept = true
			return true
		}
		return false
	})
	parts := make([]rpc.Part, len(tparts))
	for i, p := range tparts {
		parts[i] = rpc.Part{Bytes: p.Bytes, Sums: p.Sums}
	}
	frame := req.Frame
	if kept {
		req.Kept = true
	}
	if bufs != nil {
		bufs.hold()
	}
	return rpc.ShareParts(r, parts, func() {
		bufpool.Put(buf)
		if kept {
			bufpool.Put(frame)
		}
		if bufs != nil {
			bufs.done()
		}
	})
}

// checkExistsForDelete answers NotFound for a delete of an object the PG
// does not hold, asking the authoritative copy if this one is stale.
func (s *Server) checkExistsForDelete(ctx context.Context, p *pgState, req *proto.Request) *proto.Response {
	if !p.isMissing(s.id, req.Object) {
		return nil // buildTxn checks the local copy
	}
	p.mu.Lock()
	auth := p.prim.Auth
	p.mu.Unlock()
	st := *req
	st.Op, st.Data = proto.OpStat, nil
	r := s.readFrom(ctx, p, &st, errors.New("this copy is stale"))
	switch {
	case r.Status == proto.StatusOK:
		return nil
	case r.Status == proto.StatusNotFound:
		return s.fail(proto.StatusNotFound, "object %q does not exist", req.Object)
	}
	return s.fail(proto.StatusUnavailable, "pg %s: checking %q on %s before deleting it: %s", req.PG, req.Object, auth, r.Message)
}

// peerUp reports whether the newest map has osd up: a broken connection to
// one marked down is not dialled again (a frozen OSD would accept the TCP
// connection and hold the call until the dial timeout).
func (s *Server) peerUp(osd clustermap.OSDID) bool {
	o, ok := s.view.Map().OSD(osd)
	return ok && o.Up
}

// isRefused reports whether err is a refused connection: nothing listens
// at the address.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// suspect ends the liveness lease of an OSD whose address refuses
// connections, once per OSD and map epoch, so the keeper marks it down now.
func (s *Server) suspect(osd clustermap.OSDID, addr string) {
	e := s.view.Epoch()
	s.suspectMu.Lock()
	if s.suspected[osd] >= e {
		s.suspectMu.Unlock()
		return
	}
	s.suspected[osd] = e
	s.suspectMu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ok, err := s.meta.ExpireIfAt(ctx, osd, addr); ok {
			s.logf("%s: %s refuses connections at %s: ended its lease so it is marked down now", s.id, osd, addr)
		} else if err != nil {
			s.logf("%s: %s refuses connections, but its lease could not be ended: %v", s.id, osd, err)
		}
	}()
}

// freesSpace reports whether an op only removes data, so it is allowed on
// a full OSD.
func freesSpace(op proto.Op) bool {
	switch op {
	case proto.OpDelete, proto.OpRmXattr, proto.OpOmapRm, proto.OpOmapRmRange, proto.OpSnapTrim:
		return true
	}
	return false
}

var errIntervalChanged = errors.New("the PG's acting set changed")

// fenceReplica takes the fence of req's PG for a change its primary sent,
// and refuses the change if a newer map arrived while it waited: a newer
// primary may already have listed this copy, so it must not change behind
// it. unlock is never nil; call it also when refused.
func (s *Server) fenceReplica(req *proto.Request) (p *pgState, unlock func(), bad *proto.Response) {
	p, err := s.pg(req.PG)
	if err != nil {
		return nil, func() {}, s.failErr(err)
	}
	p.fence.RLock()
	if e := s.view.Epoch(); pg.Admit(req.Epoch, e) == pg.Refuse {
		return p, p.fence.RUnlock, s.fail(proto.StatusWrongEpoch, "sender has map epoch %d, %s has %d", req.Epoch, s.id, e)
	}
	return p, p.fence.RUnlock, nil
}

// applyLocal applies a client write to the primary's own copy, unless the
// acting set changed since the PG went active: then a newer primary may have
// listed this copy already, and the write must not land behind its back.
func (s *Server) applyLocal(p *pgState, pool *clustermap.Pool, req *proto.Request, w *writePlan) error {
	p.fence.RLock()
	defer p.fence.RUnlock()
	if !slices.Equal(s.view.Table().Acting(pool, req.PG), w.acting) {
		return errIntervalChanged
	}
	if m, ok := w.shardMetas[s.id]; ok {
		return s.applyShardWrite(shardColl(req.PG, m.Position), req.Object, m, w.txn, w.shardFlags(s.id))
	}
	if w.shards != nil {
		return nil // a partial write that skips the primary's position
	}
	return s.apply(w.txn)
}

// applyReplica applies a transaction the primary of a PG sent us: a client
// write at PGVersion, or a recovery copy (PGVersion 0).
func (s *Server) applyReplica(t *placement.Table, req *proto.Request) *proto.Response {
	pool, ok := t.Map().Pool(req.PG.Pool)
	if !ok {
		return s.fail(proto.StatusNotFound, "pool %d does not exist", req.PG.Pool)
	}
	// The primary sends to its write set: the acting set and, while it
	// recovers, the authoritative copy outside it.
	acting := t.Acting(pool, req.PG)
	if len(acting) > 0 && acting[0] == s.id {
		return s.fail(proto.StatusWrongEpoch, "%s is the primary of pg %s at epoch %d, not a replica", s.id, req.PG, t.Map().Epoch)
	}
	if req.Flags&proto.FlagStaged != 0 && (req.Flags&proto.FlagShardWrite == 0 || !pool.Erasure()) {
		return s.fail(proto.StatusInvalid, "replicated transaction of %q: staged shards go with shard writes of erasure-coded pools only", req.Object)
	}
	txn, err := objstore.UnmarshalTxnSummed(req.Txn, req.TxnSums)
	if err != nil {
		return s.fail(proto.StatusInvalid, "replicated transaction: %v", err)
	}
	if err := txn.Validate(); err != nil {
		return s.fail(proto.StatusInvalid, "replicated transaction: %v", err)
	}
	if req.Flags&proto.FlagBackground != 0 {
		if err := s.admitBackground(int64(len(req.Txn))); err != nil {
			return s.fail(proto.StatusNoSpace, "%v", err)
		}
	}
	p, unlock, bad := s.fenceReplica(req)
	defer unlock()
	if bad != nil {
		return bad
	}
	switch {
	case req.Flags&proto.FlagShardWrite != 0:
		if bad := s.applyShardReplica(t, pool, req, txn); bad != nil {
			return bad
		}
	case pool.Erasure():
		// A shard rebuilt by recovery: not between a trim's read of the
		// shard and its transaction.
		coll, bad := s.collFor(t, req.PG)
		if bad != nil {
			return bad
		}
		unlock := s.shards.lockAll(s.seed, coll, []string{req.Object})
		err := s.apply(txn)
		unlock()
		if err != nil {
			return s.failErr(err)
		}
	default:
		if err := s.apply(txn); err != nil {
			return s.failErr(err)
		}
	}
	p.noteVersion(req.PGVersion)
	return s.ok()
}

// applyShardReplica applies a client write to this OSD's shard of an
// erasure-coded object, keeping what it needs to roll back.
func (s *Server) applyShardReplica(t *placement.Table, pool *clustermap.Pool, req *proto.Request, txn *objstore.Txn) *proto.Response {
	coll, bad := s.collFor(t, req.PG)
	if bad != nil {
		return bad
	}
	_, pos, _ := parseShardColl(coll)
	if len(req.KVs) != 1 || string(req.KVs[0].Key) != shardMetaXattr {
		return s.fail(proto.StatusInvalid, "shard write of %q: no shard meta", req.Object)
	}
	meta, err := pg.DecodeShardMeta(req.KVs[0].Value)
	if err != nil || meta.Position != pos {
		return s.fail(proto.StatusInvalid, "shard write of %q: its meta is malformed or names another position than %d", req.Object, pos)
	}
	if req.Flags&proto.FlagStaged != 0 {
		sh, bad := s.takeStaged(pool, req.Key, req.PG, req.Object, meta)
		if bad != nil {
			return bad
		}
		defer sh.release() // the store keeps no data past Apply
		txn.Prepend(stagedPut(coll, req.Object, sh))
	}
	err = s.applyShardWrite(coll, req.Object, meta, txn, req.Flags&(proto.FlagShardPartial|proto.FlagShardKeys|proto.FlagShardXor))
	if errors.Is(err, errShardVersion) {
		return s.fail(proto.StatusPrecondition, "%s: shard %d of %q: %v", s.id, pos, req.Object, err)
	}
	if err != nil {
		return s.failErr(err)
	}
	return nil
}
