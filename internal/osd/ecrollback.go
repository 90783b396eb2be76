package osd

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Rollback state of erasure-coded shards. Each shard write keeps, in the
// transaction that makes it, what the shard needs to go back to the
// version it replaces, so a write cut short (a primary's crash, a power
// cut) that reached fewer than K positions is undone by peering
// (pg.DecideShardsPG) instead of leaving the object with no version on K
// positions:
//
//   - a put over a shard keeps the old shard (its bytes and meta) as a
//     hidden object of the same collection (rollbackName), and the new
//     meta says CanRollBack with Prev the old version: by a rename, its
//     xattrs set again on the new shard (replacesWholly), when the shard
//     has no omap; by a copy otherwise. Writes that cover every byte of
//     the shard keep it the same way; a write that
//     changes the object's xattrs or omap (proto.FlagShardKeys: a create,
//     an xattr or omap change, a delete) copies them too, marked
//     shardKeysXattr, and a rollback puts them back in place of the
//     shard's own. A data write leaves them as they are, so its rollback
//     needs no copy of them;
//   - a put that creates the shard (or replaces a tombstone, which holds
//     the same thing as no shard) says CanRollBack with a zero Prev: it
//     rolls back to absent;
//   - a delete does not remove the shard: it becomes a tombstone at the
//     delete's version, its old shard kept as for a put, but renamed
//     (objstore.Txn.Rename) rather than copied, its keys with it. Reads, listings
//     and exclusive puts take a tombstone for an absent object.
//
// One level of rollback is enough: writes to one object are serialized
// by its primary's object lock, and the primary sends the next write only
// once the last one was answered, so a position holds at most one write
// that may not be complete. Once a write is complete (every position of
// its write set holds it durably: the primary acknowledges it), the
// primary trims its rollback state (trimShards; a trimmed tombstone is
// deleted); a trim lost on the way only leaves state the next write to
// the object or the next clean peering drops.
//
// On each OSD, what a shard write reads of the shard and what it writes
// are one step under the shard's lock (shardLock), so a trim or rollback
// of the same object never lands between them.

// rollbackPrefix starts the names of the objects that keep a shard's
// previous version; rollbackHashed those of objects whose names are too
// long to take the prefix (the name's SHA-256 then).
const (
	rollbackPrefix = proto.ReservedPrefix + "r"
	rollbackHashed = proto.ReservedPrefix + "R"
)

// rollbackName names the hidden object that keeps the previous shard of
// object name. It starts with NUL, so listings, peering and reads never
// take it for an object, and it lives in the shard's collection, so it
// goes with it (strays, pool removal).
func rollbackName(name string) string {
	if len(rollbackPrefix)+len(name) <= objstore.MaxNameLen {
		return rollbackPrefix + name
	}
	h := sha256.Sum256([]byte(name))
	return rollbackHashed + hex.EncodeToString(h[:])
}

// shardLocks serialize, per shard, the read of its state and the
// transaction built from it (writes, rollbacks, trims).
type shardLocks struct {
	locks [256]sync.Mutex
}

// lockAll takes the locks of every (coll, name) in ascending order, so
// two callers never wait for each other; it returns their release.
func (l *shardLocks) lockAll(seed maphash.Seed, coll string, names []string) func() {
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = coll + "/" + n
	}
	return l.lockKeys(seed, keys)
}

// lockKeys is lockAll for shards of several collections, each key
// "coll/name".
func (l *shardLocks) lockKeys(seed maphash.Seed, keys []string) func() {
	idx := make([]int, 0, len(keys))
	for _, k := range keys {
		idx = append(idx, int(maphash.String(seed, k)%uint64(len(l.locks))))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		l.locks[i].Lock()
	}
	return func() {
		for _, i := range idx {
			l.locks[i].Unlock()
		}
	}
}

