package pg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// ObjState summarises one copy of an object for peering and scrub.
//
// Encoding (format 1, 42 bytes, big-endian):
//
//	[1 format][8 epoch][8 version][8 size][8 meta digest][8 data digest][1 flags]
//
// flags: 1 deep (Data was computed), 2 corrupt (a checksum failed). A
// shard of an erasure-coded object that can roll back (CanRollBack) or is
// a tombstone is format 2: format 1's bytes with flag 4 (can roll back)
// or 8 (tombstone) set, or both, then [8 prev epoch][8 prev version] (58
// bytes; Prev is zero unless it can roll back); every other state is
// format 1. A shard that names positions its version or Prev did not
// write (Held, PrevHeld: shardheld.go) is format 3: format 2's 58 bytes
// (its flags as they are), then the two lists as ShardMeta encodes them.
type ObjState struct {
	Ver     EVersion
	Size    uint64
	Meta    uint64 // digest of the xattrs (but the version) and the omap
	Data    uint64 // digest of the data; deep listings only
	Deep    bool   // Data was computed
	Corrupt bool   // deep: a checksum failed; Data is meaningless
	// An erasure-coded shard's rollback state (ShardMeta): its newest
	// write can roll back to Prev (zero: to absent).
	Prev           EVersion
	CanRollBack    bool
	Tombstone      bool
	Held, PrevHeld []PosVer
}

const (
	objStateFormat   = 1
	objStateFormat2  = 2
	objStateFormat3  = 3
	objStateLen      = 1 + 8*5 + 1
	objStateLen2     = objStateLen + 8*2
	flagDeep         = 1
	flagCorrupt      = 2
	flagCanRollBack  = 4
	flagTombstone    = 8
	objStateFlagsAll = flagDeep | flagCorrupt | flagCanRollBack | flagTombstone
)

// Encode returns the state's bytes: format 3 if it names positions held,
// else 2 if it can roll back or is a tombstone, else 1. What
// ShardMeta.Encode refuses of the same fields is a programmer's error.
func (o ObjState) Encode() []byte {
	if !o.CanRollBack && o.Prev != (EVersion{}) {
		panic("object state: a previous version without rollback")
	}
	if err := o.shard().validHeld(); err != nil {
		panic(fmt.Sprintf("object state: positions held: %v", err))
	}
	b := make([]byte, objStateLen, objStateLen2)
	b[0] = objStateFormat
	binary.BigEndian.PutUint64(b[1:], o.Ver.Epoch)
	binary.BigEndian.PutUint64(b[9:], o.Ver.Version)
	binary.BigEndian.PutUint64(b[17:], o.Size)
	binary.BigEndian.PutUint64(b[25:], o.Meta)
	binary.BigEndian.PutUint64(b[33:], o.Data)
	if o.Deep {
		b[41] |= flagDeep
	}
	if o.Corrupt {
		b[41] |= flagCorrupt
	}
	if o.CanRollBack || o.Tombstone {
		b[0] = objStateFormat2
		if o.CanRollBack {
			b[41] |= flagCanRollBack
		}
		if o.Tombstone {
			b[41] |= flagTombstone
		}
		b = binary.BigEndian.AppendUint64(b, o.Prev.Epoch)
		b = binary.BigEndian.AppendUint64(b, o.Prev.Version)
	}
	if len(o.Held) > 0 || len(o.PrevHeld) > 0 {
		if b[0] == objStateFormat {
			b = append(b, make([]byte, 16)...)
		}
		b[0] = objStateFormat3
		b = appendHeld(appendHeld(b, o.Held), o.PrevHeld)
	}
	return b
}

// shard is the state's shard meta fields, for checking them as one.
func (o ObjState) shard() ShardMeta {
	return ShardMeta{Ver: o.Ver, Prev: o.Prev, CanRollBack: o.CanRollBack, Tombstone: o.Tombstone, Held: o.Held, PrevHeld: o.PrevHeld}
}

// Equal reports whether two states say the same.
func (o ObjState) Equal(p ObjState) bool {
	return o.Ver == p.Ver && o.Size == p.Size && o.Meta == p.Meta && o.Data == p.Data && o.Deep == p.Deep &&
		o.Corrupt == p.Corrupt && o.Prev == p.Prev && o.CanRollBack == p.CanRollBack && o.Tombstone == p.Tombstone &&
		slices.Equal(o.Held, p.Held) && slices.Equal(o.PrevHeld, p.PrevHeld)
}

// ErrBadObjState: bytes that are not an encoded ObjState.
var ErrBadObjState = errors.New("object state: malformed")

// DecodeObjState reads what Encode wrote: format 1 has no rollback or
// tombstone flag, format 2 has at least one, format 3 names positions.
func DecodeObjState(b []byte) (ObjState, error) {
	switch {
	case len(b) == objStateLen && b[0] == objStateFormat && b[41]&^(flagDeep|flagCorrupt) == 0:
	case len(b) == objStateLen2 && b[0] == objStateFormat2 && b[41]&^objStateFlagsAll == 0 && b[41]&(flagCanRollBack|flagTombstone) != 0:
	case len(b) > objStateLen2 && b[0] == objStateFormat3 && b[41]&^objStateFlagsAll == 0:
	default:
		return ObjState{}, ErrBadObjState
	}
	o := ObjState{
		Ver:     EVersion{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])},
		Size:    binary.BigEndian.Uint64(b[17:]),
		Meta:    binary.BigEndian.Uint64(b[25:]),
		Data:    binary.BigEndian.Uint64(b[33:]),
		Deep:    b[41]&flagDeep != 0,
		Corrupt: b[41]&flagCorrupt != 0,
	}
	if b[0] == objStateFormat {
		return o, nil
	}
	o.CanRollBack, o.Tombstone = b[41]&flagCanRollBack != 0, b[41]&flagTombstone != 0
	o.Prev = EVersion{binary.BigEndian.Uint64(b[42:]), binary.BigEndian.Uint64(b[50:])}
	if !o.CanRollBack && o.Prev != (EVersion{}) {
		return ObjState{}, ErrBadObjState
	}
	if b[0] == objStateFormat3 {
		var ok bool
		if o.Held, o.PrevHeld, ok = decodeHeldLists(b[objStateLen2:]); !ok || o.shard().validHeld() != nil {
			return ObjState{}, ErrBadObjState
		}
	}
	return o, nil
}

// SameCopy reports whether two copies hold the same object: for recovery
// the versions decide; scrub also compares what was measured on both. A
// copy that failed its checksums equals nothing.
func SameCopy(a, b ObjState) bool {
	if a.Corrupt || b.Corrupt {
		return false
	}
	if a.Ver != b.Ver || a.Size != b.Size || a.Meta != b.Meta {
		return false
	}
	return !a.Deep || !b.Deep || a.Data == b.Data
}
