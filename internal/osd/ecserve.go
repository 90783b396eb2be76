package osd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// The primary's side of erasure-coded pools: whole-object writes (put,
// delete), writes at an offset and truncates (ecpartial.go), creates and
// xattr and omap changes (eckeys.go), and reads (whole, ranges, stat,
// listing, xattrs and omap). Every other op is refused by name
// (refuseEC) rather than run on one shard as if it were the object.

// refuseEC refuses the requests erasure-coded pools do not serve yet.
func (s *Server) refuseEC(pool *clustermap.Pool, req *proto.Request) *proto.Response {
	switch req.Op {
	case proto.OpPut, proto.OpWrite, proto.OpTruncate, proto.OpDelete, proto.OpRead, proto.OpStat, proto.OpList, proto.OpScrub,
		proto.OpSnaps, proto.OpSnapTrim:
		return nil
	}
	if isECKeysWrite(req.Op) || isECKeysRead(req.Op) {
		return nil
	}
	return s.fail(proto.StatusInvalid, "pool %q is erasure-coded (%s): %s refused: erasure-coded pools do not serve it yet", pool.Name, pool.EC, req.Op)
}

// serveEC runs an op refuseEC let through, on the primary of an active PG.
func (s *Server) serveEC(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	if req.Op == proto.OpList {
		t := s.view.Table()
		coll, bad := s.collFor(t, req.PG)
		if bad != nil {
			return bad
		}
		return s.listShards(coll, req)
	}
	c, err := s.codecOf(pool)
	if err != nil {
		return s.fail(proto.StatusInvalid, "%v", err)
	}
	if r, handled := s.serveECSnap(ctx, pool, c, p, req); handled {
		return r
	}
	l := s.lock(req.PG, req.Object)
	switch req.Op {
	case proto.OpPut, proto.OpDelete:
		l.Lock()
		defer l.Unlock()
		return s.ecWrite(ctx, pool, c, p, req)
	case proto.OpWrite, proto.OpTruncate:
		l.Lock()
		defer l.Unlock()
		return s.ecPartialWrite(ctx, pool, c, p, req)
	}
	if isECKeysWrite(req.Op) {
		l.Lock()
		defer l.Unlock()
		return s.ecKeysWrite(ctx, pool, p, req)
	}
	l.RLock()
	defer l.RUnlock()
	if isECKeysRead(req.Op) {
		return s.ecKeysRead(ctx, pool, p, req)
	}
	return s.ecRead(ctx, pool, c, p, req)
}

// ecObject is what the primary learned of an object's shards at t: the
// OSD of each position of the acting set (NoOSD in a hole), each one's
// meta (nil: it holds no shard, or did not answer), and which version
// stands (pg.DecideShards).
type ecObject struct {
	t     *placement.Table
	osds  []clustermap.OSDID
	metas []*pg.ShardMeta
	plan  pg.ShardPlan
	size  int64
	tomb  bool // the version that stands is a delete's tombstone
}

// ecLookup asks every position of the acting set for its shard's meta,
// and decides which version stands as peering does, rollback state
// included: a position whose newest write can roll back to that version
// serves the shard it kept (fetch), so a read never serves a version that
// does not stand. A position peering found lacking the object (p's
// missing sets) is stale for it: no vote, never read. An object peering
// found unfound is not served.
func (s *Server) ecLookup(ctx context.Context, pool *clustermap.Pool, p *pgState, id clustermap.PGID, name string) (*ecObject, *proto.Response) {
	if p.isUnfound(name) {
		return nil, s.fail(proto.StatusUnavailable, "pg %s: object %q is unfound: no version of it is on %d positions that hold every write; it is not served until they return", id, name, pool.EC.K)
	}
	t := s.view.Table()
	_, osds := t.Positions(pool, id)
	o := &ecObject{t: t, osds: osds, metas: make([]*pg.ShardMeta, len(osds))}
	copies := make([]pg.ShardCopy, len(osds))
	var wg sync.WaitGroup
	for i, osd := range osds {
		if osd == placement.NoOSD {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			meta, _, err := s.readShardFrom(ctx, t, osd, id, name, 0, 0, 0)
			switch {
			case err == nil:
				o.metas[i] = meta
				copies[i] = meta.Copy()
			case errors.Is(err, objstore.ErrNotFound):
				copies[i] = pg.ShardCopy{Listed: true}
			}
			copies[i].Stale = p.isMissing(osd, name)
		}()
	}
	wg.Wait()
	o.plan = pg.DecideShards(pool.EC.K, copies)
	if o.plan.Unfound {
		return nil, s.fail(proto.StatusUnavailable, "pg %s: object %q: no version of it is on %d shards that answer (%d of %d positions answered); it is not served until enough of them return",
			id, name, pool.EC.K, len(copies)-len(o.plan.Missing), len(copies))
	}
	if err := s.standingMeta(ctx, o, id, name); err != nil {
		return nil, s.fail(proto.StatusUnavailable, "pg %s: object %q: %v", id, name, err)
	}
	return o, nil
}