// shardMeta reads a shard's meta; found false if it holds none.
func (s *Server) shardMeta(coll, name string) (pg.ShardMeta, bool, error) {
	raw, err := s.store.GetXattr(coll, name, shardMetaXattr)
	if errors.Is(err, objstore.ErrNotFound) {
		return pg.ShardMeta{}, false, nil
	}
	if err != nil {
		return pg.ShardMeta{}, false, err
	}
	m, err := pg.DecodeShardMeta(raw)
	if err != nil {
		return pg.ShardMeta{}, false, fmt.Errorf("shard %q in %s: %w", name, coll, err)
	}
	return m, true, nil
}

// keepPartial keeps an undo record for a partial write's rollback
// (ecundo.go) when txn changes few of the shard's bytes and keys; kept
// false: keep the whole shard.
func (s *Server) keepPartial(coll, name string, txn *objstore.Txn, held heldShard) (kept bool, err error) {
	c := txn.ChangesOf(coll, name)
	if c.Whole {
		return false, nil // a put or delete: no lookup of the shard for nothing
	}
	info, err := s.store.Stat(coll, name)
	if err != nil {
		return false, err
	}
	return s.keepUndo(coll, name, uint64(info.Size), c, txn, held.old, held.meta.Trimmed())
}

// keepRollBack adds to txn, a shard write of name in coll that leaves meta
// next, what the shard needs to roll back to what it holds now, and the
// meta itself. A shard whose meta or bytes cannot be read (damaged) keeps
// nothing: it cannot roll back, and peering rebuilds it if its write does
// not stand. With keys, the kept shard carries the object's xattrs and
// omap as well. held is the shard's meta as read under the shard's lock,
// which the caller holds.
func (s *Server) keepRollBack(coll, name string, next pg.ShardMeta, txn *objstore.Txn, keys bool, held heldShard) error {
	rb := rollbackName(name)
	next.CanRollBack, next.Prev, next.PrevHeld = true, pg.EVersion{}, nil
	old, found, err := held.meta, held.found, held.err
	if err != nil || !found || old.Ver != next.Ver {
		// What the shard kept inline goes with the write it belongs to
		// (keepUndo may keep this write's there again).
		txn.RmXattr(coll, name, inlineUndoXattr)
	}
	switch {
	case err != nil && objstore.IsCorruption(err) || errors.Is(err, pg.ErrBadShardMeta):
		next.CanRollBack = false
		txn.Delete(coll, rb)
	case err != nil:
		return err
	case found && old.Ver == next.Ver:
		// The same write sent again (its answer was lost): what it
		// rolls back to has not changed.
		next.Prev, next.CanRollBack, next.PrevHeld = old.Prev, old.CanRollBack, old.PrevHeld
	case !found || old.Tombstone:
		txn.Delete(coll, rb) // rolls back to absent
	case keys && txn.ChangesOf(coll, name).Whole:
		// A delete: the old shard, keys and all, becomes the kept one
		// by a rename, however large it is.
		pre := &objstore.Txn{}
		pre.Rename(coll, name, rb)
		txn.Prepend(pre)
		txn.RmXattr(coll, rb, inlineUndoXattr)
		txn.SetXattr(coll, rb, shardMetaXattr, old.Trimmed().Encode())
		txn.SetXattr(coll, rb, shardKeysXattr, []byte{1})
		next.Prev, next.PrevHeld = old.Ver, old.Held
	case s.replacesWholly(coll, name, txn):
		// A put over the shard, or a write of every byte of it: the old
		// shard becomes the kept one by a rename, however large it is,
		// and its keys are set again on the new one.
		pre := &objstore.Txn{}
		pre.Rename(coll, name, rb)
		txn.Prepend(pre)
		if err := s.copyKeys(coll, name, name, txn); err != nil {
			return err
		}
		txn.RmXattr(coll, rb, inlineUndoXattr)
		txn.SetXattr(coll, rb, shardMetaXattr, old.Trimmed().Encode())
		next.Prev, next.PrevHeld = old.Ver, old.Held
	default:
		kept, err := s.keepPartial(coll, name, txn, held)
		if err == nil && kept {
			next.Prev, next.PrevHeld = old.Ver, old.Held
			break
		}
		var data []byte
		if err == nil {
			data, err = s.store.Read(coll, name, 0, 0)
		}
		if objstore.IsCorruption(err) {
			next.CanRollBack = false
			txn.Delete(coll, rb)
			break
		}
		if err != nil {
			return err
		}
		txn.Delete(coll, rb)
		txn.Put(coll, rb, data)
		txn.SetXattr(coll, rb, shardMetaXattr, old.Trimmed().Encode())
		if keys {
			txn.SetXattr(coll, rb, shardKeysXattr, []byte{1})
			if err := s.copyKeys(coll, name, rb, txn); err != nil {
				return err
			}
		}
		next.Prev, next.PrevHeld = old.Ver, old.Held
	}
	txn.SetXattr(coll, name, shardMetaXattr, next.Encode())
	return nil
}

