package proto

import (
	"encoding/binary"
	"fmt"
)

// ShardEntry is one object of an OpShardRollBack or OpShardTrim: the
// version (interval epoch, version) its shard must hold for the entry to
// apply, and, for a rollback, the version the shard goes back to (zero:
// the shard goes).
type ShardEntry struct {
	Object string
	Ver    [2]uint64
	To     [2]uint64
}

// ShardEntriesVersion is the first byte of encoded shard entries; a
// decoder refuses any other value.
const ShardEntriesVersion = 1

// MaxShardEntries bounds the entries of one OpShardRollBack or
// OpShardTrim: a sender splits longer lists.
const MaxShardEntries = 1024

// AppendShardEntries appends the encoding of es to dst:
//
//	[1 version][uvarint n] n × ([uvarint name length][name][8 ver epoch][8 ver][8 to epoch][8 to])
//
// integers big-endian.
func AppendShardEntries(dst []byte, es []ShardEntry) []byte {
	dst = append(dst, ShardEntriesVersion)
	dst = binary.AppendUvarint(dst, uint64(len(es)))
	for _, e := range es {
		dst = binary.AppendUvarint(dst, uint64(len(e.Object)))
		dst = append(dst, e.Object...)
		for _, v := range [...]uint64{e.Ver[0], e.Ver[1], e.To[0], e.To[1]} {
			dst = binary.BigEndian.AppendUint64(dst, v)
		}
	}
	return dst
}

// DecodeShardEntries reads what AppendShardEntries wrote, checking
// MaxShardEntries and each name (ValidateObjectName).
func DecodeShardEntries(b []byte) ([]ShardEntry, error) {
	bad := func(format string, args ...any) ([]ShardEntry, error) {
		return nil, &decodeError{"proto: shard entries: " + fmt.Sprintf(format, args...)}
	}
	if len(b) == 0 || b[0] != ShardEntriesVersion {
		return bad("not version %d", ShardEntriesVersion)
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > MaxShardEntries || k != uvarintLen(n) {
		return bad("bad count")
	}
	b = b[k:]
	es := make([]ShardEntry, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || k != uvarintLen(l) || l > MaxObjectNameLen || uint64(len(b)-k) < l+32 {
			return bad("entry %d is truncated or its name too long", len(es))
		}
		e := ShardEntry{Object: string(b[k : k+int(l)])}
		if err := ValidateObjectName(e.Object); err != nil {
			return bad("entry %d: %v", len(es), err)
		}
		b = b[k+int(l):]
		e.Ver = [2]uint64{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
		e.To = [2]uint64{binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:])}
		es = append(es, e)
		b = b[32:]
	}
	if len(b) != 0 {
		return bad("%d bytes after the last entry", len(b))
	}
	return es, nil
}

// uvarintLen is the length of v's canonical uvarint encoding.
func uvarintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}