// standingMeta fills in the size of the version that stands and whether
// it is a tombstone, from a position that holds it or one whose newest
// write rolls back to it.
func (s *Server) standingMeta(ctx context.Context, o *ecObject, id clustermap.PGID, name string) error {
	if o.plan.Ver == (pg.EVersion{}) {
		return nil
	}
	for _, i := range o.plan.Keep {
		// A position a partial write skipped holds an older version's
		// shard: of the same size, as such writes never change it.
		if m := o.metas[i]; m != nil && m.Holding() == o.plan.Holds(i) {
			o.size, o.tomb = int64(m.Size), m.Tombstone
			return nil
		}
	}
	if len(o.plan.Keep) > 0 {
		o.tomb = true // only absent shards hold it: a delete's version
		return nil
	}
	var errs []error
	for _, i := range o.plan.RollBack {
		m, _, err := s.readShardFrom(ctx, o.t, o.osds[i], id, name, 0, 0, proto.FlagPrevShard)
		if err == nil {
			o.size, o.tomb = int64(m.Size), m.Tombstone
			return nil
		}
		errs = append(errs, fmt.Errorf("position %d: %w", i, err))
	}
	return fmt.Errorf("the shards of version %s it keeps to roll back to cannot be read: %w", o.plan.Ver, errors.Join(errs...))
}

// exists says whether the object stands (a version other than "absent",
// and not a delete's tombstone).
func (o *ecObject) exists() bool { return o.plan.Ver != pg.EVersion{} && !o.tomb }

// source says how position i serves the version that stands: its shard
// (flags 0) or the one it kept to roll back to (proto.FlagPrevShard);
// false if it does not hold that version.
func (o *ecObject) source(i int) (uint32, bool) {
	switch {
	case slices.Contains(o.plan.Keep, i) && o.metas[i] != nil:
		return 0, true
	case slices.Contains(o.plan.RollBack, i):
		return proto.FlagPrevShard, true
	}
	return 0, false
}

// errShardNotFound: the position holds no shard of the object.
var errShardNotFound = fmt.Errorf("shard: %w", objstore.ErrNotFound)

// shardError is a position's refusal to give its shard, with its status:
// StatusCorrupt is a shard failing its checksums, which is reported.
type shardError struct {
	osd    clustermap.OSDID
	status proto.Status
	msg    string
}

func (e *shardError) Error() string { return fmt.Sprintf("%s: %s: %s", e.osd, e.status, e.msg) }

// readShardFrom reads n bytes at off of osd's shard of an object (none if
// n is 0) with its meta; with flags proto.FlagPrevShard, of the shard its
// newest write rolls back to. A position that holds no such shard
// answers an error matching objstore.ErrNotFound. The bytes are the
// caller's to keep.
func (s *Server) readShardFrom(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, name string, off, n int64, flags uint32) (*pg.ShardMeta, []byte, error) {
	meta, resp, err := s.askShard(ctx, t, osd, id, name, off, n, flags)
	if err != nil {
		return nil, nil, err
	}
	data := resp.Data
	if resp.Free != nil {
		data = bytes.Clone(data) // a local read's, which may be the read cache's
		resp.Release()
	}
	return meta, data, nil
}

