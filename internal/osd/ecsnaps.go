package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/snapset"
)

// Snapshots of erasure-coded objects. A clone is an erasure-coded object
// of its own (snapset.CloneName), coded over the positions of the head's
// PG, and the head's snapshot state (snapset.Xattr) is one of its keys:
// whole on every position, changed by a change of keys and copied with the
// others by rollback and recovery (eckeys.go). The first write since a
// snapshot takes three steps under the locks of the head and its clone,
// each an erasure-coded write that is atomic by itself:
//
//  1. the head as the version that stands has it (bytes and xattrs) is
//     put as the clone;
//  2. the head's snapshot state is set to name the clone;
//  3. the write itself.
//
// Every step leaves each snapshot reading what it read before: until 2
// the state does not name the clone, and snapshots read the head, which 3
// has not changed yet; after 2 the clone holds what the head holds. A
// primary lost between 1 and 2 leaves a clone no state names: the next
// write under that snapshot puts it again, and deleting the object with
// its history deletes the clones its position holds, named or not.
//
// A write whose snapshot sequence the head's state already holds needs no
// step: the primary remembers, per object, the sequence it last found or
// set in this interval of the PG (snapSeqs), so writes after the first pay
// no lookup. Peering, recovery, scrub and trims treat clones as the
// objects they are.

// serveECSnap serves what snapshots add to a request on an erasure-coded
// PG: reads at a snapshot, OpSnaps, OpSnapTrim, writes under a snapshot
// sequence and deletes of an object with its clones. handled false: the
// request is served as it is.
func (s *Server) serveECSnap(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) (*proto.Response, bool) {
	switch {
	case req.Snap != 0:
		return s.ecReadAtSnap(ctx, pool, c, p, req), true
	case req.Op == proto.OpSnaps:
		return s.ecSnaps(ctx, pool, p, req), true
	case req.Op == proto.OpSnapTrim:
		return s.ecSnapTrim(ctx, pool, c, p, req), true
	case req.Op == proto.OpDelete && req.SnapSeq == 0:
		if !s.ecMayHaveClones(pool, req) {
			return nil, false
		}
		return s.ecDeleteAll(ctx, pool, c, p, req), true
	case req.SnapSeq != 0 && isWrite(req.Op):
		return s.ecCowWrite(ctx, pool, c, p, req), true
	}
	return nil, false
}

// lockObjects takes the locks of names in pg (for reading with shared),
// each stripe once and in the stripes' order, so two callers taking
// several never wait for each other; it returns their release.
func (s *Server) lockObjects(id clustermap.PGID, shared bool, names ...string) func() {
	idx := make([]int, 0, len(names))
	for _, n := range names {
		idx = append(idx, s.lockIndex(id, n))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		if shared {
			s.locks[i].RLock()
		} else {
			s.locks[i].Lock()
		}
	}
	return func() {
		for _, i := range idx {
			if shared {
				s.locks[i].RUnlock()
			} else {
				s.locks[i].Unlock()
			}
		}
	}
}

// ecHead reads the head's existence, size and snapshot state as the
// version that stands has them. The caller holds the head's lock.
func (s *Server) ecHead(ctx context.Context, pool *clustermap.Pool, p *pgState, id clustermap.PGID, head string) (headState, *proto.Response) {
	o, bad := s.ecLookup(ctx, pool, p, id, head)
	if bad != nil || !o.exists() {
		return headState{}, bad
	}
	h := headState{exists: true, size: uint64(o.size)}
	req := &proto.Request{Op: proto.OpGetXattr, PG: id, Object: head, Key: snapset.Xattr}
	var errs []error
	for _, pos := range o.keyHolders(s.id) {
		r, err := s.askKeys(ctx, o.t, o.osds[pos], id, pos, req)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("position %d: %w", pos, err))
			continue
		case r.Status == proto.StatusNotFound:
			return h, nil // never written under a snapshot
		}
		if h.set, err = snapset.Decode(r.Data); err != nil {
			return headState{}, s.fail(proto.StatusCorrupt, "pg %s: object %q: its snapshot state at position %d: %v", id, head, pos, err)
		}
		return h, nil
	}
	return headState{}, s.fail(proto.StatusUnavailable, "pg %s: object %q: no position holding its version %s whole answered for its snapshot state (%v); retry", id, head, o.plan.Ver, errors.Join(errs...))
}

