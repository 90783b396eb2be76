package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
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
//
// A record that keeps no keys and at most maxInlineUndo old bytes (the
// small writes of a volume) lives on the shard itself, as one xattr
// (inlineUndoXattr) holding the previous meta, the ranges and the old
// bytes: the write then creates no rollback object, and its trim removes
// one key instead of deleting an object, whose xattrs and omap take a scan
// of the index to find. The shard holds that xattr exactly while its
// rollback state is inline: every write, rollback and trim that sets its
// meta sets or removes it too.

// shardUndoXattr marks a kept shard that is an undo record.
const shardUndoXattr = proto.ReservedPrefix + "eu"

// maxUndoRanges bounds the ranges of one undo record (its xattr's size);
// maxUndoKeys the keys it keeps.
const (
	maxUndoRanges = 1024
	maxUndoKeys   = 10_000
)

// inlineUndoXattr holds a shard's own undo record; maxInlineUndo bounds
// the old bytes it keeps, well within an xattr's value.
const (
	inlineUndoXattr = proto.ReservedPrefix + "ei"
	maxInlineUndo   = 16 << 10
	// inlineUndoHeadMax is room for a record's head (a meta and its
	// ranges) before its old bytes; a longer one only grows the buffer.
	inlineUndoHeadMax = 128
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
// txn makes to name's shard, whose length is size, with prev, the meta of
// the shard it replaces; ok false when it should keep the whole shard
// instead. read holds old bytes of ranges the caller read already (by
// [off, end)). The caller holds the shard's lock.
func (s *Server) keepUndo(coll, name string, size uint64, c objstore.Changes, txn *objstore.Txn, read map[[2]uint64][]byte, prev pg.ShardMeta) (ok bool, err error) {
	u, ok := undoOf(c, size)
	if !ok {
		return false, nil
	}
	keys, ok, err := s.oldKeys(coll, name, c)
	if err != nil || !ok {
		return false, err
	}
	// Inline, the old bytes go straight after the record's head.
	inline := len(keys) == 0 && u.bytes() <= maxInlineUndo
	var old []byte
	if inline {
		old = appendInlineUndoHead(make([]byte, 0, inlineUndoHeadMax+u.bytes()), prev, u)
	} else {
		old = make([]byte, 0, u.bytes())
	}
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
	if inline {
		txn.SetXattr(coll, name, inlineUndoXattr, old)
		return true, nil
	}
	txn.RmXattr(coll, name, inlineUndoXattr)
	txn.Put(coll, rb, old)
	txn.SetXattr(coll, rb, shardUndoXattr, u.encode())
	txn.SetXattr(coll, rb, shardMetaXattr, prev.Encode())
	for _, kv := range keys {
		txn.OmapSet(coll, rb, kv.Key, kv.Value)
	}
	return true, nil
}

// encodeInlineUndo lays out an inline undo record: the previous meta and
// the ranges, each after its length (a uvarint), then the old bytes.
func encodeInlineUndo(prev pg.ShardMeta, u shardUndo, old []byte) []byte {
	return append(appendInlineUndoHead(nil, prev, u), old...)
}

// appendInlineUndoHead appends an inline undo record's head (all but its
// old bytes) to b.
func appendInlineUndoHead(b []byte, prev pg.ShardMeta, u shardUndo) []byte {
	m, r := prev.Encode(), u.encode()
	b = append(binary.AppendUvarint(b, uint64(len(m))), m...)
	return append(binary.AppendUvarint(b, uint64(len(r))), r...)
}

// decodeInlineUndo decodes and checks what encodeInlineUndo wrote: a meta
// without rollback state, well-formed ranges, and as many old bytes as
// they cover.
func decodeInlineUndo(b []byte) (prev pg.ShardMeta, u shardUndo, old []byte, err error) {
	part := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		p := b[k : k+int(n)]
		b = b[k+int(n):]
		return p, true
	}
	m, ok1 := part()
	r, ok2 := part()
	if !ok1 || !ok2 {
		return prev, u, nil, errBadUndo
	}
	if prev, err = pg.DecodeShardMeta(m); err != nil {
		return prev, u, nil, fmt.Errorf("%w: %v", errBadUndo, err)
	}
	if u, err = decodeShardUndo(r); err != nil {
		return prev, u, nil, err
	}
	if prev.CanRollBack || uint64(len(b)) != u.bytes() {
		return prev, u, nil, errBadUndo
	}
	return prev, u, b, nil
}

// keptShard is what a shard keeps to roll back to: the previous shard's
// meta (found false: it keeps none) and either an undo record to lay over
// the shard's bytes (isUndo; inline: on the shard itself) or the whole
// old shard, the rollback object.
type keptShard struct {
	meta   pg.ShardMeta
	found  bool
	isUndo bool
	inline bool
	undo   shardUndo
	old    []byte
}

// keptOf reads what name's shard keeps to roll back to.
func (s *Server) keptOf(coll, name string) (k keptShard, err error) {
	raw, err := s.store.GetXattr(coll, name, inlineUndoXattr)
	if err == nil {
		k.found, k.isUndo, k.inline = true, true, true
		if k.meta, k.undo, k.old, err = decodeInlineUndo(raw); err != nil {
			return k, fmt.Errorf("shard %q in %s: its undo record: %w", name, coll, err)
		}
		return k, nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return k, err
	}
	if k.meta, k.found, err = s.shardMeta(coll, rollbackName(name)); err != nil || !k.found {
		return k, err
	}
	k.undo, k.old, k.isUndo, err = s.rollbackUndo(coll, name)
	return k, err
}

// rollbackUndo returns the undo record name's rollback object holds, if
// it is one, with its old bytes.
func (s *Server) rollbackUndo(coll, name string) (u shardUndo, old []byte, isUndo bool, err error) {
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
		if x == versionXattr || x == shardMetaXattr || x == inlineUndoXattr {
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