// askShard is readShardFrom that leaves the bytes in the reply, whose
// Release hands them back once the caller is done with them.
func (s *Server) askShard(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, name string, off, n int64, flags uint32) (*pg.ShardMeta, *proto.Response, error) {
	req := &proto.Request{Op: proto.OpReadReplica, Flags: flags, Epoch: t.Map().Epoch, PG: id, Object: name, Offset: uint64(off), Length: uint64(n)}
	return s.askShardReq(ctx, t, osd, req)
}

// askShardReq is askShard for a request the caller made.
func (s *Server) askShardReq(ctx context.Context, t *placement.Table, osd clustermap.OSDID, req *proto.Request) (*pg.ShardMeta, *proto.Response, error) {
	var resp *proto.Response
	if osd == s.id {
		resp = s.readShard(t, req)
	} else {
		o, ok := t.Map().OSD(osd)
		if !ok || !s.peerUp(osd) {
			return nil, nil, fmt.Errorf("%s is down", osd)
		}
		var err error
		if resp, err = s.peers.Call(ctx, o.Addr, req); err != nil {
			if isRefused(err) {
				s.suspect(osd, o.Addr)
			}
			return nil, nil, fmt.Errorf("%s: %w", osd, err)
		}
	}
	var err error
	switch {
	case resp.Status == proto.StatusNotFound:
		err = errShardNotFound
	case resp.Status != proto.StatusOK:
		err = &shardError{osd: osd, status: resp.Status, msg: resp.Message}
	case len(resp.KVs) != 1:
		err = fmt.Errorf("%s sent no shard meta", osd)
	}
	var meta pg.ShardMeta
	if err == nil {
		if meta, err = pg.DecodeShardMeta(resp.KVs[0].Value); err != nil {
			err = fmt.Errorf("%s: %w", osd, err)
		}
	}
	if err != nil {
		resp.Release()
		return nil, nil, err
	}
	return &meta, resp, nil
}

// planShards gives each position of the acting set its transaction and
// the meta of its shard: a put's shard (the object's xattrs and omap
// stay), or a delete's tombstone (they go, kept to roll back: w.keys).
// Each position adds what it keeps to roll back (ecrollback.go). A data
// shard's block checksums come from the client's request (ShardSums), so
// neither this OSD's store nor its frames to the positions read it again.
func (s *Server) planShards(pool *clustermap.Pool, l ec.Layout, req *proto.Request, w *writePlan, shards [][]byte) *proto.Response {
	meta := pg.ShardMeta{Ver: pg.EVersion{Epoch: uint64(w.interval), Version: w.ver}, Size: putSize(req), Tombstone: req.Op == proto.OpDelete}
	if meta.Tombstone {
		meta.Size = 0
	}
	own := s.positionIn(w.t, pool, req.PG)
	return s.planPositions(pool, req, w, meta, nil, func(i int, coll string, txn *objstore.Txn) *proto.Response {
		if w.stage != "" {
			if i == own {
				txn.Prepend(stagedPut(coll, req.Object, w.ownStage))
			}
			return nil // another position puts its staged shard itself
		}
		var data []byte
		var sums []uint32
		if shards != nil {
			data = skewShard(req.Object, i, shards[i])
			if len(data) > 0 && &data[0] == &shards[i][0] { // not a shard a failpoint skewed
				sums = l.ShardSums(req.DataSums, int64(len(req.Data)), i, proto.Align)
			}
		}
		if meta.Tombstone {
			txn.Delete(coll, req.Object) // its xattrs and omap go too
		}
		txn.PutSummed(coll, req.Object, data, sums)
		return nil
	})
}