// replacesWholly says whether txn, a data write of name's shard in coll,
// leaves none of its bytes: it puts the shard, or its writes cover every
// byte the shard holds. Only a shard whose keys are the object's own
// (objectKey) besides its meta and version, and with no omap, is
// replaced by a rename: copyKeys sets those again on the new shard.
func (s *Server) replacesWholly(coll, name string, txn *objstore.Txn) bool {
	c := txn.ChangesOf(coll, name)
	if !c.Whole && !slices.ContainsFunc(c.Ranges, func(r [2]uint64) bool { return r[0] == 0 }) {
		return false // the common small write: no lookup
	}
	info, err := s.store.Stat(coll, name)
	if err != nil || !c.Whole && !coversFromZero(c.Ranges, uint64(info.Size)) {
		return false
	}
	xs, err := s.store.Xattrs(coll, name)
	if err != nil {
		return false
	}
	for k := range xs {
		if !objectKey(k) && k != shardMetaXattr && k != versionXattr && k != inlineUndoXattr {
			return false
		}
	}
	kvs, _, err := s.store.OmapList(coll, name, nil, nil, 1)
	return err == nil && len(kvs) == 0
}

// coversFromZero says whether ranges, together, cover [0, size).
func coversFromZero(ranges [][2]uint64, size uint64) bool {
	rs := slices.Clone(ranges)
	slices.SortFunc(rs, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	end := uint64(0)
	for _, r := range rs {
		if r[0] > end {
			break
		}
		end = max(end, r[1])
	}
	return end >= size
}

// applyShardWrite applies a client write's transaction to this OSD's
// shard of name, with its rollback state and its meta. A partial write
// (a write at an offset, a truncate) changes bytes of the shard as it
// stands, so it first checks that the shard holds the version the write
// replaces (expectShard), as does a change of its xattrs or omap. The
// rollback state is a put's (the whole old shard, with its xattrs and omap
// if the write changes them) or, for a partial write changing a few bytes,
// an undo record of them (keepPartial). flags are the write's
// proto.FlagShardPartial, proto.FlagShardKeys and proto.FlagShardXor
// (parity deltas, XORed into the shard's bytes first: xorOld).
func (s *Server) applyShardWrite(coll, name string, meta pg.ShardMeta, txn *objstore.Txn, flags uint32) error {
	if flags&proto.FlagShardXor != 0 && flags&proto.FlagShardPartial == 0 {
		return fmt.Errorf("shard write of %q: parity deltas without the version they apply to (FlagShardXor without FlagShardPartial): %w", name, objstore.ErrInvalid)
	}
	defer s.shards.lockAll(s.seed, coll, []string{name})()
	var held heldShard
	held.meta, held.found, held.err = s.shardMeta(coll, name)
	if flags&proto.FlagShardPartial != 0 {
		again, err := expectShard(held, meta)
		switch {
		case err != nil:
			return err
		case again && flags&proto.FlagShardXor != 0:
			return nil // deltas sent again: applied once
		case flags&proto.FlagShardXor != 0:
			if err := s.xorOld(coll, name, txn, &held); err != nil {
				return err
			}
		}
	}
	if err := s.keepRollBack(coll, name, meta, txn, flags&proto.FlagShardKeys != 0, held); err != nil {
		return err
	}
	return s.apply(txn)
}

// errShardVersion: a partial write found its shard at another version
// than the one it replaces. The shard refuses it and the primary has the
// position rebuilt (it is marked missing).
var errShardVersion = errors.New("the shard is not at the version the write replaces")

// heldShard is what a write's apply read of its shard first, once, under
// the shard's lock: its meta (shardMeta's results) and, for parity deltas,
// the old bytes under each (xorOld), which its undo record keeps.
type heldShard struct {
	meta  pg.ShardMeta
	found bool
	err   error
	old   map[[2]uint64][]byte // by [off, end)
}

// expectShard checks that a shard whose meta is held holds next.Prev, the
// version a partial write replaces (zero: no shard, or a tombstone), or
// already holds next.Ver (again: the write sent again). A shard a partial
// write skipped holds an older version than the one the primary found
// standing: next.Prev is the one it names for this position (its
// Holding). A shard whose meta is damaged holds no version.
func expectShard(held heldShard, next pg.ShardMeta) (again bool, err error) {
	old, found, err := held.meta, held.found, held.err
	switch {
	case err != nil && !objstore.IsCorruption(err) && !errors.Is(err, pg.ErrBadShardMeta):
		return false, err
	case err != nil:
		return false, fmt.Errorf("%w (%s): %v", errShardVersion, next.Prev, err)
	case found && old.Ver == next.Ver:
		return true, nil
	case next.Prev == (pg.EVersion{}) && (!found || old.Tombstone):
		return false, nil
	case found && !old.Tombstone && old.Holding() == next.Prev:
		return false, nil
	case !found:
		return false, fmt.Errorf("%w (%s): it holds none", errShardVersion, next.Prev)
	}
	return false, fmt.Errorf("%w (%s): it holds %s (tombstone: %v)", errShardVersion, next.Prev, old.Ver, old.Tombstone)
}

// xorOld turns the parity deltas txn writes to name (proto.FlagShardXor)
// into the bytes they make, each XORed with the shard's bytes at its
// offset. Bytes the shard cannot give (failing their checksums, or past
// its end: the primary's view of its length is wrong) refuse the write
// as a shard at another version does, so the position is rebuilt first.
// The old bytes go into held. The caller holds the shard's lock and
// checked its version.
func (s *Server) xorOld(coll, name string, txn *objstore.Txn, held *heldShard) error {
	held.old = map[[2]uint64][]byte{}
	return txn.EachWrite(coll, name, func(off uint64, delta []byte) error {
		old, err := s.store.Read(coll, name, off, uint64(len(delta)))
		switch {
		case objstore.IsCorruption(err):
			return fmt.Errorf("%w: its bytes at [%d, +%d) for a parity delta: %v", errShardVersion, off, len(delta), err)
		case err != nil:
			return err
		case len(old) != len(delta):
			return fmt.Errorf("%w: %d of its bytes at [%d, +%d) for a parity delta", errShardVersion, len(old), off, len(delta))
		}
		subtle.XORBytes(delta, delta, old)
		held.old[[2]uint64{off, off + uint64(len(old))}] = old
		return nil
	})
}

// rollBackTxn adds to txn the rollback of name's shard as entry e says:
// back to its kept shard, or gone when e.To is zero. A shard already at
// e.To (rolled back before) needs nothing. The caller holds its lock.
func (s *Server) rollBackTxn(coll string, e proto.ShardEntry, txn *objstore.Txn) error {
	ver, to := entryVer(e), pg.EVersion{Epoch: e.To[0], Version: e.To[1]}
	cur, found, err := s.shardMeta(coll, e.Object)
	switch {
	case err != nil:
		return err
	case !found && to == (pg.EVersion{}) || found && cur.Ver == to && !cur.CanRollBack:
		return nil
	case !found || cur.Ver != ver || !cur.CanRollBack || cur.Prev != to:
		return fmt.Errorf("shard %q in %s is not at %s rolling back to %s (it holds %+v): it changed since peering listed it", e.Object, coll, ver, to, cur)
	}
	rb := rollbackName(e.Object)
	if to == (pg.EVersion{}) {
		txn.Delete(coll, e.Object)
		txn.Delete(coll, rb)
		return nil
	}
	k, err := s.keptOf(coll, e.Object)
	if err == nil && (!k.found || k.meta.Ver != to) {
		err = fmt.Errorf("shard %q in %s: the shard it keeps to roll back to %s is missing or at %s", e.Object, coll, to, k.meta.Ver)
	}
	if err != nil {
		return err
	}
	switch {
	case k.isUndo:
		undoTxn(coll, e.Object, k.undo, k.old, txn)
		if k.inline {
			break // it keeps no keys
		}
		if err := s.undoKeysTxn(coll, e.Object, txn); err != nil {
			return err
		}
	default:
		data, err := s.store.Read(coll, rb, 0, 0)
		if objstore.IsCorruption(err) {
			// A delete keeps the old shard as it was, damage and all: the
			// position holds none, and is rebuilt from the others.
			txn.Delete(coll, e.Object)
			txn.Delete(coll, rb)
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.restoreKeys(coll, e.Object, txn); err != nil {
			return err
		}
		txn.Put(coll, e.Object, data)
	}
	txn.RmXattr(coll, e.Object, inlineUndoXattr)
	txn.SetXattr(coll, e.Object, shardMetaXattr, k.meta.Trimmed().Encode())
	txn.SetXattr(coll, e.Object, versionXattr, to.Encode())
	txn.Delete(coll, rb)
	return nil
}

// trimTxn adds to txn the trim of name's shard at e.Ver: its rollback
// state goes, and a tombstone goes for good (one that could not keep the
// old shard, which was damaged, too). The rollback state of an older write
// goes too: a write complete on every position completes every write
// before it, and a position the newest skipped still holds its own last
// write's state (shardheld.go). A shard at a newer version is left alone
// (that write keeps its own state), and so is an older tombstone. The
// caller holds its lock.
func (s *Server) trimTxn(coll string, e proto.ShardEntry, txn *objstore.Txn) error {
	ver := entryVer(e)
	cur, found, err := s.shardMeta(coll, e.Object)
	if err != nil || !found || ver.Less(cur.Ver) || !cur.CanRollBack && !cur.Tombstone || cur.Tombstone && cur.Ver != ver {
		return err
	}
	txn.Delete(coll, rollbackName(e.Object))
	if cur.Tombstone {
		txn.Delete(coll, e.Object)
	} else {
		txn.RmXattr(coll, e.Object, inlineUndoXattr)
		txn.SetXattr(coll, e.Object, shardMetaXattr, cur.Trimmed().Encode())
	}
	return nil
}

// applyShardEntries runs OpShardRollBack or OpShardTrim on this OSD's
// shards in coll, as one transaction.
func (s *Server) applyShardEntries(coll string, op proto.Op, es []proto.ShardEntry) error {
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Object
	}
	defer s.shards.lockAll(s.seed, coll, names)()
	txn := &objstore.Txn{}
	for _, e := range es {
		add := s.trimTxn
		if op == proto.OpShardRollBack {
			add = s.rollBackTxn
		}
		if err := add(coll, e, txn); err != nil {
			return err
		}
	}
	if txn.Len() == 0 {
		return nil
	}
	return s.apply(txn)
}
