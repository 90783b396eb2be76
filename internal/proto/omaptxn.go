package proto

import (
	"bytes"
	"encoding/binary"
)

// OmapTxnVersion is the first byte of an encoded OmapTxn, and
// ListPrefixesVersion of an encoded list of common prefixes. Like Version,
// a decoder refuses any other value.
const (
	OmapTxnVersion      = 1
	ListPrefixesVersion = 1
)

// Limits of OpOmapTxn and OpOmapListDelim, checked by their decoders and
// the OSD. Keys are bounded by MaxKeyLen, which is objstore's
// MaxOmapKeyLen; values by MaxOmapValueLen, objstore's too (osd's tests
// check that they agree).
const (
	// MaxOmapValueLen bounds one omap value (set or guard).
	MaxOmapValueLen = 1 << 20
	// MaxOmapTxnGuards bounds the guards of one OmapTxn.
	MaxOmapTxnGuards = 64
	// MaxListDelim bounds the entries and common prefixes of one
	// OpOmapListDelim reply, together.
	MaxListDelim = 1000
)

// Flags of an encoded OmapTxn.
const (
	omapTxnCreate  = 1 << 0
	omapTxnRange   = 1 << 1
	omapTxnFlagsOK = omapTxnCreate | omapTxnRange
)

// Kinds of a guard.
const (
	guardEquals = 0
	guardAbsent = 1
)

// OmapGuard is one condition of an OmapTxn: Key is absent (Absent), or
// holds exactly Value (an empty Value matches a key present with an empty
// value).
type OmapGuard struct {
	Key    []byte
	Value  []byte
	Absent bool
}

// OmapTxn is a guarded transaction on one object's omap (OpOmapTxn).
// If every guard holds, the OSD removes RmFrom..RmTo (when HasRange), then
// the keys of Rm, then sets the keys of Set, all in one transaction;
// otherwise nothing changes.
type OmapTxn struct {
	// Token names the transaction (0: unnamed). The OSD keeps the tokens
	// of the newest transactions applied to the object (in the object,
	// written by the same transaction), and answers a resend (FlagRetry)
	// whose token it finds OK without applying it again: a client that
	// resends after an unknown outcome is not told its own change broke a
	// guard.
	Token uint64
	// Create makes the object if it does not exist; without it a missing
	// object is StatusNotFound. An absent object's omap is empty.
	Create   bool
	Guards   []OmapGuard
	Set      []KV     // sorted by key, each key once
	Rm       [][]byte // sorted, each key once
	HasRange bool
	RmFrom   []byte // with HasRange: remove keys in [RmFrom, RmTo)
	RmTo     []byte // with HasRange: not empty, and RmFrom <= RmTo
}

// AppendOmapTxn appends the encoding of t to dst:
//
//	+---------+-------+----------+--------------------------------------+
//	| version | flags | token    | guards                               |
//	| u8 = 1  | uvar  | 8 bytes, | n, n×(kind u8, key, [value if kind 0])|
//	|         |       | LE       |                                      |
//	+---------+-------+----------+--------------------------------------+
//	+---------------------+-----------+------------------------------+
//	| set                 | rm        | range (only if flags&2)      |
//	| n, n×(key, value)   | n, n×key  | from, to                     |
//	+---------------------+-----------+------------------------------+
//
// flags: 1 create, 2 range; kind: 0 equals, 1 absent. Keys and values are
// length-prefixed byte strings as in the rest of the package. It does not
// check t: the decoder does.
func AppendOmapTxn(dst []byte, t *OmapTxn) []byte {
	dst = append(dst, OmapTxnVersion)
	var flags uint64
	if t.Create {
		flags |= omapTxnCreate
	}
	if t.HasRange {
		flags |= omapTxnRange
	}
	dst = binary.AppendUvarint(dst, flags)
	dst = binary.LittleEndian.AppendUint64(dst, t.Token)
	dst = binary.AppendUvarint(dst, uint64(len(t.Guards)))
	for _, g := range t.Guards {
		if g.Absent {
			dst = append(dst, guardAbsent)
			dst = appendBytes(dst, g.Key)
			continue
		}
		dst = append(dst, guardEquals)
		dst = appendBytes(dst, g.Key)
		dst = appendBytes(dst, g.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(t.Set)))
	for _, kv := range t.Set {
		dst = appendBytes(dst, kv.Key)
		dst = appendBytes(dst, kv.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(t.Rm)))
	for _, k := range t.Rm {
		dst = appendBytes(dst, k)
	}
	if t.HasRange {
		dst = appendBytes(dst, t.RmFrom)
		dst = appendBytes(dst, t.RmTo)
	}
	return dst
}

