package osd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// epochWait bounds how long a request from a sender with a newer map waits
// for this OSD's map to catch up before it is answered StatusWrongEpoch.
const epochWait = 3 * time.Second

// Serve handles one request; it implements rpc.Handler.
func (s *Server) Serve(ctx context.Context, req *proto.Request) *proto.Response {
	if s.metrics == nil {
		resp := s.serveOne(ctx, req)
		s.clientIO.count(req, resp)
		return resp
	}
	start := time.Now()
	resp := s.serveOne(ctx, req)
	s.metrics.observe(req, resp, time.Since(start))
	s.clientIO.count(req, resp)
	return resp
}

func (s *Server) serveOne(ctx context.Context, req *proto.Request) *proto.Response {
	switch req.Op {
	case proto.OpPing:
		return s.ok()
	case proto.OpStatus:
		return s.status()
	}
	t, resp := s.checkEpoch(ctx, req.Epoch)
	if resp != nil {
		return resp
	}
	if resp, ok := s.serveMember(t, req); ok {
		return resp
	}
	if req.Flags&proto.FlagLocal != 0 && !isWrite(req.Op) && req.Op != proto.OpScrub {
		if req.Op == proto.OpList {
			return s.listLocal(req)
		}
		coll, bad := s.collFor(t, req.PG) // an erasure-coded PG's: this OSD's position's
		if bad != nil {
			return bad
		}
		return s.readObject(coll, req)
	}
	pool, ok := t.Map().Pool(req.PG.Pool)
	if !ok {
		return s.fail(proto.StatusNotFound, "pool %d does not exist", req.PG.Pool)
	}
	if bad := s.refuseRequest(pool, req); bad != nil {
		return bad
	}
	acting := t.Acting(pool, req.PG)
	if len(acting) == 0 || acting[0] != s.id {
		return s.fail(proto.StatusNotPrimary, "%s is not the primary of pg %s at epoch %d", s.id, req.PG, t.Map().Epoch)
	}
	s.lastClientOp.Store(time.Now().UnixNano())
	p, resp := s.activePG(ctx, req.PG, acting)
	if resp != nil {
		return resp
	}
	switch {
	case pool.Erasure() && req.Op != proto.OpScrub:
		return s.serveEC(ctx, pool, p, req)
	case isWrite(req.Op):
		return s.write(ctx, pool, p, req)
	case req.Op == proto.OpScrub:
		return s.scrub(ctx, p, req)
	}
	return s.read(ctx, pool, p, acting, req)
}

// refuseRequest refuses, by name, a client request that pool cannot
// serve or that is malformed: an op erasure-coded pools do not serve,
// staged shards where none can be, a write at a snapshot, a reserved
// xattr name, a bad object name or one of another PG, a PG that does
// not exist.
func (s *Server) refuseRequest(pool *clustermap.Pool, req *proto.Request) *proto.Response {
	if pool.Erasure() {
		if bad := s.refuseEC(pool, req); bad != nil {
			return bad
		}
	}
	if bad := s.refuseStaged(pool, req); bad != nil {
		return bad
	}
	if req.Snap != 0 && req.Op != proto.OpRead && req.Op != proto.OpStat {
		return s.fail(proto.StatusInvalid, "%s cannot run at a snapshot: only reads and stats can", req.Op)
	}
	if strings.HasPrefix(req.Key, proto.ReservedPrefix) {
		return s.fail(proto.StatusInvalid, "xattr name %q: names starting with NUL are reserved", req.Key)
	}
	if req.Op != proto.OpList && req.Op != proto.OpScrub {
		if err := proto.ValidateObjectName(req.Object); err != nil {
			return s.fail(proto.StatusInvalid, "%v", err)
		}
		if pg := placement.PGOf(pool, req.Object); pg != req.PG {
			return s.fail(proto.StatusInvalid, "object %q belongs to pg %s, not %s", req.Object, pg, req.PG)
		}
	} else if req.PG.Seed >= pool.PGNum {
		return s.fail(proto.StatusInvalid, "pg %s does not exist: pool %q has %d pgs", req.PG, pool.Name, pool.PGNum)
	}
	return nil
}

