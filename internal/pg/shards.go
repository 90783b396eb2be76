package pg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Erasure-coded objects: each position of the PG holds one shard, and K
// shards of one version rebuild the object. A write reaches the shards one
// by one, so after a crash the shards of an object may disagree; each
// shard keeps what it needs to roll back its newest write until the write
// is known complete on every shard. Peering then decides, object by
// object, which version stands (DecideShards):
//
//   - the newest version that at least K shards hold, or can roll back to;
//   - "absent" is a version too (the zero EVersion): a create that reached
//     fewer than K shards rolls back to it, and a delete that reached K
//     shards stands, so a deleted object never comes back;
//   - shards at that version keep it, shards whose newest write is above
//     it and can roll back to it roll back, the others are rebuilt from K
//     shards of it (or, for "absent", delete what they hold);
//   - with no version on K shards the object is unfound: it is never
//     served as data, and status says so.
//
// Before any of that, the PG as a whole waits until at least K positions
// its record names complete answer (ShardsPeerable), as a replicated PG
// waits for a copy its record names complete; only those vote
// (DecideShardsPG, ShardCopy.Stale).
//
// Why it keeps acknowledged writes: a write is acknowledged only once
// every position of its interval's acting set applied it, and peering
// ends with every answering position holding each object's standing
// version. So with K positions of the last interval answering, every
// acknowledged write, of that interval or an earlier one, is on K of
// them; a write on fewer than K was not acknowledged, and rolls back. A
// newer write that reached K shards may stand whether or not it was
// acknowledged, as a replicated write that failed may land.

// ShardCopy is one position's shard of an object, as peering lists it.
type ShardCopy struct {
	Listed bool // the position's OSD answered (false: down, or no OSD)
	// Stale: the position may lack writes (the PG's record does not name
	// it complete: its OSD was down, or it is new), so what it holds, or
	// its lack of a shard, is no vote: it keeps its shard only if that is
	// at the version that stands, and is rebuilt otherwise. A shard left
	// on a position that missed the object's delete so never brings the
	// object back.
	Stale bool
	Ver   EVersion // its newest write; zero: the shard holds nothing
	// Prev is the version its newest write can roll back to, while
	// CanRollBack; zero Prev is "absent" (the write created the object).
	Prev        EVersion
	CanRollBack bool
	// Tombstone: Ver is a delete, whose tombstone keeps the old shard to
	// roll back to until the delete is known complete.
	Tombstone bool
	// Held and PrevHeld: the positions Ver and Prev did not write, with
	// the version each holds (shardheld.go); empty for a write that
	// reached every position.
	Held, PrevHeld []PosVer
}

// holding returns the version the shard at position pos holds: what its
// newest write named for pos, which is that write itself unless the shard
// was rebuilt at a version that did not write pos.
func (s ShardCopy) holding(pos int) EVersion { return heldAt(s.Held, s.Ver, pos) }

// prevHolding returns the version the shard at pos holds once rolled back.
func (s ShardCopy) prevHolding(pos int) EVersion { return heldAt(s.PrevHeld, s.Prev, pos) }

// ShardPlan is what peering decided for one object.
type ShardPlan struct {
	Ver      EVersion // the version that stands; zero: the object is absent
	Unfound  bool     // no version is on K shards: serve nothing
	Keep     []int    // positions that hold Ver
	RollBack []int    // positions that roll their newest write back to Ver
	Rebuild  []int    // listed positions that need Ver rebuilt (or, absent: deleted)
	Missing  []int    // positions not listed: rebuilt when they answer
	Held     []PosVer // the positions Ver did not write (shardheld.go)
}

// Holds returns the version position pos holds when it holds the version
// that stands: Ver, unless Ver did not write pos.
func (p ShardPlan) Holds(pos int) EVersion { return heldAt(p.Held, p.Ver, pos) }

// Copy is the shard as peering and reads list it.
func (m ShardMeta) Copy() ShardCopy {
	return ShardCopy{Listed: true, Ver: m.Ver, Prev: m.Prev, CanRollBack: m.CanRollBack, Tombstone: m.Tombstone, Held: m.Held, PrevHeld: m.PrevHeld}
}