// DecodeOmapTxn decodes an OmapTxn that fills b exactly. Its byte slices
// alias b; empty ones decode as nil. It checks every limit before
// allocating: at most MaxOmapTxnGuards guards, at most MaxKeys keys set and
// removed together, keys of at most MaxKeyLen bytes, values of at most
// MaxOmapValueLen; Set and Rm strictly increasing; a range not empty-ended
// and not reversed. Errors match ErrMalformed.
func DecodeOmapTxn(b []byte) (*OmapTxn, error) {
	d := decoder{b: b, what: "omap transaction"}
	switch {
	case len(b) == 0:
		d.fail("empty")
	case b[0] != OmapTxnVersion:
		d.fail("unsupported version %d (this build speaks %d)", b[0], OmapTxnVersion)
	default:
		d.off = 1
	}
	t := new(OmapTxn)
	flags := d.uvarint("flags")
	if flags&^omapTxnFlagsOK != 0 {
		d.fail("unknown flags %#x", flags)
	}
	t.Create, t.HasRange = flags&omapTxnCreate != 0, flags&omapTxnRange != 0
	if d.err == nil {
		if len(b)-d.off < 8 {
			d.fail("truncated in token")
		} else {
			t.Token = binary.LittleEndian.Uint64(b[d.off:])
			d.off += 8
		}
	}
	if n := d.count("guard", 2); n > MaxOmapTxnGuards {
		d.fail("guard count %d exceeds limit %d", n, MaxOmapTxnGuards)
	} else if n > 0 {
		t.Guards = make([]OmapGuard, n)
		for i := range t.Guards {
			g := &t.Guards[i]
			kind := d.byte("guard kind")
			switch {
			case d.err != nil:
			case kind == guardAbsent:
				g.Absent = true
				g.Key = d.bytes("guard key", MaxKeyLen)
			case kind == guardEquals:
				g.Key = d.bytes("guard key", MaxKeyLen)
				g.Value = d.bytes("guard value", MaxOmapValueLen)
			default:
				d.fail("unknown guard kind %d", kind)
			}
		}
	}
	if n := d.count("set key", 2); n > 0 {
		t.Set = make([]KV, n)
		for i := range t.Set {
			t.Set[i].Key = d.bytes("set key", MaxKeyLen)
			t.Set[i].Value = d.bytes("set value", MaxOmapValueLen)
			if i > 0 && d.err == nil && bytes.Compare(t.Set[i-1].Key, t.Set[i].Key) >= 0 {
				d.fail("set keys not strictly increasing at %d", i)
			}
		}
	}
	if n := d.count("removed key", 1); n+len(t.Set) > MaxKeys {
		d.fail("%d keys set and removed exceed limit %d", n+len(t.Set), MaxKeys)
	} else if n > 0 {
		t.Rm = make([][]byte, n)
		for i := range t.Rm {
			t.Rm[i] = d.bytes("removed key", MaxKeyLen)
			if i > 0 && d.err == nil && bytes.Compare(t.Rm[i-1], t.Rm[i]) >= 0 {
				d.fail("removed keys not strictly increasing at %d", i)
			}
		}
	}
	if t.HasRange {
		t.RmFrom = d.bytes("range start", MaxKeyLen)
		t.RmTo = d.bytes("range end", MaxKeyLen)
		if d.err == nil && (len(t.RmTo) == 0 || bytes.Compare(t.RmFrom, t.RmTo) > 0) {
			d.fail("range [%q, %q) is reversed or has no end", t.RmFrom, t.RmTo)
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

// Mutates reports whether t changes anything besides creating the object.
func (t *OmapTxn) Mutates() bool {
	return len(t.Set) > 0 || len(t.Rm) > 0 || t.HasRange
}

// AppendListPrefixes appends the encoding of the common prefixes of an
// OpOmapListDelim reply: nothing for none, else
//
//	| version u8 = 1 | n uvar | n × (len uvar, bytes) |
//
// with each prefix not empty, of at most MaxKeyLen bytes, strictly
// increasing, and at most MaxListDelim of them.
func AppendListPrefixes(dst []byte, prefixes [][]byte) []byte {
	if len(prefixes) == 0 {
		return dst
	}
	dst = append(dst, ListPrefixesVersion)
	dst = binary.AppendUvarint(dst, uint64(len(prefixes)))
	for _, p := range prefixes {
		dst = appendBytes(dst, p)
	}
	return dst
}

// DecodeListPrefixes decodes what AppendListPrefixes wrote, filling b
// exactly. The prefixes alias b. Errors match ErrMalformed.
func DecodeListPrefixes(b []byte) ([][]byte, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := decoder{b: b, what: "list prefixes", off: 1}
	if b[0] != ListPrefixesVersion {
		d.fail("unsupported version %d (this build speaks %d)", b[0], ListPrefixesVersion)
	}
	n := d.count("prefix", 2)
	switch {
	case n > MaxListDelim:
		d.fail("prefix count %d exceeds limit %d", n, MaxListDelim)
	case n == 0 && d.err == nil:
		d.fail("no prefixes (none is encoded as nothing)")
	}
	var out [][]byte
	if d.err == nil {
		out = make([][]byte, n)
	}
	for i := range out {
		out[i] = d.bytes("prefix", MaxKeyLen)
		if d.err != nil {
			break
		}
		if len(out[i]) == 0 {
			d.fail("empty prefix at %d", i)
		} else if i > 0 && bytes.Compare(out[i-1], out[i]) >= 0 {
			d.fail("prefixes not strictly increasing at %d", i)
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return out, nil
}

// byte reads one byte.
func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated in %s", field)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}
