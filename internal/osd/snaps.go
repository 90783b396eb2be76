package osd

import (
	"errors"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/snapset"
)

// Snapshots are copy-on-write at object granularity (package snapset). The
// primary decides, under the object's lock, whether a write must first keep
// the head's content as a clone, and puts the clone, the head's new
// snapshot state and the write itself in one transaction that every copy
// applies: the clone and its record are never apart.

// headState is what the primary knows of a head object before a write.
type headState struct {
	exists bool
	size   uint64
	set    snapset.Set
}

// loadHead reads a head's existence, size and snapshot state.
func (s *Server) loadHead(coll, name string) (headState, error) {
	info, err := s.store.Stat(coll, name)
	if errors.Is(err, objstore.ErrNotFound) {
		return headState{}, nil
	}
	if err != nil {
		return headState{}, err
	}
	h := headState{exists: true, size: info.Size}
	raw, err := s.store.GetXattr(coll, name, snapset.Xattr)
	if errors.Is(err, objstore.ErrNotFound) {
		return h, nil
	}
	if err != nil {
		return headState{}, err
	}
	if h.set, err = snapset.Decode(raw); err != nil {
		return headState{}, &objstore.CorruptionError{Coll: coll, Name: name, Detail: err.Error()}
	}
	return h, nil
}

// snapTxn adds to txn what snapshots require before req's own change, and
// says how to apply req:
//   - the clone of the head, when the write is the first since a snapshot;
//   - the head's new snapshot state;
//   - for a delete while clones exist, a truncation to zero instead, so the
//     head (which carries the record of its clones) stays;
//   - for a delete without a snapshot sequence, the deletion of the head and
//     every clone (the existence check of a delete is made here, once);
//   - for OpSnapTrim, the deletion of the clones no kept snapshot needs.
//
// The caller adds req's own operation unless the plan replaced it, then
// the plan's finish.
func (s *Server) snapTxn(coll string, req *proto.Request, txn *objstore.Txn, stale bool) (snapPlan, *proto.Response) {
	head := req.Object
	if req.SnapSeq == 0 && req.Op != proto.OpDelete && req.Op != proto.OpSnapTrim {
		return snapPlan{touched: []string{head}}, nil
	}
	var plan snapPlan
	r := s.planSnaps(coll, req, txn, stale, &plan)
	return plan, r
}

// snapPlan is snapTxn's answer.
type snapPlan struct {
	touched  []string // objects that remain and get the write's version
	replaced bool     // req's own op is not to be added
	headSet  []byte   // the head's new snapshot state, set after req's op
}

// finish adds what follows req's own operation.
func (p *snapPlan) finish(coll, head string, txn *objstore.Txn) {
	if p.headSet != nil {
		txn.SetXattr(coll, head, snapset.Xattr, p.headSet)
	}
}

func (s *Server) planSnaps(coll string, req *proto.Request, txn *objstore.Txn, stale bool, plan *snapPlan) *proto.Response {
	head := req.Object
	var h headState
	if !stale {
		var err error
		if h, err = s.loadHead(coll, head); err != nil {
			return s.failErr(err)
		}
	}
	switch {
	case req.Op == proto.OpSnapTrim:
		if !h.exists {
			return s.fail(proto.StatusNotFound, "object %q does not exist", head)
		}
		keep, err := snapset.DecodeSnaps(req.Data)
		if err != nil {
			return s.fail(proto.StatusInvalid, "%v", err)
		}
		drop, after := h.set.Trim(keep)
		plan.replaced = true
		if len(drop) == 0 {
			return nil
		}
		for _, id := range drop {
			txn.Delete(coll, snapset.CloneName(head, id))
		}
		plan.headSet, plan.touched = after.Encode(), []string{head}
		return nil
	case req.Op == proto.OpDelete && !stale && !h.exists:
		return s.fail(proto.StatusNotFound, "object %q does not exist", head)
	case req.SnapSeq == 0: // a delete of the object and all its history
		for _, c := range h.set.Clones {
			txn.Delete(coll, snapset.CloneName(head, c.ID))
		}
		txn.Delete(coll, head)
		plan.replaced = true
		return nil
	}
	clone, after := h.set.Cow(req.SnapSeq, h.exists, h.size)
	if clone {
		name := snapset.CloneName(head, req.SnapSeq)
		data, err := s.store.Read(coll, head, 0, 0)
		if err != nil {
			return s.failErr(err)
		}
		xattrs, err := s.store.Xattrs(coll, head)
		if err != nil {
			return s.failErr(err)
		}
		txn.Put(coll, name, data)
		for k, v := range xattrs {
			if k != versionXattr && k != snapset.Xattr {
				txn.SetXattr(coll, name, k, v)
			}
		}
		plan.touched = append(plan.touched, name)
	}
	if req.Op == proto.OpDelete {
		plan.replaced = true
		if len(after.Clones) == 0 {
			txn.Delete(coll, head) // nothing at any snapshot needs the head
			return nil
		}
		txn.Truncate(coll, head, 0)
	}
	if after.Seq != h.set.Seq || clone {
		plan.headSet = after.Encode()
	}
	plan.touched = append(plan.touched, head)
	return nil
}

// snapTarget resolves a read of head at snapshot snap to the object that
// holds that version; ok is false if the object did not exist then.
func (s *Server) snapTarget(coll, head string, snap uint64) (name string, ok bool, err error) {
	h, err := s.loadHead(coll, head)
	if err != nil {
		return "", false, err
	}
	v := h.set.Resolve(snap, h.exists)
	switch {
	case !v.Exists:
		return "", false, nil
	case v.Head:
		return head, true, nil
	}
	return snapset.CloneName(head, v.Clone), true, nil
}

// resolveSnap turns a read at a snapshot into a read of the object that
// holds that version (the head or a clone); other requests pass unchanged.
func (s *Server) resolveSnap(coll string, req *proto.Request) (*proto.Request, *proto.Response) {
	if req.Snap == 0 {
		return req, nil
	}
	target, ok, err := s.snapTarget(coll, req.Object, req.Snap)
	if err != nil {
		return nil, s.failErr(err)
	}
	if !ok {
		return nil, s.fail(proto.StatusNotFound, "object %q did not exist at snapshot %d", req.Object, req.Snap)
	}
	at := *req
	at.Object, at.Snap = target, 0
	return &at, nil
}

// readSnaps answers OpSnaps: the head's size and snapshot state.
func (s *Server) readSnaps(coll, head string) *proto.Response {
	h, err := s.loadHead(coll, head)
	if err != nil {
		return s.failErr(err)
	}
	if !h.exists {
		return s.fail(proto.StatusNotFound, "object %q does not exist", head)
	}
	r := s.ok()
	r.Size, r.Data = h.size, h.set.Encode()
	return r
}