// serveMember serves the ops any OSD holding part of a PG answers, not
// only its primary: a primary's writes and reads of this OSD's copy or
// shard, and a client's staged shard; ok is false for the others.
func (s *Server) serveMember(t *placement.Table, req *proto.Request) (resp *proto.Response, ok bool) {
	switch req.Op {
	case proto.OpReplicate:
		return s.applyReplica(t, req), true
	case proto.OpReadReplica:
		if pool, ok := t.Map().Pool(req.PG.Pool); ok && pool.Erasure() {
			return s.readShard(t, req), true
		}
		return s.readLocal(req), true
	case proto.OpPGList:
		return s.pgList(req), true
	case proto.OpShardRollBack, proto.OpShardTrim:
		return s.shardEntries(t, req), true
	case proto.OpShardTrims:
		return s.shardTrims(t, req), true
	case proto.OpStage:
		return s.stage(t, req), true
	}
	return nil, false
}

func isWrite(op proto.Op) bool {
	switch op {
	case proto.OpWrite, proto.OpPut, proto.OpTruncate, proto.OpDelete, proto.OpCreate,
		proto.OpSetXattr, proto.OpRmXattr, proto.OpOmapSet, proto.OpOmapRm, proto.OpOmapRmRange,
		proto.OpSnapTrim, proto.OpOmapTxn:
		return true
	}
	return false
}

func (s *Server) ok() *proto.Response {
	return &proto.Response{Status: proto.StatusOK, Epoch: s.view.Epoch()}
}

func (s *Server) fail(st proto.Status, format string, args ...any) *proto.Response {
	return &proto.Response{Status: st, Epoch: s.view.Epoch(), Message: fmt.Sprintf(format, args...)}
}

// failErr maps an object-store error to a response. A store that failed
// stops the OSD (Run); until it has, its requests are answered
// unavailable, which the primary of a write and the client take as a
// member going down: they wait for the map without it and go on there.
func (s *Server) failErr(err error) *proto.Response {
	if e := s.store.Err(); e != nil {
		return s.fail(proto.StatusUnavailable, "%s: its store failed and it is stopping (%v); retry", s.id, e)
	}
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	case errors.Is(err, objstore.ErrNoSpace):
		return s.fail(proto.StatusNoSpace, "%s's disk is full (%v): delete data, add OSDs, or mark %s out", s.id, err, s.id)
	case errors.Is(err, objstore.ErrInvalid):
		return s.fail(proto.StatusInvalid, "%v", err)
	case objstore.IsCorruption(err):
		return s.fail(proto.StatusCorrupt, "%s: %v", s.id, err)
	}
	return s.fail(proto.StatusIOError, "%s: %v", s.id, err)
}

// checkEpoch compares the sender's map epoch with ours: an older sender is
// told to refresh; for a newer one we wait briefly for our watch to catch up.
func (s *Server) checkEpoch(ctx context.Context, e clustermap.Epoch) (*placement.Table, *proto.Response) {
	t := s.view.Table()
	mine := t.Map().Epoch
	switch pg.Admit(e, mine) {
	case pg.Serve:
		return t, nil
	case pg.Refuse:
		return nil, s.fail(proto.StatusWrongEpoch, "sender has map epoch %d, %s has %d", e, s.id, mine)
	}
	if !s.view.WaitFor(ctx, e, epochWait) {
		return nil, s.fail(proto.StatusWrongEpoch, "sender has map epoch %d, %s is still at %d", e, s.id, s.view.Epoch())
	}
	t = s.view.Table()
	if t.Map().Epoch != e {
		return nil, s.fail(proto.StatusWrongEpoch, "sender has map epoch %d, %s has %d", e, s.id, t.Map().Epoch)
	}
	return t, nil
}

// read serves a read-only op on the primary.
func (s *Server) read(ctx context.Context, pool *clustermap.Pool, p *pgState, acting []clustermap.OSDID, req *proto.Request) *proto.Response {
	coll := req.PG.String()
	if req.Op == proto.OpList && p.selfMissing(s.id) {
		// This copy is being recovered: list the authoritative one.
		return s.listFrom(ctx, p, req)
	}
	if req.Op == proto.OpList {
		return s.listLocal(req)
	}
	l := s.lock(req.PG, req.Object)
	if p.nMissing.Load() > 0 {
		// Bring this copy up to date before reading it; if that fails (this
		// disk is full, say), the read is served by the authoritative copy.
		l.Lock()
		err := s.ensureObject(ctx, req.PG, p, req.Object, ensureSelf)
		if err == nil && req.Snap != 0 {
			err = s.ensureSnapTarget(ctx, p, req, l)
		}
		l.Unlock()
		if err != nil {
			return s.readFrom(ctx, p, req, err)
		}
	}
	// Writes take the head's lock: a read at a snapshot resolves and reads
	// its version under it, so no clone is made in between.
	l.RLock()
	defer l.RUnlock()
	req, bad := s.resolveSnap(coll, req)
	if bad != nil {
		return bad
	}
	r := s.readObject(coll, req)
	if r.Status == proto.StatusCorrupt {
		return s.readFromReplica(ctx, pool, p, req, r)
	}
	return r
}