// ShardsPeerable says whether an erasure-coded PG with k data shards may
// peer: at least k of last, the positions of its last interval's acting
// set, answered.
func ShardsPeerable(k int, last []int, answered func(pos int) bool) error {
	var missing []int
	n := 0
	for _, p := range last {
		if answered(p) {
			n++
		} else {
			missing = append(missing, p)
		}
	}
	if n < k {
		return fmt.Errorf("waiting for positions %v of the last interval: %d of its %d positions answer, %d hold every acknowledged write", missing, n, len(last), k)
	}
	return nil
}

// DecideShards decides one object from the shards of its positions, for
// a pool of K data shards, once ShardsPeerable allows it.
func DecideShards(k int, shards []ShardCopy) ShardPlan {
	ver, ok := standing(k, shards)
	if !ok {
		return ShardPlan{Unfound: true}
	}
	v := versionOf(shards, ver)
	p := ShardPlan{Ver: ver, Held: v.held}
	for i, s := range shards {
		switch {
		case !s.Listed:
			p.Missing = append(p.Missing, i)
		case v.heldBy(s, i):
			p.Keep = append(p.Keep, i)
		case s.Stale:
			p.Rebuild = append(p.Rebuild, i)
		case v.rolledBackBy(s, i):
			p.RollBack = append(p.RollBack, i)
		default:
			p.Rebuild = append(p.Rebuild, i)
		}
	}
	return p
}

// A delete leaves a tombstone at its version until it is known complete,
// then the shard goes: a tombstone and an absent shard hold the same
// thing, so each counts for the other (as a write over a tombstone rolls
// back to absent). Otherwise lost trims would split the votes of a
// deleted object between its tombstones and the positions that trimmed
// theirs.

// objVersion is one version of an object as the shards tell it: whether
// it is a delete, and the positions it did not write (shardheld.go).
type objVersion struct {
	ver  EVersion
	tomb bool
	held []PosVer
}

// versionOf gathers what the shards say of version v: a voter's
// tombstone at v makes it a delete; any listed shard written at v, or
// able to roll back to it, names the positions v did not write (every
// shard of one write carries the same list).
func versionOf(shards []ShardCopy, v EVersion) objVersion {
	o := objVersion{ver: v}
	for _, s := range shards {
		if !s.Listed {
			continue
		}
		o.tomb = o.tomb || !s.Stale && s.Tombstone && s.Ver == v
		switch {
		case o.held != nil:
		case s.Ver == v && len(s.Held) > 0:
			o.held = s.Held
		case s.CanRollBack && s.Prev == v && len(s.PrevHeld) > 0:
			o.held = s.PrevHeld
		}
	}
	return o
}

// heldBy says whether shard s, at position pos, holds version o.
func (o objVersion) heldBy(s ShardCopy, pos int) bool {
	return s.holding(pos) == heldAt(o.held, o.ver, pos) || o.tomb && s.Ver == (EVersion{})
}

// rolledBackBy says whether shard s, at position pos, can roll its newest
// write back to version o.
func (o objVersion) rolledBackBy(s ShardCopy, pos int) bool {
	return s.CanRollBack && o.ver.Less(s.Ver) && (s.prevHolding(pos) == heldAt(o.held, o.ver, pos) || o.tomb && s.Prev == (EVersion{}))
}

// standing returns the newest version that at least k listed shards that
// are not stale hold or can roll back to, and that stands as a partial
// write (partialStands); false if there is none.
func standing(k int, shards []ShardCopy) (EVersion, bool) {
	var cands []EVersion
	for _, s := range shards {
		if s.Listed && !s.Stale {
			cands = append(cands, s.Ver)
			if s.CanRollBack {
				cands = append(cands, s.Prev)
			}
		}
	}
	slices.SortFunc(cands, func(a, b EVersion) int {
		switch {
		case b.Less(a):
			return -1
		case a.Less(b):
			return 1
		}
		return 0
	})
	cands = slices.Compact(cands)
	for _, v := range cands {
		o := versionOf(shards, v)
		n := 0
		for i, s := range shards {
			if s.Listed && !s.Stale && (o.heldBy(s, i) || o.rolledBackBy(s, i)) {
				n++
			}
		}
		if n >= k && o.partialStands(k, shards) {
			return v, true
		}
	}
	return EVersion{}, false
}

