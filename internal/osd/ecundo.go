package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Undo records of partial shard writes. A write at an offset or a truncate
// changes a few bytes of a shard, and a change of keys a few keys, so
// instead of the whole old shard its rollback object (rollbackName) keeps
// only the old bytes of the ranges the write changes, one after another,
// with an xattr (shardUndoXattr) listing the ranges and the shard's old
// length, and in its omap the old value (or absence) of each xattr and
// omap key the write sets or removes. A rollback truncates the shard to
// that length, writes the old bytes back and puts back the old keys; a read
// of the previous shard (proto.FlagPrevShard) lays the old bytes over the
// shard's bytes as they are. A write that changes more than half the
// shard, or more than maxUndoKeys keys, keeps the whole shard as a put
// does.

// shardUndoXattr marks a kept shard that is an undo record.
const shardUndoXattr = proto.ReservedPrefix + "eu"

// maxUndoRanges bounds the ranges of one undo record (its xattr's size);
// maxUndoKeys the keys it keeps.
const (
	maxUndoRanges = 1024
	maxUndoKeys   = 10_000
)

// shardUndo is an undo record: the shard's old length and the ranges of
// it the write changes, sorted and disjoint, within that length.
type shardUndo struct {
	size   uint64
	ranges [][2]uint64 // [off, end)
}

// bytes is how many old bytes the record keeps.
func (u *shardUndo) bytes() uint64 {
	var n uint64
	for _, r := range u.ranges {
		n += r[1] - r[0]
	}
	return n
}