// ensureSnapTarget brings the clone a read at a snapshot resolves to up to
// date too. The caller holds the head's lock l for writing.
func (s *Server) ensureSnapTarget(ctx context.Context, p *pgState, req *proto.Request, l *sync.RWMutex) error {
	target, ok, err := s.snapTarget(req.PG.String(), req.Object, req.Snap)
	if err != nil || !ok || target == req.Object {
		return err
	}
	if tl := s.lock(req.PG, target); tl != l {
		tl.Lock()
		defer tl.Unlock()
	}
	return s.ensureObject(ctx, req.PG, p, target, ensureSelf)
}

// readLocal serves OpReadReplica: a peer asks for this OSD's copy.
func (s *Server) readLocal(req *proto.Request) *proto.Response {
	return s.readObject(req.PG.String(), req)
}

func (s *Server) readObject(coll string, req *proto.Request) *proto.Response {
	// A read forwarded to this copy (FlagLocal) is resolved here.
	req, bad := s.resolveSnap(coll, req)
	if bad != nil {
		return bad
	}
	switch req.Op {
	case proto.OpSnaps:
		return s.readSnaps(coll, req.Object)
	case proto.OpRead, proto.OpReadReplica:
		data, info, sums, release, err := s.store.ReadShared(coll, req.Object, req.Offset, req.Length)
		if err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		r.Data, r.Size, r.Free, r.DataSums = data, info.Size, release, sums
		return r
	case proto.OpStat:
		info, err := s.store.Stat(coll, req.Object)
		if err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		r.Size = info.Size
		return r
	case proto.OpGetXattr:
		v, err := s.store.GetXattr(coll, req.Object, req.Key)
		if err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		r.Data = v
		return r
	case proto.OpListXattrs:
		m, err := s.store.Xattrs(coll, req.Object)
		if err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		for k, v := range m {
			if strings.HasPrefix(k, proto.ReservedPrefix) && req.Flags&proto.FlagLocal == 0 {
				continue // the OSD's own, e.g. the version
			}
			r.KVs = append(r.KVs, proto.KV{Key: []byte(k), Value: v})
		}
		return r
	case proto.OpOmapGet:
		if _, err := s.store.Stat(coll, req.Object); err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		for _, k := range req.Keys {
			v, err := s.store.OmapGet(coll, req.Object, k)
			if errors.Is(err, objstore.ErrNotFound) {
				continue
			}
			if err != nil {
				return s.failErr(err)
			}
			r.KVs = append(r.KVs, proto.KV{Key: k, Value: v})
		}
		return r
	case proto.OpOmapListDelim:
		return s.omapListDelim(coll, req)
	case proto.OpOmapList:
		kvs, more, err := s.store.OmapList(coll, req.Object, req.Start, req.End, limit(req.Limit, 1000))
		if err != nil {
			return s.failErr(err)
		}
		r := s.ok()
		for _, kv := range kvs {
			r.KVs = append(r.KVs, proto.KV{Key: kv.Key, Value: kv.Value})
		}
		r.More = more
		return r
	}
	return s.fail(proto.StatusInvalid, "unknown operation %d", req.Op)
}

func limit(l uint32, max int) int {
	if l == 0 || int(l) > max {
		return max
	}
	return int(l)
}

// repairInlineMax bounds the objects a read repairs at once: the whole
// object travels in one message. Larger ones are served from the replica and
// left for scrub to repair.
const repairInlineMax = 16 << 20

// repairFrom rewrites the local copy of an object from replica r, whose
// answer to rr was part, and says what it did for the report. The caller
// holds the object's lock for reading; the repair writes the content the
// replicas hold, so readers see no change.
func (s *Server) repairFrom(ctx context.Context, coll string, pg clustermap.PGID, name string, r clustermap.OSDID, addr string, epoch clustermap.Epoch, part *proto.Response, rr *proto.Request) string {
	if part.Size > repairInlineMax {
		return fmt.Sprintf("; served from %s; too large to repair on read (%d bytes), left for scrub", r, part.Size)
	}
	full := part.Data
	if rr.Offset != 0 || uint64(len(full)) != part.Size {
		resp, err := s.peers.Call(ctx, addr, &proto.Request{Op: proto.OpReadReplica, Epoch: epoch, PG: pg, Object: name})
		if err != nil || resp.Status != proto.StatusOK {
			return fmt.Sprintf("; served from %s; repair failed: could not read the whole object", r)
		}
		full = resp.Data
	}
	txn := &objstore.Txn{}
	txn.Put(coll, name, full)
	if err := s.apply(txn); err != nil {
		return fmt.Sprintf("; served from %s; repair failed: %v", r, err)
	}
	return fmt.Sprintf("; repaired from %s", r)
}

