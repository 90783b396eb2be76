package proto

import (
	"encoding/binary"
	"fmt"

	"github.com/cairn-storage/cairn/internal/clustermap"
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
	return appendEntryList(dst, es)
}

func appendEntryList(dst []byte, es []ShardEntry) []byte {
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

// PGShardEntries are the entries of one PG in an OpShardTrims.
type PGShardEntries struct {
	PG      clustermap.PGID
	Entries []ShardEntry
}

// AppendPGShardEntries appends the encoding of gs, the trims of several
// PGs for one OSD, to dst:
//
//	[1 version][uvarint groups] groups × ([uvarint pool][uvarint seed][uvarint n] n × entry)
//
// each entry as in AppendShardEntries. All groups together hold at most
// MaxShardEntries entries.
func AppendPGShardEntries(dst []byte, gs []PGShardEntries) []byte {
	dst = append(dst, ShardEntriesVersion)
	dst = binary.AppendUvarint(dst, uint64(len(gs)))
	for _, g := range gs {
		dst = binary.AppendUvarint(dst, uint64(g.PG.Pool))
		dst = binary.AppendUvarint(dst, uint64(g.PG.Seed))
		dst = appendEntryList(dst, g.Entries)
	}
	return dst
}

// DecodePGShardEntries reads what AppendPGShardEntries wrote, checking
// the bounds and each name.
func DecodePGShardEntries(b []byte) ([]PGShardEntries, error) {
	bad := func(format string, args ...any) ([]PGShardEntries, error) {
		return nil, &decodeError{"proto: shard entries of PGs: " + fmt.Sprintf(format, args...)}
	}
	if len(b) == 0 || b[0] != ShardEntriesVersion {
		return bad("not version %d", ShardEntriesVersion)
	}
	b = b[1:]
	n, ok := readUvarint(&b)
	if !ok || n > MaxShardEntries {
		return bad("bad group count")
	}
	gs := make([]PGShardEntries, 0, n)
	total := 0
	for range n {
		pool, ok1 := readUvarint(&b)
		seed, ok2 := readUvarint(&b)
		if !ok1 || !ok2 || pool > uint64(^clustermap.PoolID(0)) || seed > uint64(^uint32(0)) {
			return bad("group %d: bad PG", len(gs))
		}
		es, rest, err := decodeEntryList(b, MaxShardEntries-total)
		if err != nil {
			return bad("group %d: %v", len(gs), err)
		}
		b, total = rest, total+len(es)
		gs = append(gs, PGShardEntries{PG: clustermap.PGID{Pool: clustermap.PoolID(pool), Seed: uint32(seed)}, Entries: es})
	}
	if len(b) != 0 {
		return bad("%d bytes after the last group", len(b))
	}
	return gs, nil
}

// readUvarint takes a canonical uvarint off the front of *b.
func readUvarint(b *[]byte) (uint64, bool) {
	v, k := binary.Uvarint(*b)
	if k <= 0 || k != uvarintLen(v) {
		return 0, false
	}
	*b = (*b)[k:]
	return v, true
}

// DecodeShardEntries reads what AppendShardEntries wrote, checking
// MaxShardEntries and each name (ValidateShardEntryName).
func DecodeShardEntries(b []byte) ([]ShardEntry, error) {
	if len(b) == 0 || b[0] != ShardEntriesVersion {
		return nil, &decodeError{fmt.Sprintf("proto: shard entries: not version %d", ShardEntriesVersion)}
	}
	es, rest, err := decodeEntryList(b[1:], MaxShardEntries)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d bytes after the last entry", len(rest))
	}
	if err != nil {
		return nil, &decodeError{"proto: shard entries: " + err.Error()}
	}
	return es, nil
}

// decodeEntryList reads a count and that many entries (at most max) off
// the front of b, and returns what follows them.
func decodeEntryList(b []byte, max int) ([]ShardEntry, []byte, error) {
	n, ok := readUvarint(&b)
	if !ok || n > uint64(max) {
		return nil, nil, fmt.Errorf("bad count")
	}
	es := make([]ShardEntry, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || k != uvarintLen(l) || l > MaxObjectNameLen || uint64(len(b)-k) < l+32 {
			return nil, nil, fmt.Errorf("entry %d is truncated or its name too long", len(es))
		}
		e := ShardEntry{Object: string(b[k : k+int(l)])}
		if err := ValidateShardEntryName(e.Object); err != nil {
			return nil, nil, fmt.Errorf("entry %d: %v", len(es), err)
		}
		b = b[k+int(l):]
		e.Ver = [2]uint64{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
		e.To = [2]uint64{binary.BigEndian.Uint64(b[16:]), binary.BigEndian.Uint64(b[24:])}
		es = append(es, e)
		b = b[32:]
	}
	return es, b, nil
}

// uvarintLen is the length of v's canonical uvarint encoding.
func uvarintLen(v uint64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], v)
}