// undoOf is the undo record of changes c to a shard of length size: the
// ranges c writes or cuts, clipped to size and merged. ok is false when
// keeping the whole shard is as cheap or the ranges are too many.
func undoOf(c objstore.Changes, size uint64) (u shardUndo, ok bool) {
	rs := make([][2]uint64, 0, len(c.Ranges)+1)
	for _, r := range c.Ranges {
		if r[0] < size && r[1] > r[0] {
			rs = append(rs, [2]uint64{r[0], min(r[1], size)})
		}
	}
	if c.MinTruncate >= 0 && uint64(c.MinTruncate) < size {
		rs = append(rs, [2]uint64{uint64(c.MinTruncate), size})
	}
	slices.SortFunc(rs, func(a, b [2]uint64) int { return cmpU64(a[0], b[0]) })
	u = shardUndo{size: size}
	for _, r := range rs {
		if n := len(u.ranges); n > 0 && r[0] <= u.ranges[n-1][1] {
			u.ranges[n-1][1] = max(u.ranges[n-1][1], r[1])
			continue
		}
		u.ranges = append(u.ranges, r)
	}
	return u, !c.Whole && len(u.ranges) <= maxUndoRanges && (u.bytes() == 0 || 2*u.bytes() < size)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// encode lays out the record: size, count, then each range's offset and
// end, as uvarints.
func (u *shardUndo) encode() []byte {
	b := binary.AppendUvarint(nil, u.size)
	b = binary.AppendUvarint(b, uint64(len(u.ranges)))
	for _, r := range u.ranges {
		b = binary.AppendUvarint(binary.AppendUvarint(b, r[0]), r[1])
	}
	return b
}

var errBadUndo = errors.New("malformed undo record")

// decodeShardUndo decodes and checks a record: at most maxUndoRanges
// ranges, sorted, disjoint, not empty, within size.
func decodeShardUndo(b []byte) (shardUndo, error) {
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n != len(binary.AppendUvarint(nil, v)) { // one encoding per value
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var u shardUndo
	size, ok1 := next()
	count, ok2 := next()
	if !ok1 || !ok2 || count > maxUndoRanges {
		return u, errBadUndo
	}
	u.size = size
	var end uint64
	for i := uint64(0); i < count; i++ {
		off, ok1 := next()
		to, ok2 := next()
		if !ok1 || !ok2 || off >= to || to > size || (i > 0 && off <= end) {
			return u, errBadUndo
		}
		u.ranges, end = append(u.ranges, [2]uint64{off, to}), to
	}
	if len(b) != 0 {
		return u, errBadUndo
	}
	return u, nil
}

// keepUndo adds to txn the undo record of changes c, the partial write
// txn makes to name's shard, whose length is size; ok false when it should
// keep the whole shard instead. read holds old bytes of ranges the caller
// read already (by [off, end)). The caller holds the shard's lock.
func (s *Server) keepUndo(coll, name string, size uint64, c objstore.Changes, txn *objstore.Txn, read map[[2]uint64][]byte) (ok bool, err error) {
	u, ok := undoOf(c, size)
	if !ok {
		return false, nil
	}
	keys, ok, err := s.oldKeys(coll, name, c)
	if err != nil || !ok {
		return false, err
	}
	old := make([]byte, 0, u.bytes())
	for _, r := range u.ranges {
		b, ok := read[r]
		if !ok {
			if b, err = s.store.Read(coll, name, r[0], r[1]-r[0]); err != nil {
				return false, err
			}
		}
		if uint64(len(b)) != r[1]-r[0] {
			return false, fmt.Errorf("shard %q in %s: read %d bytes of [%d, %d) within its length %d", name, coll, len(b), r[0], r[1], size)
		}
		old = append(old, b...)
	}
	rb := rollbackName(name)
	txn.Delete(coll, rb)
	txn.Put(coll, rb, old)
	txn.SetXattr(coll, rb, shardUndoXattr, u.encode())
	for _, kv := range keys {
		txn.OmapSet(coll, rb, kv.Key, kv.Value)
	}
	return true, nil
}

// undoKept returns the undo record name's rollback object holds, if it
// is one, with its old bytes.
func (s *Server) undoKept(coll, name string) (u shardUndo, old []byte, isUndo bool, err error) {
	rb := rollbackName(name)
	raw, err := s.store.GetXattr(coll, rb, shardUndoXattr)
	if errors.Is(err, objstore.ErrNotFound) {
		return u, nil, false, nil
	}
	if err == nil {
		u, err = decodeShardUndo(raw)
	}
	if err == nil {
		old, err = s.store.Read(coll, rb, 0, 0)
	}
	if err == nil && uint64(len(old)) != u.bytes() {
		err = fmt.Errorf("%w: %d old bytes for ranges of %d", errBadUndo, len(old), u.bytes())
	}
	if err != nil {
		return u, nil, true, fmt.Errorf("shard %q in %s: its undo record: %w", name, coll, err)
	}
	return u, old, true, nil
}

// undoTxn adds to txn what puts name's shard back as u and old say.
func undoTxn(coll, name string, u shardUndo, old []byte, txn *objstore.Txn) {
	txn.Truncate(coll, name, u.size)
	for _, r := range u.ranges {
		n := r[1] - r[0]
		txn.Write(coll, name, r[0], old[:n])
		old = old[n:]
	}
}

// prevShardRange returns bytes [off, off+n) (n 0: to its end) of the
// previous shard: the shard as it is, cut or padded to u.size, with the
// undo record's old bytes laid over it.
func (s *Server) prevShardRange(coll, name string, u shardUndo, old []byte, off, n uint64) ([]byte, error) {
	if off >= u.size {
		return nil, nil
	}
	end := u.size
	if n > 0 {
		end = min(end, off+n)
	}
	buf := make([]byte, end-off)
	cur, err := s.store.Read(coll, name, off, end-off)
	if err != nil {
		return nil, err
	}
	copy(buf, cur)
	for _, r := range u.ranges {
		lo, hi := max(r[0], off), min(r[1], end)
		if lo < hi {
			copy(buf[lo-off:hi-off], old[lo-r[0]:hi-r[0]])
		}
		old = old[r[1]-r[0]:]
	}
	return buf, nil
}

// Kept keys of an undo record: an omap entry of the rollback object whose
// key is keyXattr or keyOmap and the key's name, and whose value is
// keyAbsent, or keyValue and the old value.
const (
	keyXattr  = 'x'
	keyOmap   = 'o'
	keyAbsent = 'a'
	keyValue  = 'v'
)

// oldKeys returns the kept keys of changes c to name's keys: the old
// value or absence of each xattr and omap key c sets or removes, and of
// each key in the ranges it removes. ok is false past maxUndoKeys or for
// a key too long to keep.
func (s *Server) oldKeys(coll, name string, c objstore.Changes) (kept []objstore.KV, ok bool, err error) {
	seen := map[string]bool{}
	keep := func(kind byte, key, old []byte, found bool) bool {
		k := append([]byte{kind}, key...)
		if seen[string(k)] {
			return true
		}
		seen[string(k)] = true
		v := []byte{keyAbsent}
		if found {
			v = append([]byte{keyValue}, old...)
		}
		kept = append(kept, objstore.KV{Key: k, Value: v})
		return len(kept) <= maxUndoKeys && len(k) <= objstore.MaxOmapKeyLen
	}
	for _, x := range c.Xattrs {
		if x == versionXattr || x == shardMetaXattr {
			continue // a rollback sets them itself
		}
		v, err := s.store.GetXattr(coll, name, x)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return nil, false, err
		}
		if !keep(keyXattr, []byte(x), v, err == nil) {
			return nil, false, nil
		}
	}
	for _, k := range c.OmapKeys {
		v, err := s.store.OmapGet(coll, name, k)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return nil, false, err
		}
		if !keep(keyOmap, k, v, err == nil) {
			return nil, false, nil
		}
	}
	for _, r := range c.OmapRanges {
		for start := r[0]; ; {
			kvs, more, err := s.store.OmapList(coll, name, start, r[1], 1000)
			if err != nil {
				return nil, false, err
			}
			for _, kv := range kvs {
				if !keep(keyOmap, kv.Key, kv.Value, true) {
					return nil, false, nil
				}
			}
			if !more || len(kvs) == 0 {
				break
			}
			start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
		}
	}
	return kept, true, nil
}