// partialStands says whether o, if a partial write, may stand: every
// data position it wrote (one of the first k) that votes holds it or can
// roll back to it. The positions it skipped vote for it without a trace
// of it, so without this a write that reached only the parity would
// stand with the data positions it skipped, over the version every data
// position holds: a read asking only the data positions would serve
// another version than peering decides.
func (o objVersion) partialStands(k int, shards []ShardCopy) bool {
	if len(o.held) == 0 {
		return true
	}
	for i, s := range shards[:min(k, len(shards))] {
		if heldAt(o.held, o.ver, i) != o.ver || !s.Listed || s.Stale {
			continue
		}
		if !o.heldBy(s, i) && !o.rolledBackBy(s, i) {
			return false
		}
	}
	return true
}

// ShardMeta is what every shard of an erasure-coded object carries beside
// its bytes (in a reserved xattr): the object's version and logical size,
// so that the object's size is known from any shard and peering and reads
// can tell which shards hold one version, and the shard's position, so a
// shard read back is known to be the one asked for. While its write is
// not known complete on every position, CanRollBack says the shard can
// go back to Prev (zero Prev: to "absent", the write created it; else the
// OSD keeps the shard of Prev beside it). A Tombstone is a delete that
// keeps the object's old shard to roll back to: it holds no data, and
// reads, listings and stats take it for an absent object. Held and
// PrevHeld name the positions Ver and Prev did not write (shardheld.go).
//
// Encoding (format 2, 44 bytes, big-endian):
//
//	[1 format][8 epoch][8 version][8 size][2 position][1 flags][8 prev epoch][8 prev version]
//
// flags: 1 can roll back, 2 tombstone. Prev is zero unless the shard can
// roll back. Format 1 (27 bytes, up to the position) is a shard with no
// rollback state, as OSDs wrote it before rollback existed. Format 3 is
// format 2's bytes then the Held and PrevHeld lists (appendHeld), written
// only when one is not empty.
type ShardMeta struct {
	Ver         EVersion
	Size        uint64
	Position    int
	Prev        EVersion
	CanRollBack bool
	Tombstone   bool
	Held        []PosVer
	PrevHeld    []PosVer
}

const (
	shardMetaFormat1 = 1
	shardMetaFormat  = 2
	shardMetaFormat3 = 3
	shardMetaLen1    = 1 + 8*3 + 2
	shardMetaLen     = shardMetaLen1 + 1 + 8*2
	maxPosition      = 1<<16 - 1

	shardFlagRollBack  = 1
	shardFlagTombstone = 2
)

// ErrBadShardMeta: bytes that are not an encoded ShardMeta.
var ErrBadShardMeta = errors.New("shard meta: malformed")

// Trimmed is the meta without its rollback state: the shard once its
// write is known complete, or as the rollback copy keeps it.
func (s ShardMeta) Trimmed() ShardMeta {
	s.Prev, s.CanRollBack, s.PrevHeld = EVersion{}, false, nil
	return s
}

// Holding returns the version the shard holds at its own position
// (shardheld.go): Ver, unless it was rebuilt at a version that did not
// write its position.
func (s ShardMeta) Holding() EVersion { return heldAt(s.Held, s.Ver, s.Position) }

// Skips says whether the meta's version left position pos as it was
// (Held names it).
func (s ShardMeta) Skips(pos int) bool {
	return slices.ContainsFunc(s.Held, func(h PosVer) bool { return h.Pos == pos })
}

