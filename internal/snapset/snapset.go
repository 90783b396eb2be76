// Package snapset is the snapshot state of one object: under which snapshot
// sequence its head was last written, and the clones that keep its older
// contents for snapshots taken since. The primary OSD keeps it in a reserved
// xattr of the head and updates it in the same transaction as the write that
// makes a clone, so a clone and the record of it never disagree.
//
// A snapshot is a number from a sequence that only grows (per volume). A
// writer sends the newest snapshot number it knows (its snapshot sequence)
// with each write. When that is newer than the head's Seq, the head has not
// been written since a snapshot was taken, so the primary first copies it to
// a clone named by the writer's sequence. That clone holds the object as it
// was at every snapshot s with From < s <= ID.
package snapset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Xattr is the reserved xattr of a head object that holds its Set.
const Xattr = "\x00s"

// Clone is one preserved version of an object.
type Clone struct {
	ID   uint64 // the snapshot sequence of the write that made it
	From uint64 // the head's Seq then: the clone serves snapshots in (From, ID]
	Size uint64 // bytes of data
}

// Set is the snapshot state of one head object.
type Set struct {
	Seq    uint64  // snapshot sequence of the newest write to the head
	Clones []Clone // by ascending ID
}

// ErrMalformed is matched by every decoding error.
var ErrMalformed = errors.New("snapset: malformed")

// CloneName is the object that holds clone id of head. The NUL byte keeps
// it out of the names clients may use, and it lives in the head's
// placement group, on the same OSDs.
func CloneName(head string, id uint64) string {
	return fmt.Sprintf("%s\x00c%016x", head, id)
}

// IsClone reports whether name is a clone's object name.
func IsClone(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return i > 0
		}
	}
	return false
}

// Encoding (format 1): [1 format][uvarint seq][uvarint n] then n times
// [uvarint id][uvarint from][uvarint size].
const format = 1

// Encode returns the stored form of s.
func (s Set) Encode() []byte {
	b := []byte{format}
	b = binary.AppendUvarint(b, s.Seq)
	b = binary.AppendUvarint(b, uint64(len(s.Clones)))
	for _, c := range s.Clones {
		b = binary.AppendUvarint(b, c.ID)
		b = binary.AppendUvarint(b, c.From)
		b = binary.AppendUvarint(b, c.Size)
	}
	return b
}

// maxClones bounds a decoded set (each clone takes at least 3 bytes).
const maxClones = 1 << 16

// Decode parses and checks a stored Set. An empty b is the empty Set: a
// head written without snapshots has no xattr.
func Decode(b []byte) (Set, error) {
	if len(b) == 0 {
		return Set{}, nil
	}
	if b[0] != format {
		return Set{}, fmt.Errorf("%w: format %d, want %d", ErrMalformed, b[0], format)
	}
	d := b[1:]
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(d)
		if n <= 0 {
			return 0, fmt.Errorf("%w: truncated or overlong %s", ErrMalformed, what)
		}
		if n > 1 && d[n-1] == 0 {
			return 0, fmt.Errorf("%w: %s is not minimally encoded", ErrMalformed, what)
		}
		d = d[n:]
		return v, nil
	}
	var s Set
	var err error
	if s.Seq, err = next("seq"); err != nil {
		return Set{}, err
	}
	n, err := next("clone count")
	if err != nil {
		return Set{}, err
	}
	if n > maxClones || n*3 > uint64(len(d)) {
		return Set{}, fmt.Errorf("%w: %d clones in %d bytes", ErrMalformed, n, len(d))
	}
	if n > 0 {
		s.Clones = make([]Clone, n)
	}
	for i := range s.Clones {
		c := &s.Clones[i]
		if c.ID, err = next("clone id"); err == nil {
			if c.From, err = next("clone from"); err == nil {
				c.Size, err = next("clone size")
			}
		}
		if err != nil {
			return Set{}, err
		}
	}
	if len(d) != 0 {
		return Set{}, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d))
	}
	if err := s.Check(); err != nil {
		return Set{}, err
	}
	return s, nil
}

// Check verifies the invariants: clones ascend, each covers a non-empty
// range after the previous one, and the head is newer than every clone.
func (s Set) Check() error {
	prev := uint64(0)
	for i, c := range s.Clones {
		if c.From >= c.ID || (i > 0 && c.From < prev) {
			return fmt.Errorf("%w: clone %d covers (%d, %d], after clone %d", ErrMalformed, i, c.From, c.ID, prev)
		}
		prev = c.ID
	}
	if len(s.Clones) > 0 && s.Seq < prev {
		return fmt.Errorf("%w: head seq %d is older than clone %d", ErrMalformed, s.Seq, prev)
	}
	return nil
}

// Version names what a reader at a snapshot sees.
type Version struct {
	Clone  uint64 // the clone's ID, when Exists and not Head
	Head   bool   // the head as it is now
	Exists bool   // false: the object did not exist at the snapshot
}

// Resolve says which version of the object a reader at snapshot snap sees,
// given whether the head exists now. snap 0 is the head.
func (s Set) Resolve(snap uint64, headExists bool) Version {
	if snap == 0 {
		return Version{Head: true, Exists: headExists}
	}
	for _, c := range s.Clones {
		if c.ID >= snap {
			if c.From < snap {
				return Version{Clone: c.ID, Exists: true}
			}
			return Version{} // created after snap
		}
	}
	if headExists && s.Seq < snap {
		return Version{Head: true, Exists: true}
	}
	return Version{}
}

// Cow prepares a write under snapshot sequence seq: whether the head (if it
// exists) must first be copied to a clone with ID seq, and the Set after the
// write. A write with an older seq than the head's (a writer that has not
// yet heard of a snapshot) changes nothing here.
func (s Set) Cow(seq uint64, headExists bool, headSize uint64) (clone bool, after Set) {
	after = Set{Seq: s.Seq, Clones: slices.Clone(s.Clones)}
	if seq <= s.Seq {
		return false, after
	}
	after.Seq = seq
	if headExists {
		after.Clones = append(after.Clones, Clone{ID: seq, From: s.Seq, Size: headSize})
		return true, after
	}
	return false, after
}

// Trim drops the clones that no snapshot in keep (ascending or not) needs.
// It returns their IDs and the Set without them.
func (s Set) Trim(keep []uint64) (drop []uint64, after Set) {
	after.Seq = s.Seq
	for _, c := range s.Clones {
		needed := slices.ContainsFunc(keep, func(k uint64) bool { return k > c.From && k <= c.ID })
		if needed {
			after.Clones = append(after.Clones, c)
		} else {
			drop = append(drop, c.ID)
		}
	}
	return drop, after
}

// EncodeSnaps and DecodeSnaps carry a list of snapshot numbers (the ones a
// trim keeps) in a request: [uvarint n] then n uvarints.
func EncodeSnaps(snaps []uint64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(snaps)))
	for _, s := range snaps {
		b = binary.AppendUvarint(b, s)
	}
	return b
}

// DecodeSnaps parses EncodeSnaps's output.
func DecodeSnaps(b []byte) ([]uint64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: snapshot list count", ErrMalformed)
	}
	b = b[k:]
	out := make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: snapshot list entry %d", ErrMalformed, i)
		}
		out = append(out, v)
		b = b[k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after the snapshot list", ErrMalformed, len(b))
	}
	return out, nil
}
