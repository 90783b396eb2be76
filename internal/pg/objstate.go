package pg

import (
	"encoding/binary"
	"errors"
)

// ObjState summarises one copy of an object for peering and scrub.
//
// Encoding (format 1, 42 bytes, big-endian):
//
//	[1 format][8 epoch][8 version][8 size][8 meta digest][8 data digest][1 flags]
//
// flags: 1 deep (Data was computed), 2 corrupt (a checksum failed).
type ObjState struct {
	Ver     EVersion
	Size    uint64
	Meta    uint64 // digest of the xattrs (but the version) and the omap
	Data    uint64 // digest of the data; deep listings only
	Deep    bool   // Data was computed
	Corrupt bool   // deep: a checksum failed; Data is meaningless
}

const (
	objStateFormat = 1
	objStateLen    = 1 + 8*5 + 1
	flagDeep       = 1
	flagCorrupt    = 2
)

// Encode returns the state's 42 bytes.
func (o ObjState) Encode() []byte {
	b := make([]byte, objStateLen)
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
	return b
}

// ErrBadObjState: bytes that are not an encoded ObjState.
var ErrBadObjState = errors.New("object state: malformed")

// DecodeObjState reads what Encode wrote.
func DecodeObjState(b []byte) (ObjState, error) {
	if len(b) != objStateLen || b[0] != objStateFormat || b[41]&^(flagDeep|flagCorrupt) != 0 {
		return ObjState{}, ErrBadObjState
	}
	return ObjState{
		Ver:     EVersion{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])},
		Size:    binary.BigEndian.Uint64(b[17:]),
		Meta:    binary.BigEndian.Uint64(b[25:]),
		Data:    binary.BigEndian.Uint64(b[33:]),
		Deep:    b[41]&flagDeep != 0,
		Corrupt: b[41]&flagCorrupt != 0,
	}, nil
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