// planPositions gives each position of the acting set that the write
// reaches its transaction (build) and the meta of its shard: meta, at its
// position. The write reaches every position but those meta.Held names,
// which a partial write leaves as they are (pg.PartialHeld): the write
// set shrinks to the others. A write that replaces a version (meta.Prev
// set: o's, which stands) expects each position to hold what that version
// names for it. The primary's own transaction is w.txn (nil when the
// write skips its position).
func (s *Server) planPositions(pool *clustermap.Pool, req *proto.Request, w *writePlan, meta pg.ShardMeta, o *ecObject, build func(i int, coll string, txn *objstore.Txn) *proto.Response) *proto.Response {
	_, osds := w.t.Positions(pool, req.PG)
	w.shards = make(map[clustermap.OSDID]*objstore.Txn, len(osds))
	w.shardMetas = make(map[clustermap.OSDID]pg.ShardMeta, len(osds))
	for i, osd := range osds {
		if osd == placement.NoOSD || meta.Skips(i) {
			continue
		}
		coll, txn := shardColl(req.PG, i), &objstore.Txn{}
		if bad := build(i, coll, txn); bad != nil {
			return bad
		}
		txn.SetXattr(coll, req.Object, versionXattr, meta.Ver.Encode())
		if err := txn.Validate(); err != nil {
			return s.fail(proto.StatusInvalid, "%v", err)
		}
		m := meta
		m.Position = i
		if m.Prev != (pg.EVersion{}) {
			m.Prev = o.plan.Holds(i)
		}
		w.shards[osd], w.shardMetas[osd] = txn, m
	}
	if len(meta.Held) > 0 {
		w.writeSet = slices.DeleteFunc(slices.Clone(w.writeSet), func(o clustermap.OSDID) bool { return w.shards[o] == nil })
	}
	if w.txn = w.shards[s.id]; w.txn == nil && !meta.Skips(slices.Index(osds, s.id)) {
		panic(fmt.Sprintf("%s writes pg %s as its primary but holds no position of it", s.id, req.PG))
	}
	return nil
}

// shardBufs are the pooled buffers a put's shards were coded into
// (ec.Codec.EncodeObjectInto). They go back to the pool once nothing can
// read them, counted by holds: the write holds them until ecWrite returns,
// by which time replicate has drained every sender (no goroutine of the
// write calls a member any more), this OSD's own shard transaction is
// applied or never will be (objstore keeps no data past Apply), and a
// member sent the write again after a map change got its own copy
// (Txn.Marshal); each member's shared encoding (shareTxn) holds them
// until its last frame is written or dropped, which can be after the write
// returned (a member that timed out may still have one queued). A
// transaction's data never outlives it otherwise: the rollback state a
// position keeps is read back from its store.
type shardBufs struct {
	bufs [][]byte
	refs atomic.Int32
}

func newShardBufs(shards [][]byte) *shardBufs {
	b := &shardBufs{bufs: shards}
	b.refs.Store(1)
	return b
}

func (b *shardBufs) hold() {
	if b.refs.Add(1) <= 1 {
		panic("osd: shard buffers held after they went back to the pool")
	}
}

// done drops a hold; the last hands the buffers back.
func (b *shardBufs) done() {
	switch n := b.refs.Add(-1); {
	case n == 0:
		for _, buf := range b.bufs {
			bufpool.Put(buf)
		}
		b.bufs = nil
	case n < 0:
		panic("osd: shard buffers handed back more often than held")
	}
}

// ecWrite runs a put or delete of an erasure-coded object: the primary
// encodes it and sends each position of the acting set its shard in a
// transaction of its own (replicate), and answers once every one of them
// has it durable, never fewer than min_size; then it queues the trim of
// the write's rollback state. A position that lacks the object is brought
// up to date first, so every shard the write replaces holds the version
// that stands: what a position keeps to roll back is never a version
// that does not. The caller holds the object's lock.
func (s *Server) ecWrite(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	t := s.view.Table()
	if bad := s.ecWriteReady(ctx, t, pool, p, req); bad != nil {
		return bad
	}
	if req.Op == proto.OpDelete || req.Flags&proto.FlagExclusive != 0 {
		o, bad := s.ecLookup(ctx, pool, p, req.PG, req.Object)
		switch {
		case bad != nil:
			return bad
		case req.Op == proto.OpDelete && !o.exists():
			return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
		case req.Op == proto.OpPut && o.exists():
			return s.fail(proto.StatusExists, "object %q exists", req.Object)
		}
	}
	p.mu.Lock()
	w := &writePlan{t: t, interval: p.prim.Epoch, writeSet: p.prim.WriteSet, acting: p.prim.Acting, keys: req.Op == proto.OpDelete}
	p.mu.Unlock()
	if req.Op == proto.OpPut {
		if bad := s.refuseFull(req, w.writeSet); bad != nil {
			return bad
		}
	}
	if len(w.acting) < pool.MinSize {
		return s.belowMinSize(pool, req, w)
	}
	var shards [][]byte
	if req.Flags&proto.FlagStaged != 0 {
		defer w.releaseStage()
		if bad := s.takeOwnStage(pool, req, w); bad != nil {
			return bad
		}
	} else if req.Op == proto.OpPut {
		var err error
		shards, err = c.EncodeObjectInto(req.Data, bufpool.Get)
		w.bufs = newShardBufs(shards)
		defer w.bufs.done() // the write's own hold: see shardBufs
		if err != nil {
			return s.fail(proto.StatusInvalid, "%v", err)
		}
	}
	w.ver = p.nextVersion()
	if bad := s.planShards(pool, c.Layout(), req, w, shards); bad != nil {
		return bad
	}
	return s.ecCommit(ctx, pool, p, req, w)
}