// ecCowWrite runs a write under a snapshot sequence: first, if it is the
// first since a snapshot, the clone and the head's new snapshot state
// (ecCow); then the write. A delete of a head that clones still need
// truncates it instead, so its snapshot state stays.
func (s *Server) ecCowWrite(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	clone := snapset.CloneName(req.Object, req.SnapSeq)
	defer s.lockObjects(req.PG, false, req.Object, clone)()
	at := *req
	at.SnapSeq = 0
	if req.Op != proto.OpDelete && p.snapSeqHolds(req.Object, req.SnapSeq) {
		return s.ecWriteOp(ctx, pool, c, p, &at)
	}
	h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
	switch {
	case bad != nil:
		return bad
	case req.Op == proto.OpDelete && !h.exists:
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	after, bad := s.ecCow(ctx, pool, c, p, req, h, clone)
	if bad != nil {
		return bad
	}
	if req.Op == proto.OpDelete && len(after.Clones) > 0 {
		at.Op, at.Offset = proto.OpTruncate, 0
	}
	return s.ecWriteOp(ctx, pool, c, p, &at)
}

// ecCow makes the clone of head h that a write under req.SnapSeq needs,
// if it needs one, and sets the head's new snapshot state; it returns
// that state. The caller holds the locks of the head and the clone.
func (s *Server) ecCow(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request, h headState, clone string) (snapset.Set, *proto.Response) {
	cloneIt, after := h.set.Cow(req.SnapSeq, h.exists, h.size)
	if cloneIt {
		if bad := s.ecPutClone(ctx, pool, c, p, req, clone); bad != nil {
			return snapset.Set{}, bad
		}
	}
	if after.Seq != h.set.Seq || cloneIt {
		if bad := s.ecSetSnapState(ctx, pool, p, req, after); bad != nil {
			return snapset.Set{}, bad
		}
	}
	if req.Op == proto.OpDelete {
		p.forgetSnapSeq(req.Object) // a delete may take the state with the head
	} else {
		p.noteSnapSeq(req.Object, after.Seq)
	}
	return after, nil
}

// ecPutClone puts the head as the version that stands has it, bytes and
// xattrs, as its clone.
func (s *Server) ecPutClone(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request, clone string) *proto.Response {
	sub := func(op proto.Op, name string) *proto.Request {
		return &proto.Request{Op: op, Epoch: req.Epoch, PG: req.PG, Object: name}
	}
	data := s.ecRead(ctx, pool, c, p, sub(proto.OpRead, req.Object))
	defer data.Release()
	if data.Status != proto.StatusOK {
		return s.fail(data.Status, "copying %q to its clone for snapshot %d: reading it: %s", req.Object, req.SnapSeq, data.Message)
	}
	xattrs := s.ecKeysRead(ctx, pool, p, sub(proto.OpListXattrs, req.Object))
	if xattrs.Status != proto.StatusOK {
		return s.fail(xattrs.Status, "copying %q to its clone for snapshot %d: reading its xattrs: %s", req.Object, req.SnapSeq, xattrs.Message)
	}
	put := sub(proto.OpPut, clone)
	put.Data = data.Data
	if r := s.ecWrite(ctx, pool, c, p, put); r.Status != proto.StatusOK {
		return s.fail(r.Status, "copying %q to its clone for snapshot %d: %s", req.Object, req.SnapSeq, r.Message)
	}
	for _, kv := range xattrs.KVs {
		set := sub(proto.OpSetXattr, clone)
		set.Key, set.Data = string(kv.Key), kv.Value
		if r := s.ecKeysWrite(ctx, pool, p, set); r.Status != proto.StatusOK {
			return s.fail(r.Status, "copying the xattrs of %q to its clone for snapshot %d: %s", req.Object, req.SnapSeq, r.Message)
		}
	}
	return nil
}

// ecSetSnapState sets the head's snapshot state (a change of keys, which
// creates an absent head empty: a write under a snapshot that creates the
// object records that it did not exist before).
func (s *Server) ecSetSnapState(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request, set snapset.Set) *proto.Response {
	r := s.ecKeysWrite(ctx, pool, p, &proto.Request{Op: proto.OpSetXattr, Epoch: req.Epoch, PG: req.PG, Object: req.Object, Key: snapset.Xattr, Data: set.Encode()})
	if r.Status != proto.StatusOK {
		p.forgetSnapSeq(req.Object)
		return s.fail(r.Status, "recording the snapshot state of %q: %s", req.Object, r.Message)
	}
	return nil
}

// ecWriteOp runs a write on an erasure-coded object. The caller holds
// its lock.
func (s *Server) ecWriteOp(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	switch req.Op {
	case proto.OpPut, proto.OpDelete:
		return s.ecWrite(ctx, pool, c, p, req)
	case proto.OpWrite, proto.OpTruncate:
		return s.ecPartialWrite(ctx, pool, c, p, req)
	}
	return s.ecKeysWrite(ctx, pool, p, req)
}

// ecReadAtSnap serves a read or stat at a snapshot: under the head's lock
// it resolves to the head, a clone or nothing, and reads it under the
// locks of both, so no write makes a clone in between. A write that
// changes what the snapshot resolves to between the resolution and the
// taking of both locks makes it resolve again.
func (s *Server) ecReadAtSnap(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	target := req.Object
	for try := 0; try < 4; try++ {
		unlock := s.lockObjects(req.PG, true, req.Object, target)
		h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
		if bad != nil {
			unlock()
			return bad
		}
		v := h.set.Resolve(req.Snap, h.exists)
		now := req.Object
		if v.Exists && !v.Head {
			now = snapset.CloneName(req.Object, v.Clone)
		}
		if now != target {
			unlock()
			target = now
			continue
		}
		defer unlock()
		if !v.Exists {
			return s.fail(proto.StatusNotFound, "object %q did not exist at snapshot %d", req.Object, req.Snap)
		}
		at := *req
		at.Object, at.Snap = target, 0
		return s.ecRead(ctx, pool, c, p, &at)
	}
	return s.fail(proto.StatusUnavailable, "pg %s: object %q: writes kept changing what snapshot %d reads; retry", req.PG, req.Object, req.Snap)
}

// ecSnaps answers OpSnaps: the head's size and snapshot state.
func (s *Server) ecSnaps(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	defer s.lockObjects(req.PG, true, req.Object)()
	h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
	switch {
	case bad != nil:
		return bad
	case !h.exists:
		return s.fail(proto.StatusNotFound, "object %q does not exist", req.Object)
	}
	r := s.ok()
	r.Size, r.Data = h.size, h.set.Encode()
	return r
}

// ecSnapTrim drops the clones no snapshot req keeps needs: each is
// deleted under its own and the head's locks, then the head's state loses
// them. A trim cut short leaves clones the state names but no kept
// snapshot reads; the next trim deletes them again.
func (s *Server) ecSnapTrim(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	keep, err := snapset.DecodeSnaps(req.Data)
	if err != nil {
		return s.fail(proto.StatusInvalid, "%v", err)
	}
	unlock := s.lockObjects(req.PG, false, req.Object)
	h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
	unlock()
	switch {
	case bad != nil:
		return bad
	case !h.exists:
		return s.fail(proto.StatusNotFound, "object %q does not exist", req.Object)
	}
	drop, _ := h.set.Trim(keep)
	return s.ecDropClones(ctx, pool, c, p, req, drop)
}

// ecDropClones deletes the clones drop names (whose absence is fine),
// then takes them out of the head's snapshot state.
func (s *Server) ecDropClones(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request, drop []uint64) *proto.Response {
	var names []string
	for _, id := range drop {
		names = append(names, snapset.CloneName(req.Object, id))
	}
	if r := s.ecDeleteClones(ctx, pool, c, p, req, names); r != nil {
		return r
	}
	if len(drop) == 0 {
		return s.ok()
	}
	defer s.lockObjects(req.PG, false, req.Object)()
	h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
	switch {
	case bad != nil:
		return bad
	case !h.exists:
		return s.ok() // a head deleted meanwhile took its state with it
	}
	after := h.set
	after.Clones = slices.DeleteFunc(slices.Clone(after.Clones), func(c snapset.Clone) bool { return slices.Contains(drop, c.ID) })
	if len(after.Clones) == len(h.set.Clones) {
		return s.ok()
	}
	if bad := s.ecSetSnapState(ctx, pool, p, req, after); bad != nil {
		return bad
	}
	return s.ok()
}

// ecDeleteClones deletes the clones of req's object that names names,
// each under its own and the head's locks; an absent one is fine. It
// returns nil once they are gone.
func (s *Server) ecDeleteClones(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request, names []string) *proto.Response {
	for _, name := range names {
		unlock := s.lockObjects(req.PG, false, req.Object, name)
		r := s.ecWrite(ctx, pool, c, p, &proto.Request{Op: proto.OpDelete, Epoch: req.Epoch, PG: req.PG, Object: name})
		unlock()
		if r.Status != proto.StatusOK && r.Status != proto.StatusNotFound {
			return s.fail(r.Status, "deleting clone %q of %q: %s", name, req.Object, r.Message)
		}
	}
	return nil
}

// ecMayHaveClones says whether a delete of req's object may have clones
// to delete with it: the primary's own position holds a snapshot state
// for it, or a clone. Objects never written under a snapshot (an S3
// bucket's) pay two lookups on this OSD.
func (s *Server) ecMayHaveClones(pool *clustermap.Pool, req *proto.Request) bool {
	own, ok := s.ownShardColl(pool, req.PG, s.view.Table())
	if !ok {
		return true
	}
	if _, err := s.store.GetXattr(own, req.Object, snapset.Xattr); !errors.Is(err, objstore.ErrNotFound) {
		return true
	}
	clones, err := s.localClones(own, req.Object)
	return err != nil || len(clones) > 0
}

// localClones lists the clones of head that coll holds, named by the
// head's state or not.
func (s *Server) localClones(coll, head string) ([]string, error) {
	prefix := snapset.CloneName(head, 0)
	prefix = prefix[:len(head)+2] // the head's name, NUL, 'c'
	var out []string
	after := prefix
	for len(out) < maxClonesListed {
		names, more, err := s.store.List(coll, after, 64)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if !strings.HasPrefix(n, prefix) {
				return out, nil
			}
			out = append(out, n)
		}
		if !more || len(names) == 0 {
			return out, nil
		}
		after = names[len(names)-1]
	}
	return out, nil
}

