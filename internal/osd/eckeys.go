package osd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/snapset"
)

// Xattrs, omap and creates of erasure-coded objects. They are small and
// read by key, so they are not coded: every position keeps them whole on
// its shard object. A change is a shard write like a partial one: under
// the object's lock the primary decides the version that stands, has
// every position that does not hold it rebuilt first (ecStanding), and
// sends each position the change with the meta of the next version,
// whose Prev is the version it replaces (proto.FlagShardPartial: a
// position at another version refuses, and is rebuilt). Since every change
// of keys takes a version, one version names one set of keys on every
// position. Each position keeps the old value (or absence) of each key
// the change touches (an undo record, ecundo.go; the whole old shard with
// all its keys past maxUndoKeys: proto.FlagShardKeys, keepRollBack), so a
// change cut short rolls back with the shard. Reads go to the primary's own position when it
// holds the version that stands, else to the first position that does.
// Recovery copies them with the shard it rebuilds (standingKeys).

// shardKeysXattr marks a kept shard (rollbackName) that carries the
// object's xattrs and omap as they were before the write it rolls back.
const shardKeysXattr = proto.ReservedPrefix + "ek"

// maxShardOmapKeys bounds the omap one erasure-coded object may hold: a
// shard with its keys is copied in one transaction (rollback, recovery).
// A variable for tests.
var maxShardOmapKeys = 100_000

// isECKeysWrite says whether op changes an object's keys (or creates it).
func isECKeysWrite(op proto.Op) bool {
	switch op {
	case proto.OpCreate, proto.OpSetXattr, proto.OpRmXattr, proto.OpOmapSet, proto.OpOmapRm, proto.OpOmapRmRange, proto.OpOmapTxn:
		return true
	}
	return false
}

// isECKeysRead says whether op reads an object's xattrs or omap.
func isECKeysRead(op proto.Op) bool {
	switch op {
	case proto.OpGetXattr, proto.OpListXattrs, proto.OpOmapGet, proto.OpOmapList, proto.OpOmapListDelim:
		return true
	}
	return false
}

