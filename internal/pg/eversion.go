package pg

import (
	"encoding/binary"
	"fmt"
)

// EVersion orders the writes of a PG: the epoch of the interval in which
// the primary went active, then the PG version. Two primaries of different
// intervals can hand out the same PG version, never the same EVersion.
type EVersion struct {
	Epoch   uint64
	Version uint64
}

// Less reports whether e orders before o.
func (e EVersion) Less(o EVersion) bool {
	return e.Epoch < o.Epoch || e.Epoch == o.Epoch && e.Version < o.Version
}

func (e EVersion) String() string { return fmt.Sprintf("%d'%d", e.Epoch, e.Version) }

// EVersionLen is the encoded size of an EVersion.
const EVersionLen = 16

// Encode returns e's 16 bytes: epoch, then version, big-endian.
func (e EVersion) Encode() []byte {
	b := make([]byte, EVersionLen)
	binary.BigEndian.PutUint64(b, e.Epoch)
	binary.BigEndian.PutUint64(b[8:], e.Version)
	return b
}

// DecodeEVersion reads what Encode wrote; false if b is not 16 bytes.
func DecodeEVersion(b []byte) (EVersion, bool) {
	if len(b) != EVersionLen {
		return EVersion{}, false
	}
	return EVersion{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}, true
}