// ecWriteReady checks that an erasure-coded object may be written now
// and brings every position that lacks it up to date first, so every
// shard a write replaces holds the version that stands: what a position
// keeps to roll back is never a version that does not. The caller holds
// the object's lock.
func (s *Server) ecWriteReady(ctx context.Context, t *placement.Table, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	if !p.activeFor(t.Acting(pool, req.PG)) {
		return s.fail(proto.StatusUnavailable, "pg %s is peering again; retry", req.PG)
	}
	if p.isUnfound(req.Object) {
		return s.fail(proto.StatusUnavailable, "pg %s: object %q is unfound: no version of it is on %d positions that hold every write; it takes no writes until they return", req.PG, req.Object, pool.EC.K)
	}
	if err := s.ensureObject(ctx, req.PG, p, req.Object, ensureAll); err != nil {
		return s.fail(proto.StatusUnavailable, "pg %s: rebuilding the shards of %q before writing it: %v", req.PG, req.Object, err)
	}
	return nil
}

// ecCommit sends each position its shard transaction of w and answers
// once every one has it durable; then it queues the trim of the write's
// rollback state.
func (s *Server) ecCommit(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, w *writePlan) *proto.Response {
	if ecPartialPut(s, req, w) {
		return s.fail(proto.StatusUnavailable, "failpoint")
	}
	if bad := s.replicate(ctx, pool, p, req, w); bad != nil {
		p.forgetKnown(req.Object)
		if w.localApplied {
			// This position may hold a version that does not stand:
			// its shard is rebuilt at the one that does, and reads do
			// not take it alone meanwhile (ecReadLocal).
			p.markMissing(s.id, req.Object, w.interval)
		}
		return bad
	}
	// Every position now holds this version (or, deleted, its
	// tombstone): the write is complete, its rollback state can go.
	p.clearMissingAll(req.Object, w.interval)
	p.noteCommitted(req.Object, w, pool.EC.K+pool.EC.M)
	s.queueTrim(req.PG, req.Object, pg.EVersion{Epoch: uint64(w.interval), Version: w.ver})
	r := s.ok()
	r.Version = w.ver
	r.Size = putSize(req)
	return r
}

// putSize is the size of the object a put writes: its data's, or for a
// staged put the size it names.
func putSize(req *proto.Request) uint64 {
	if req.Flags&proto.FlagStaged != 0 {
		return req.Length
	}
	return uint64(len(req.Data))
}

// stagedPut is the transaction that puts a staged shard as the object's
// shard in coll.
func stagedPut(coll, name string, sh *stagedShard) *objstore.Txn {
	txn := &objstore.Txn{}
	txn.PutSummed(coll, name, sh.data, sh.sums)
	return txn
}

// takeOwnStage takes this OSD's staged shard of a staged put into w,
// before the put is given a version: a put whose primary lacks its shard
// is refused having changed nothing.
func (s *Server) takeOwnStage(pool *clustermap.Pool, req *proto.Request, w *writePlan) *proto.Response {
	m := pg.ShardMeta{Size: req.Length, Position: s.positionIn(w.t, pool, req.PG)}
	sh, bad := s.takeStaged(pool, req.Key, req.PG, req.Object, m)
	if bad != nil {
		return bad
	}
	w.stage, w.ownStage = req.Key, sh
	return nil
}

// releaseStage gives back this OSD's staged shard of w, once its own
// transaction is applied or never will be.
func (w *writePlan) releaseStage() {
	if w.ownStage != nil {
		w.ownStage.release()
		w.ownStage = nil
	}
}