// readFromReplica answers a read whose local copy failed its checksum: the
// data comes from a replica whose copy verifies, the local copy is rewritten
// from it, and the event is reported. Corrupted bytes are never returned.
func (s *Server) readFromReplica(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, bad *proto.Response) *proto.Response {
	coll := req.PG.String()
	s.logf("%s: checksum error in pg %s object %q: %s", s.id, req.PG, req.Object, bad.Message)
	detail := bad.Message
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.meta.AddReport(rctx, meta.Report{Kind: "corruption", OSD: s.id, PG: req.PG.String(), Object: req.Object, Detail: detail, Time: time.Now().UTC()}); err != nil {
			s.logf("%s: could not report corruption: %v", s.id, err)
		}
	}()
	m := s.view.Map()
	p.mu.Lock()
	var sources []clustermap.OSDID
	for _, r := range p.prim.WriteSet {
		if _, missing := p.prim.Missing[r][req.Object]; r != s.id && !missing {
			sources = append(sources, r)
		}
	}
	p.mu.Unlock()
	for _, r := range sources {
		osd, ok := m.OSD(r)
		if !ok {
			continue
		}
		// The replica verifies its own checksums. Ask for the client's range
		// only, so that an object of any size can be served.
		rr := &proto.Request{Op: proto.OpReadReplica, Epoch: m.Epoch, PG: req.PG, Object: req.Object, Offset: req.Offset, Length: req.Length}
		if req.Op == proto.OpStat {
			rr.Offset, rr.Length = 0, 1
		}
		part, err := s.peers.Call(ctx, osd.Addr, rr)
		if err != nil || part.Status != proto.StatusOK {
			continue
		}
		repair := s.repairFrom(ctx, coll, req.PG, req.Object, r, osd.Addr, m.Epoch, part, rr)
		detail += repair
		if s.metrics != nil && strings.HasPrefix(repair, "; repaired") {
			s.metrics.repaired.WithLabelValues("read").Inc()
		}
		s.logf("%s: pg %s object %q: %s", s.id, req.PG, req.Object, detail)
		out := s.ok()
		out.Size = part.Size
		if req.Op != proto.OpStat {
			out.Data = part.Data
		}
		return out
	}
	detail += "; no replica had a good copy"
	return bad
}

// readFrom serves a read from the PG's authoritative copy when this one
// could not be brought up to date (why).
func (s *Server) readFrom(ctx context.Context, p *pgState, req *proto.Request, why error) *proto.Response {
	p.mu.Lock()
	auth := p.prim.Auth
	p.mu.Unlock()
	m := s.view.Map()
	o, ok := m.OSD(auth)
	if !ok || auth == s.id {
		return s.fail(proto.StatusUnavailable, "pg %s: recovering %q: %v", req.PG, req.Object, why)
	}
	fwd := *req
	fwd.Epoch, fwd.Flags = m.Epoch, req.Flags|proto.FlagLocal
	resp, err := s.peers.Call(ctx, o.Addr, &fwd)
	if err != nil {
		return s.fail(proto.StatusUnavailable, "pg %s: recovering %q failed (%v) and %s did not answer: %v", req.PG, req.Object, why, auth, err)
	}
	return resp
}

// listLocal lists the client objects of this OSD's copy of a PG.
func (s *Server) listLocal(req *proto.Request) *proto.Response {
	return s.listColl(req.PG.String(), req)
}

// listColl lists the client objects of a collection.
func (s *Server) listColl(coll string, req *proto.Request) *proto.Response {
	names, more, err := s.store.List(coll, string(req.Start), limit(req.Limit, 1000))
	if err != nil {
		return s.failErr(err)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !strings.Contains(n, proto.ReservedPrefix) { // PG metadata, clones
			out = append(out, n)
		}
	}
	r := s.ok()
	r.Names, r.More = out, more
	if more && len(names) > 0 {
		// The client resumes after the last name we looked at, even if we hid it.
		r.Data = []byte(names[len(names)-1])
	}
	return r
}
