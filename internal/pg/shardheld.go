package pg

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Positions a write leaves as they are. A small write to an
// erasure-coded object changes the data chunk it covers and the parity,
// not the other data chunks: their positions need not take part. Then the
// positions of one version of the object hold shards last written by
// different writes, and a version names, for each position it did not
// write, the version whose shard that position holds (its Held list):
//
//   - a position's shard is right for version v when the version it
//     holds is the one v names for that position (v itself for the
//     positions v wrote): its bytes are those v's object has there, since
//     only a write of that position changes them;
//   - the shards a write does reach carry the list in their meta, and the
//     list of the version they can roll back to (ShardMeta.Held,
//     PrevHeld), so any of them tells peering and reads what every
//     position of either version must hold;
//   - a write skips positions only when it keeps the object's size, so a
//     skipped position's meta still gives the object's size;
//   - a write whose list is empty wrote every position, as puts, deletes
//     and changes of keys do: then each position holds exactly the
//     shard's own version, as in a pool whose writes never skip.
//
// What this asks of peering (DecideShards): a position votes for version
// v when it holds what v names for it. A partial write reaches some
// positions and is recorded on none of the ones it skipped, so those vote
// for it as much as for the version before it; the write may stand only
// if every voting data position it wrote holds it or rolls back to it
// (partialStands). That keeps a read's fast path, which asks only the
// data positions (DecideShardsPart), final: a newer partial write shows on
// a data position it asks, or does not stand.

// PosVer is the version one position of an erasure-coded object holds.
type PosVer struct {
	Pos int
	Ver EVersion
}

// maxHeld bounds a Held list: a pool has at most this many positions.
const maxHeld = 255

// heldAt returns the version position pos holds in version ver of the
// object, whose Held list is held: ver itself unless the list names pos.
func heldAt(held []PosVer, ver EVersion, pos int) EVersion {
	for _, h := range held {
		if h.Pos == pos {
			return h.Ver
		}
	}
	return ver
}

// validHeld reports whether held is a Held list of version ver: sorted
// by position, each position once, each version older than ver and not
// "absent" (a partial write only changes an object every position holds).
func validHeld(held []PosVer, ver EVersion) error {
	if len(held) > maxHeld {
		return fmt.Errorf("%d positions held, at most %d", len(held), maxHeld)
	}
	for i, h := range held {
		if h.Pos < 0 || h.Pos > maxPosition || i > 0 && h.Pos <= held[i-1].Pos {
			return fmt.Errorf("position %d out of order", h.Pos)
		}
		if h.Ver == (EVersion{}) || !h.Ver.Less(ver) {
			return fmt.Errorf("position %d holds %s, not older than %s", h.Pos, h.Ver, ver)
		}
	}
	return nil
}

// appendHeld appends held's encoding: [1 count] then, per position,
// [2 position][8 epoch][8 version], big-endian.
func appendHeld(b []byte, held []PosVer) []byte {
	b = append(b, byte(len(held)))
	for _, h := range held {
		b = binary.BigEndian.AppendUint16(b, uint16(h.Pos))
		b = binary.BigEndian.AppendUint64(b, h.Ver.Epoch)
		b = binary.BigEndian.AppendUint64(b, h.Ver.Version)
	}
	return b
}

const heldEntryLen = 2 + 8*2

// decodeHeld reads one list appendHeld wrote from the front of b and
// returns the rest of b; false if b is too short.
func decodeHeld(b []byte) ([]PosVer, []byte, bool) {
	if len(b) < 1 || len(b) < 1+int(b[0])*heldEntryLen {
		return nil, nil, false
	}
	n := int(b[0])
	b = b[1:]
	var held []PosVer
	for range n {
		held = append(held, PosVer{Pos: int(binary.BigEndian.Uint16(b)), Ver: EVersion{binary.BigEndian.Uint64(b[2:]), binary.BigEndian.Uint64(b[10:])}})
		b = b[heldEntryLen:]
	}
	return held, b, true
}

// decodeHeldLists reads the Held and PrevHeld lists of a meta, which are
// all of b and name at least one position; false otherwise.
func decodeHeldLists(b []byte) (held, prevHeld []PosVer, ok bool) {
	if held, b, ok = decodeHeld(b); !ok {
		return nil, nil, false
	}
	if prevHeld, b, ok = decodeHeld(b); !ok || len(b) > 0 || len(held)+len(prevHeld) == 0 {
		return nil, nil, false
	}
	return held, prevHeld, true
}

// PartialHeld returns the Held list of a write at ver that reaches only
// the positions in wrote, over an object whose positions hold the
// versions in base (by position): every other position, with the version
// it holds. Nil when the write reaches them all.
func PartialHeld(base []EVersion, wrote []int) []PosVer {
	var held []PosVer
	for pos, v := range base {
		if !slices.Contains(wrote, pos) {
			held = append(held, PosVer{Pos: pos, Ver: v})
		}
	}
	return held
}