// undoKeysTxn adds to txn putting back the keys name's undo record keeps.
func (s *Server) undoKeysTxn(coll, name string, txn *objstore.Txn) error {
	rb := rollbackName(name)
	for start, n := []byte(nil), 0; n <= maxUndoKeys; {
		kvs, more, err := s.store.OmapList(coll, rb, start, nil, 1000)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			if err := undoKey(coll, name, kv, txn); err != nil {
				return fmt.Errorf("shard %q in %s: %w", name, coll, err)
			}
		}
		if n += len(kvs); !more || len(kvs) == 0 {
			return nil
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].Key...), 0)
	}
	return fmt.Errorf("shard %q in %s: its undo record keeps more than %d keys", name, coll, maxUndoKeys)
}

// undoKey adds to txn putting back one kept key.
func undoKey(coll, name string, kv objstore.KV, txn *objstore.Txn) error {
	if len(kv.Key) < 1 || len(kv.Value) < 1 || kv.Value[0] != keyAbsent && kv.Value[0] != keyValue {
		return fmt.Errorf("%w: kept key %q", errBadUndo, kv.Key)
	}
	key, absent, old := kv.Key[1:], kv.Value[0] == keyAbsent, kv.Value[1:]
	switch kv.Key[0] {
	case keyXattr:
		if absent {
			txn.RmXattr(coll, name, string(key))
		} else {
			txn.SetXattr(coll, name, string(key), old)
		}
	case keyOmap:
		if absent {
			txn.OmapRm(coll, name, key)
		} else {
			txn.OmapSet(coll, name, key, old)
		}
	default:
		return fmt.Errorf("%w: kept key %q", errBadUndo, kv.Key)
	}
	return nil
}