// ecKeysWrite runs a create or a change of the xattrs or omap of an
// erasure-coded object. The caller holds the object's lock.
func (s *Server) ecKeysWrite(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	t := s.view.Table()
	if bad := s.ecWriteReady(ctx, t, pool, p, req); bad != nil {
		return bad
	}
	p.mu.Lock()
	w := &writePlan{t: t, interval: p.prim.Epoch, writeSet: p.prim.WriteSet, acting: p.prim.Acting, partial: true, keys: true}
	p.mu.Unlock()
	o, bad := s.ecStanding(ctx, pool, p, req, w.interval)
	if bad != nil {
		return bad
	}
	change, adding, bad := s.keysChange(pool, req, w.t, o)
	switch {
	case bad != nil:
		return bad
	case change == nil:
		return s.ok() // nothing to change
	case req.Op == proto.OpCreate && o.exists() && req.Flags&proto.FlagExclusive != 0:
		return s.fail(proto.StatusExists, "object %q exists", req.Object)
	case req.Op == proto.OpCreate && o.exists():
		return s.ok() // nothing to change
	case !o.exists() && freesSpace(req.Op):
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	if !freesSpace(req.Op) && !omapTxnFreesSpace(req) {
		if bad := s.refuseFull(req, w.writeSet); bad != nil {
			return bad
		}
	}
	if len(w.acting) < pool.MinSize {
		return s.belowMinSize(pool, req, w)
	}
	if own, ok := s.ownShardColl(pool, req.PG, w.t); ok && adding > 0 && o.exists() {
		if err := s.omapRoom(own, req.Object, adding); err != nil {
			return s.fail(proto.StatusInvalid, "%v", err)
		}
	}
	w.ver = p.nextVersion()
	if bad := s.planKeys(pool, req, w, o, change); bad != nil {
		return bad
	}
	return s.ecCommit(ctx, pool, p, req, w)
}

// keysChange returns what req adds to each position's transaction and
// the omap keys it may add. A guarded transaction (proto.OpOmapTxn) is
// checked on the primary's own position, which holds the version that
// stands once ecStanding returns (the primary is in the acting set): a
// failed guard is the answer, and a nil change means nothing to write (a
// resend that applied, or guards only).
func (s *Server) keysChange(pool *clustermap.Pool, req *proto.Request, t *placement.Table, o *ecObject) (change func(coll string, txn *objstore.Txn) *proto.Response, adding int, bad *proto.Response) {
	switch req.Op {
	case proto.OpOmapSet:
		adding = len(req.KVs)
	case proto.OpOmapTxn:
		own, ok := s.ownShardColl(pool, req.PG, t)
		if !ok {
			return nil, 0, s.fail(proto.StatusUnavailable, "pg %s: %s holds no position of it to check the guards on; retry", req.PG, s.id)
		}
		ot, count, bad := s.checkOmapTxn(own, req, o.exists())
		if bad != nil || ot == nil {
			return nil, 0, bad
		}
		return func(coll string, txn *objstore.Txn) *proto.Response {
			addOmapChanges(coll, req.Object, ot, count, false, txn) // planKeys creates it
			return nil
		}, len(ot.Set), nil
	}
	return func(coll string, txn *objstore.Txn) *proto.Response {
		if req.Op != proto.OpCreate {
			return s.addOp(coll, req, txn)
		}
		return nil
	}, adding, nil
}

// ownShardColl is the collection of this OSD's position in pg's acting
// set; ok false if it has none.
func (s *Server) ownShardColl(pool *clustermap.Pool, id clustermap.PGID, t *placement.Table) (coll string, ok bool) {
	_, osds := t.Positions(pool, id)
	if i := slices.Index(osds, s.id); i >= 0 {
		return shardColl(id, i), true
	}
	return "", false
}

// planKeys gives each position of the acting set its transaction and the
// meta of its shard: the same change of keys on every position, the size
// unchanged, and the version the change replaces as the meta's Prev (what
// it names for each position: planPositions). A
// change that creates the object (or makes it anew over a delete's
// tombstone) starts every shard empty, with no keys.
func (s *Server) planKeys(pool *clustermap.Pool, req *proto.Request, w *writePlan, o *ecObject, change func(coll string, txn *objstore.Txn) *proto.Response) *proto.Response {
	meta := pg.ShardMeta{Ver: pg.EVersion{Epoch: uint64(w.interval), Version: w.ver}, Size: uint64(o.sizeNow()), CanRollBack: true}
	if o.exists() {
		meta.Prev = o.plan.Ver
	}
	return s.planPositions(pool, req, w, meta, o, func(_ int, coll string, txn *objstore.Txn) *proto.Response {
		if !o.exists() {
			txn.Delete(coll, req.Object)
			txn.Put(coll, req.Object, nil)
		}
		return change(coll, txn)
	})
}

// ecKeysRead serves a read of an erasure-coded object's xattrs or omap
// from a position that holds the version that stands: the primary's own
// if it does, else the first that answers. The caller holds the object's
// lock for reading.
func (s *Server) ecKeysRead(ctx context.Context, pool *clustermap.Pool, p *pgState, req *proto.Request) *proto.Response {
	o, bad := s.ecLookup(ctx, pool, p, req.PG, req.Object)
	if bad != nil {
		return bad
	}
	if !o.exists() {
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	var errs []error
	for _, pos := range o.keyHolders(s.id) {
		r, err := s.askKeys(ctx, o.t, o.osds[pos], req.PG, pos, req)
		if err == nil {
			if req.Op == proto.OpListXattrs {
				r.KVs = userKVs(r.KVs)
			}
			return r
		}
		errs = append(errs, fmt.Errorf("position %d: %w", pos, err))
	}
	return s.fail(proto.StatusUnavailable, "pg %s: object %q: no position holding its version %s whole answered (%v); retry", req.PG, req.Object, o.plan.Ver, errors.Join(errs...))
}

// keyHolders returns the positions whose shard holds the version that
// stands (not one they keep to roll back to), the one on self first.
func (o *ecObject) keyHolders(self clustermap.OSDID) []int {
	var out []int
	for _, i := range o.plan.Keep {
		if m := o.metas[i]; m == nil || m.Holding() != o.plan.Holds(i) || m.Tombstone {
			continue
		}
		if o.osds[i] == self {
			out = append([]int{i}, out...)
		} else {
			out = append(out, i)
		}
	}
	return out
}

// askKeys runs the key read req on osd's shard of position pos, as that
// OSD holds it (proto.FlagLocal). An answer other than OK or NotFound is
// an error.
func (s *Server) askKeys(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, pos int, req *proto.Request) (*proto.Response, error) {
	fwd := *req
	fwd.Epoch, fwd.Flags, fwd.PG = t.Map().Epoch, req.Flags|proto.FlagLocal, id
	fwd.Frame, fwd.Kept = nil, false
	var r *proto.Response
	if osd == s.id {
		r = s.readObject(shardColl(id, pos), &fwd)
	} else {
		o, ok := t.Map().OSD(osd)
		if !ok || !s.peerUp(osd) {
			return nil, fmt.Errorf("%s is down", osd)
		}
		var err error
		if r, err = s.peers.Call(ctx, o.Addr, &fwd); err != nil {
			if isRefused(err) {
				s.suspect(osd, o.Addr)
			}
			return nil, fmt.Errorf("%s: %w", osd, err)
		}
	}
	if r.Status != proto.StatusOK && r.Status != proto.StatusNotFound {
		return nil, fmt.Errorf("%s: %s: %s", osd, r.Status, r.Message)
	}
	return r, nil
}

// userKVs drops the OSD's own xattrs (names starting with NUL).
func userKVs(kvs []proto.KV) []proto.KV {
	out := kvs[:0]
	for _, kv := range kvs {
		if !strings.HasPrefix(string(kv.Key), proto.ReservedPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// objectKey says whether xattr k belongs to the object, and goes with it
// wherever its keys are copied: the user's xattrs and the snapshot state,
// not what the OSD keeps of the shard itself.
func objectKey(k string) bool {
	return !strings.HasPrefix(k, proto.ReservedPrefix) || k == snapset.Xattr
}

// objectKVs keeps the xattrs objectKey names.
func objectKVs(kvs []proto.KV) []proto.KV {
	out := kvs[:0]
	for _, kv := range kvs {
		if objectKey(string(kv.Key)) {
			out = append(out, kv)
		}
	}
	return out
}

// shardKeys are an object's xattrs (objectKey) and omap.
type shardKeys struct {
	xattrs, omap []proto.KV
}

// addTo adds setting k's keys on name to txn.
func (k *shardKeys) addTo(txn *objstore.Txn, coll, name string) {
	for _, kv := range k.xattrs {
		txn.SetXattr(coll, name, string(kv.Key), kv.Value)
	}
	for _, kv := range k.omap {
		txn.OmapSet(coll, name, kv.Key, kv.Value)
	}
}

// standingKeys reads the keys of the version of o that stands from a
// position that holds it, for recovery to write with the shard it
// rebuilds.
func (s *Server) standingKeys(ctx context.Context, o *ecObject, id clustermap.PGID, name string) (*shardKeys, error) {
	var errs []error
	for _, pos := range o.keyHolders(s.id) {
		k, err := s.readKeys(ctx, o.t, o.osds[pos], id, pos, name)
		if err == nil {
			return k, nil
		}
		errs = append(errs, fmt.Errorf("position %d: %w", pos, err))
	}
	return nil, fmt.Errorf("the xattrs and omap of %q at %s: no position holding it answered: %w", name, o.plan.Ver, errors.Join(errs...))
}

// readKeys reads all of the keys of osd's shard of name, a page of omap
// at a time.
func (s *Server) readKeys(ctx context.Context, t *placement.Table, osd clustermap.OSDID, id clustermap.PGID, pos int, name string) (*shardKeys, error) {
	k := &shardKeys{}
	r, err := s.askKeys(ctx, t, osd, id, pos, &proto.Request{Op: proto.OpListXattrs, Object: name})
	if err != nil {
		return nil, err
	}
	k.xattrs = objectKVs(r.KVs)
	var start []byte
	for len(k.omap) <= maxShardOmapKeys {
		r, err := s.askKeys(ctx, t, osd, id, pos, &proto.Request{Op: proto.OpOmapList, Object: name, Start: start, Limit: 1000})
		if err != nil {
			return nil, err
		}
		k.omap = append(k.omap, r.KVs...)
		if !r.More || len(r.KVs) == 0 {
			return k, nil
		}
		start = append(append([]byte(nil), r.KVs[len(r.KVs)-1].Key...), 0)
	}
	return nil, fmt.Errorf("%q holds more than %d omap keys, more than an erasure-coded object may", name, maxShardOmapKeys)
}

// omapRoom refuses adding keys to the omap of name in coll (the primary's
// position, at the version that stands) when the object could then hold
// more than maxShardOmapKeys: rollback and recovery copy them in one
// transaction. Keys set again count twice, so it errs on the safe side.
func (s *Server) omapRoom(coll, name string, adding int) error {
	n := 0
	for start := []byte(nil); n+adding <= maxShardOmapKeys; {
		kvs, more, err := s.store.OmapList(coll, name, start, nil, 1000)
		if err != nil {
			return err
		}
		if n += len(kvs); !more || len(kvs) == 0 {
			break
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
	if n+adding > maxShardOmapKeys {
		return fmt.Errorf("%q holds %d omap keys or more and %d more would pass the %d an erasure-coded object may hold: keep large maps in a replicated pool", name, n, adding, maxShardOmapKeys)
	}
	return nil
}

// copyKeys adds to txn setting the xattrs (objectKey) and the
// omap of from on to, both in coll on this OSD.
func (s *Server) copyKeys(coll, from, to string, txn *objstore.Txn) error {
	xs, err := s.store.Xattrs(coll, from)
	if err != nil {
		return err
	}
	for k, v := range xs {
		if objectKey(k) {
			txn.SetXattr(coll, to, k, v)
		}
	}
	var start []byte
	for n := 0; n <= maxShardOmapKeys; {
		kvs, more, err := s.store.OmapList(coll, from, start, nil, 1000)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			txn.OmapSet(coll, to, kv.Key, kv.Value)
		}
		if n += len(kvs); !more || len(kvs) == 0 {
			return nil
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
	return fmt.Errorf("%q in %s holds more than %d omap keys, more than an erasure-coded object may", from, coll, maxShardOmapKeys)
}

// restoreKeys adds to txn, the rollback of name's shard, putting back the
// xattrs and omap its kept shard carries (if it carries them: a data
// write's does not, and the shard's own stay). The OSD's own xattrs are
// written after it by the caller.
func (s *Server) restoreKeys(coll, name string, txn *objstore.Txn) error {
	rb := rollbackName(name)
	_, err := s.store.GetXattr(coll, rb, shardKeysXattr)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	txn.Delete(coll, name)
	return s.copyKeys(coll, rb, name, txn)
}