// maxClonesListed bounds the clones of one object a delete looks for.
const maxClonesListed = 1 << 16

// ecDeleteAll deletes an object with its history: every clone its
// snapshot state names or its primary's position holds, then the head.
// It waits (the client retries) while that position is being rebuilt: a
// clone no state names that the position still lacks would otherwise
// stay behind on the others for ever.
func (s *Server) ecDeleteAll(ctx context.Context, pool *clustermap.Pool, c *ec.Codec, p *pgState, req *proto.Request) *proto.Response {
	if !p.selfWhole(s.id) {
		return s.fail(proto.StatusUnavailable, "pg %s: %s's position is being rebuilt; deleting %q with its snapshots waits until it is whole, so that no clone is left behind: retry", req.PG, s.id, req.Object)
	}
	unlock := s.lockObjects(req.PG, false, req.Object)
	h, bad := s.ecHead(ctx, pool, p, req.PG, req.Object)
	unlock()
	if bad != nil {
		return bad
	}
	var names []string
	for _, c := range h.set.Clones {
		names = append(names, snapset.CloneName(req.Object, c.ID))
	}
	if own, ok := s.ownShardColl(pool, req.PG, s.view.Table()); ok {
		held, err := s.localClones(own, req.Object)
		if err != nil {
			return s.failErr(err)
		}
		for _, n := range held {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if r := s.ecDeleteClones(ctx, pool, c, p, req, names); r != nil {
		return r
	}
	defer s.lockObjects(req.PG, false, req.Object)()
	p.forgetSnapSeq(req.Object)
	return s.ecWrite(ctx, pool, c, p, req)
}

// snapSeqHolds says whether head's snapshot state holds seq or a newer
// one, as the primary last found or set it in the PG's current interval
// (a rollback only ever comes with a new interval).
func (p *pgState) snapSeqHolds(head string, seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	have, ok := p.snapSeqs.get(p.prim.Epoch, head)
	return ok && have >= seq
}

// noteSnapSeq records that head's snapshot state holds seq.
func (p *pgState) noteSnapSeq(head string, seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snapSeqs.set(p.prim.Epoch, head, seq)
}

// forgetSnapSeq drops what the primary knows of head's snapshot state.
func (p *pgState) forgetSnapSeq(head string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.snapSeqs.forget(head)
}