// Equal reports whether two metas say the same.
func (s ShardMeta) Equal(o ShardMeta) bool {
	return s.Ver == o.Ver && s.Size == o.Size && s.Position == o.Position && s.Prev == o.Prev &&
		s.CanRollBack == o.CanRollBack && s.Tombstone == o.Tombstone &&
		slices.Equal(s.Held, o.Held) && slices.Equal(s.PrevHeld, o.PrevHeld)
}

// Encode returns the meta's bytes (format 2, or 3 with positions held).
// A position outside [0, 65535], a Prev without CanRollBack, or a Held
// list validHeld refuses is a programmer's error.
func (s ShardMeta) Encode() []byte {
	if s.Position < 0 || s.Position > maxPosition {
		panic(fmt.Sprintf("shard meta: position %d", s.Position))
	}
	if !s.CanRollBack && (s.Prev != (EVersion{}) || len(s.PrevHeld) > 0) {
		panic(fmt.Sprintf("shard meta: previous version %s without rollback", s.Prev))
	}
	if err := s.validHeld(); err != nil {
		panic(fmt.Sprintf("shard meta: %v", err))
	}
	b := make([]byte, shardMetaLen)
	b[0] = shardMetaFormat
	binary.BigEndian.PutUint64(b[1:], s.Ver.Epoch)
	binary.BigEndian.PutUint64(b[9:], s.Ver.Version)
	binary.BigEndian.PutUint64(b[17:], s.Size)
	binary.BigEndian.PutUint16(b[25:], uint16(s.Position))
	if s.CanRollBack {
		b[27] |= shardFlagRollBack
	}
	if s.Tombstone {
		b[27] |= shardFlagTombstone
	}
	binary.BigEndian.PutUint64(b[28:], s.Prev.Epoch)
	binary.BigEndian.PutUint64(b[36:], s.Prev.Version)
	if len(s.Held) > 0 || len(s.PrevHeld) > 0 {
		b[0] = shardMetaFormat3
		b = appendHeld(appendHeld(b, s.Held), s.PrevHeld)
	}
	return b
}

// validHeld checks the meta's Held lists: a tombstone writes every
// position, and there is no previous version to name positions of
// without rollback, or for a create (it rolls back to "absent").
func (s ShardMeta) validHeld() error {
	if s.Tombstone && len(s.Held) > 0 {
		return errors.New("a tombstone names positions it did not write")
	}
	if (!s.CanRollBack || s.Prev == (EVersion{})) && len(s.PrevHeld) > 0 {
		return errors.New("positions held by no previous version")
	}
	if err := validHeld(s.Held, s.Ver); err != nil {
		return err
	}
	return validHeld(s.PrevHeld, s.Prev)
}

// DecodeShardMeta reads what Encode wrote, or format 1.
func DecodeShardMeta(b []byte) (ShardMeta, error) {
	switch {
	case len(b) == shardMetaLen1 && b[0] == shardMetaFormat1:
	case len(b) == shardMetaLen && b[0] == shardMetaFormat:
	case len(b) > shardMetaLen && b[0] == shardMetaFormat3:
	default:
		return ShardMeta{}, ErrBadShardMeta
	}
	m := ShardMeta{
		Ver:      EVersion{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint64(b[9:])},
		Size:     binary.BigEndian.Uint64(b[17:]),
		Position: int(binary.BigEndian.Uint16(b[25:])),
	}
	if b[0] == shardMetaFormat1 {
		return m, nil
	}
	flags := b[27]
	m.Prev = EVersion{binary.BigEndian.Uint64(b[28:]), binary.BigEndian.Uint64(b[36:])}
	m.CanRollBack, m.Tombstone = flags&shardFlagRollBack != 0, flags&shardFlagTombstone != 0
	if flags&^(shardFlagRollBack|shardFlagTombstone) != 0 || !m.CanRollBack && m.Prev != (EVersion{}) {
		return ShardMeta{}, ErrBadShardMeta
	}
	if b[0] == shardMetaFormat3 {
		var ok bool
		if m.Held, m.PrevHeld, ok = decodeHeldLists(b[shardMetaLen:]); !ok || m.validHeld() != nil {
			return ShardMeta{}, ErrBadShardMeta
		}
	}
	return m, nil
}
