package objstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// Limits enforced by Validate and UnmarshalTxn. They bound what a peer can ask
// of this OSD and keep every record small enough for one pebble value.
const (
	MaxNameLen       = 1024
	MaxXattrKeyLen   = 255
	MaxXattrValueLen = 64 << 10
	MaxOmapKeyLen    = 4 << 10
	MaxOmapValueLen  = 1 << 20
	MaxTxnBytes      = 64 << 20
	// MaxObjectSize bounds offsets and sizes so that off+len never overflows
	// and block indexes fit comfortably in the checksum key space.
	MaxObjectSize = 1 << 40
)

var (
	// ErrNotFound: the object (or xattr / omap key) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoSpace: the write was refused because the disk is (nearly) full.
	ErrNoSpace = errors.New("no space")
	// ErrInvalid: the request or transaction is malformed.
	ErrInvalid = errors.New("invalid argument")
)

// CorruptionError reports data whose checksum does not match what was
// written. It is its own error class so the OSD can trigger repair from a
// replica instead of treating it as an ordinary IO error.
type CorruptionError struct {
	Coll, Name string
	Offset     uint64 // byte offset of the bad block (0 for a bad metadata record)
	Detail     string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("objstore: corruption in %q/%q at offset %d: %s", e.Coll, e.Name, e.Offset, e.Detail)
}

// IsCorruption reports whether err is (or wraps) a CorruptionError or an
// IndexCorruptionError.
func IsCorruption(err error) bool {
	var ce *CorruptionError
	var ie *IndexCorruptionError
	return errors.As(err, &ce) || errors.As(err, &ie)
}

type opType uint8

const (
	opWrite opType = iota + 1
	opPut
	opTruncate
	opCreate
	opDelete
	opSetXattr
	opRmXattr
	opOmapSet
	opOmapRm
	opOmapRmRange
	opRename
	opMax
)

var opNames = [...]string{"", "write", "put", "truncate", "create", "delete", "setxattr", "rmxattr", "omapset", "omaprm", "omaprmrange", "rename"}

type op struct {
	typ        opType
	coll, name string
	off        uint64 // write offset or truncate size
	key        []byte // xattr key, omap key or range start; a rename's new name
	data       []byte // write/put data, xattr/omap value
	end        []byte // omap range end
	hasEnd     bool
	sums       []uint32 // write/put: crc32c of data's whole blocks, if known
}

// Txn is an ordered list of mutations applied atomically by Store.Apply.
// Byte slices passed in are retained, not copied: callers must not modify
// them until the Txn has been applied or marshaled.
type Txn struct {
	ops     []op
	bytes   int // approximate payload size, for limits and space checks
	bulkOps int // ops whose data the encoding aligns (see txnAlignMin)
}

func (t *Txn) add(o op) {
	t.ops = append(t.ops, o)
	t.bytes += 32 + len(o.coll) + len(o.name) + len(o.key) + len(o.data) + len(o.end)
	if len(o.data) >= txnAlignMin {
		t.bulkOps++
	}
}

func (t *Txn) Write(coll, name string, off uint64, data []byte) {
	t.add(op{typ: opWrite, coll: coll, name: name, off: off, data: data})
}

func (t *Txn) Put(coll, name string, data []byte) {
	t.add(op{typ: opPut, coll: coll, name: name, data: data})
}

// WriteSummed is Write with sums, the crc32c of each whole 4 KiB block of
// data from its start, as the rpc layer takes them when the data arrives:
// Apply uses them for the blocks it writes from where the data lies
// instead of reading the data again. A wrong sum makes its block read as
// corrupt later; it never makes wrong data readable.
func (t *Txn) WriteSummed(coll, name string, off uint64, data []byte, sums []uint32) {
	t.Write(coll, name, off, data)
	t.ops[len(t.ops)-1].sums = checkSums(data, sums)
}

// PutSummed is Put with sums (see WriteSummed).
func (t *Txn) PutSummed(coll, name string, data []byte, sums []uint32) {
	t.Put(coll, name, data)
	t.ops[len(t.ops)-1].sums = checkSums(data, sums)
}

// checkSums returns sums if they are one per whole block of data, else nil.
func checkSums(data []byte, sums []uint32) []uint32 {
	if len(sums) != len(data)/blockSize {
		return nil
	}
	return sums
}

func (t *Txn) Truncate(coll, name string, size uint64) {
	t.add(op{typ: opTruncate, coll: coll, name: name, off: size})
}

func (t *Txn) Create(coll, name string) { t.add(op{typ: opCreate, coll: coll, name: name}) }

func (t *Txn) Delete(coll, name string) { t.add(op{typ: opDelete, coll: coll, name: name}) }

func (t *Txn) SetXattr(coll, name, key string, val []byte) {
	t.add(op{typ: opSetXattr, coll: coll, name: name, key: []byte(key), data: val})
}

func (t *Txn) RmXattr(coll, name, key string) {
	t.add(op{typ: opRmXattr, coll: coll, name: name, key: []byte(key)})
}

func (t *Txn) OmapSet(coll, name string, key, val []byte) {
	t.add(op{typ: opOmapSet, coll: coll, name: name, key: key, data: val})
}

func (t *Txn) OmapRm(coll, name string, key []byte) {
	t.add(op{typ: opOmapRm, coll: coll, name: name, key: key})
}

// OmapRmRange removes omap keys in [start, end); a nil end means to the end.
func (t *Txn) OmapRmRange(coll, name string, start, end []byte) {
	t.add(op{typ: opOmapRmRange, coll: coll, name: name, key: start, end: end, hasEnd: end != nil})
}

// Rename gives coll/from's object, with its data, xattrs and omap, the
// name to, replacing whatever to held; from is then absent. It moves the
// object's record only, whatever its size: a shard of an erasure-coded
// object keeps its old version this way while a delete or put replaces it
// (internal/osd), instead of copying it. A rename must come before every
// other op on from or to in its transaction, and from must exist.
func (t *Txn) Rename(coll, from, to string) {
	t.add(op{typ: opRename, coll: coll, name: from, key: []byte(to)})
}

// Prepend puts u's ops before t's, as if t had been built after them.
func (t *Txn) Prepend(u *Txn) {
	t.ops = append(slices.Clip(u.ops), t.ops...)
	t.bytes += u.bytes
	t.bulkOps += u.bulkOps
}

// Len is the number of operations.
func (t *Txn) Len() int { return len(t.ops) }

// Changes is what a transaction does to one object.
type Changes struct {
	Ranges      [][2]uint64 // [off, end) its writes cover, in their order
	MinTruncate int64       // the least size its truncates leave; -1: none
	Whole       bool        // it puts, creates or deletes the object
	Xattrs      []string    // the xattrs it sets or removes
	OmapKeys    [][]byte    // the omap keys it sets or removes one by one
	OmapRanges  [][2][]byte // the omap ranges [start, end) it removes
}

// ChangesOf returns what t does to coll/name, so that a caller can keep
// just what it changes to undo it (an erasure-coded shard's rollback,
// internal/osd).
func (t *Txn) ChangesOf(coll, name string) Changes {
	c := Changes{MinTruncate: -1}
	for i := range t.ops {
		o := &t.ops[i]
		if o.coll == coll && o.typ == opRename && string(o.key) == name {
			c.Whole = true
		}
		if o.coll != coll || o.name != name {
			continue
		}
		switch o.typ {
		case opWrite:
			c.Ranges = append(c.Ranges, [2]uint64{o.off, o.off + uint64(len(o.data))})
		case opTruncate:
			if o.off <= math.MaxInt64 && (c.MinTruncate < 0 || int64(o.off) < c.MinTruncate) {
				c.MinTruncate = int64(o.off)
			}
		case opPut, opCreate, opDelete, opRename:
			c.Whole = true
		case opSetXattr, opRmXattr:
			c.Xattrs = append(c.Xattrs, string(o.key))
		case opOmapSet, opOmapRm:
			c.OmapKeys = append(c.OmapKeys, o.key)
		case opOmapRmRange:
			c.OmapRanges = append(c.OmapRanges, [2][]byte{o.key, o.end})
		}
	}
	return c
}

// EachWrite calls f with the offset and bytes of each of t's writes to
// coll/name, in order, stopping at f's first error. f may change the
// bytes in place (the holder of an erasure-coded parity shard XORs its old
// bytes into a delta before applying it); checksums given with them
// (WriteSummed) are dropped then, to be computed again.
func (t *Txn) EachWrite(coll, name string, f func(off uint64, data []byte) error) error {
	for i := range t.ops {
		o := &t.ops[i]
		if o.typ != opWrite || o.coll != coll || o.name != name {
			continue
		}
		o.sums = nil
		if err := f(o.off, o.data); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks names and sizes against the package limits.
func (t *Txn) Validate() error {
	if t.bytes > MaxTxnBytes {
		return fmt.Errorf("objstore: transaction of %d bytes exceeds limit %d: %w", t.bytes, MaxTxnBytes, ErrInvalid)
	}
	for i := range t.ops {
		if err := t.ops[i].validate(); err != nil {
			return fmt.Errorf("objstore: op %d (%s %q/%q): %w", i, opNames[t.ops[i].typ], t.ops[i].coll, t.ops[i].name, err)
		}
	}
	return t.renamesFirst()
}

// renamesFirst checks that no op before a rename touches either of its
// objects: Apply moves their committed state only.
func (t *Txn) renamesFirst() error {
	if !slices.ContainsFunc(t.ops, func(o op) bool { return o.typ == opRename }) {
		return nil
	}
	touched := map[[2]string]int{}
	for i := range t.ops {
		o := &t.ops[i]
		names := []string{o.name}
		if o.typ == opRename {
			names = append(names, string(o.key))
			for _, n := range names {
				if j, ok := touched[[2]string{o.coll, n}]; ok {
					return fmt.Errorf("objstore: op %d renames %q/%q to %q after op %d (%s) touched %q: a rename must come first: %w",
						i, o.coll, o.name, o.key, j, opNames[t.ops[j].typ], n, ErrInvalid)
				}
			}
		}
		for _, n := range names {
			if _, ok := touched[[2]string{o.coll, n}]; !ok {
				touched[[2]string{o.coll, n}] = i
			}
		}
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, ErrInvalid)...)
}

func (o *op) validate() error {
	if o.typ == 0 || o.typ >= opMax {
		return invalidf("unknown op type %d", o.typ)
	}
	if len(o.coll) == 0 || len(o.coll) > MaxNameLen {
		return invalidf("collection name length %d not in 1..%d", len(o.coll), MaxNameLen)
	}
	if len(o.name) == 0 || len(o.name) > MaxNameLen {
		return invalidf("object name length %d not in 1..%d", len(o.name), MaxNameLen)
	}
	switch o.typ {
	case opWrite:
		if o.off > MaxObjectSize || uint64(len(o.data)) > MaxObjectSize-o.off {
			return invalidf("write [%d,+%d) beyond max object size %d", o.off, len(o.data), uint64(MaxObjectSize))
		}
	case opPut:
		if uint64(len(o.data)) > MaxObjectSize {
			return invalidf("put of %d bytes beyond max object size", len(o.data))
		}
	case opTruncate:
		if o.off > MaxObjectSize {
			return invalidf("truncate to %d beyond max object size %d", o.off, uint64(MaxObjectSize))
		}
	case opSetXattr, opRmXattr:
		if len(o.key) == 0 || len(o.key) > MaxXattrKeyLen {
			return invalidf("xattr key length %d not in 1..%d", len(o.key), MaxXattrKeyLen)
		}
		if len(o.data) > MaxXattrValueLen {
			return invalidf("xattr value length %d exceeds %d", len(o.data), MaxXattrValueLen)
		}
	case opRename:
		if len(o.key) == 0 || len(o.key) > MaxNameLen {
			return invalidf("new name length %d not in 1..%d", len(o.key), MaxNameLen)
		}
		if string(o.key) == o.name {
			return invalidf("rename to the same name")
		}
	case opOmapSet, opOmapRm, opOmapRmRange:
		if len(o.key) > MaxOmapKeyLen || len(o.end) > MaxOmapKeyLen {
			return invalidf("omap key length exceeds %d", MaxOmapKeyLen)
		}
		if len(o.data) > MaxOmapValueLen {
			return invalidf("omap value length %d exceeds %d", len(o.data), MaxOmapValueLen)
		}
	}
	return nil
}

// Wire format, version 2:
//
//	"CTX" version(1) nops(uvarint) op*
//	op = type(1) coll(str) name(str) fields...
//	str = len(uvarint) bytes
//	bulk = len(uvarint) [zero padding] bytes
//
// Fields per op: write: off(uvarint) data(bulk); put: data(bulk); truncate:
// size(uvarint); setxattr/omapset: key val; rmxattr/omaprm: key;
// omaprmrange: start hasEnd(1) [end]; rename: to(str). Bulk data of at least txnAlignMin
// bytes is padded to start at a multiple of txnAlign from the encoding's
// first byte: a replica that receives the encoding in an aligned buffer
// writes the data with O_DIRECT as it lies, without copying it. Varints
// must be minimal, padding zero and nothing may trail, so
// Marshal(UnmarshalTxn(b)) == b for every accepted b.
const txnMagic = "CTX"
const txnVersion = 2

// Alignment of large write data in the encoding (see above).
const (
	txnAlign    = directAlign
	txnAlignMin = directMinBytes
)

// Marshal encodes the Txn in the stable wire format.
func (t *Txn) Marshal() []byte { return t.AppendMarshal(make([]byte, 0, t.Size())) }

// Size bounds the length of the Txn's encoding.
func (t *Txn) Size() int { return t.bytes + 16 + t.bulkOps*txnAlign }

// AppendMarshal appends the Txn's encoding to b.
func (t *Txn) AppendMarshal(b []byte) []byte {
	b, _ = t.appendEncoding(b, nil, nil)
	return b
}

// TxnPart is a piece of a Txn's encoding (see AppendMarshalParts).
type TxnPart struct {
	Bytes []byte
	// Sums are the crc32c checksums of Bytes' whole 4 KiB blocks, when the
	// part is the data of an op that came with them (PutSummed,
	// WriteSummed): a sender checksums it without reading it again.
	Sums []uint32
}

// AppendMarshalParts appends the Txn's encoding to b, less the data of each
// write or put of at least txnAlignMin bytes for which external says so,
// and returns the whole encoding as parts, in order: the data so left out
// is a part of its own, as it lies (a primary sends a client's 4 MiB
// write on to its replicas from the request it arrived in, rather than
// copying every byte of it into the encoding). The other parts point into
// the returned buffer.
func (t *Txn) AppendMarshalParts(b []byte, external func(data []byte) bool) ([]byte, []TxnPart) {
	if external == nil {
		external = func([]byte) bool { return false }
	}
	b, segs := t.appendEncoding(b, external, make([]txnSeg, 0, 2*t.bulkOps+1))
	parts := make([]TxnPart, 0, len(segs))
	for _, g := range segs {
		p := TxnPart{Bytes: g.ext, Sums: g.sums}
		if g.ext == nil {
			p.Bytes = b[g.lo:g.hi]
		}
		if len(p.Bytes) > 0 {
			parts = append(parts, p)
		}
	}
	return b, parts
}

// txnSeg is a TxnPart while the encoding grows: a range of the buffer, or
// external data.
type txnSeg struct {
	lo, hi int
	ext    []byte
	sums   []uint32
}

// appendEncoding appends the Txn's encoding to b, less the external data
// (see AppendMarshalParts), and, if segs is not nil, the segments the whole
// encoding is made of.
func (t *Txn) appendEncoding(b []byte, external func([]byte) bool, segs []txnSeg) ([]byte, []txnSeg) {
	base := len(b) // alignment is relative to the encoding's first byte
	start := base  // of the segment in b not yet in segs
	// shift: external bytes so far, which the encoding holds but b does not.
	// Alignment counts them: base-shift is where the encoding would start if b held them.
	shift := 0
	b = append(b, txnMagic...)
	b = append(b, txnVersion)
	b = binary.AppendUvarint(b, uint64(len(t.ops)))
	for i := range t.ops {
		o := &t.ops[i]
		b = append(b, byte(o.typ))
		b = appendStr(b, []byte(o.coll))
		b = appendStr(b, []byte(o.name))
		switch o.typ {
		case opWrite, opPut:
			if o.typ == opWrite {
				b = binary.AppendUvarint(b, o.off)
			}
			b = appendBulkHead(b, base-shift, len(o.data))
			if segs == nil || len(o.data) < txnAlignMin {
				b = append(b, o.data...)
				continue
			}
			if external(o.data) {
				segs = append(segs, txnSeg{lo: start, hi: len(b)}, txnSeg{ext: o.data, sums: o.sums})
				shift += len(o.data)
			} else {
				segs = append(segs, txnSeg{lo: start, hi: len(b)}, txnSeg{lo: len(b), hi: len(b) + len(o.data), sums: o.sums})
				b = append(b, o.data...)
			}
			start = len(b)
		case opTruncate:
			b = binary.AppendUvarint(b, o.off)
		case opSetXattr, opOmapSet:
			b = appendStr(b, o.key)
			b = appendStr(b, o.data)
		case opRmXattr, opOmapRm, opRename:
			b = appendStr(b, o.key)
		case opOmapRmRange:
			b = appendStr(b, o.key)
			if o.hasEnd {
				b = append(b, 1)
				b = appendStr(b, o.end)
			} else {
				b = append(b, 0)
			}
		}
	}
	if segs != nil {
		segs = append(segs, txnSeg{lo: start, hi: len(b)})
	}
	return b, segs
}

func appendStr(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBulkHead appends the head of a bulk field of n bytes (its length
// and padding) to an encoding that starts at b[base] (see the wire format).
func appendBulkHead(b []byte, base, n int) []byte {
	b = binary.AppendUvarint(b, uint64(n))
	if n >= txnAlignMin {
		b = append(b, make([]byte, padTo(len(b)-base))...)
	}
	return b
}

// padTo is how many bytes take offset off to the next multiple of txnAlign.
func padTo(off int) int { return (txnAlign - off%txnAlign) % txnAlign }

type decoder struct {
	b   []byte
	n   int // length of the whole encoding: len(b) is what is left of it
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	var tmp [binary.MaxVarintLen64]byte
	if binary.PutUvarint(tmp[:], v) != n {
		d.fail("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// str returns a sub-slice of the input (no copy); max bounds the length.
func (d *decoder) str(max int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail(fmt.Sprintf("field length %d exceeds %d", n, max))
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("truncated field")
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// bulk reads a field appendBulk wrote.
func (d *decoder) bulk() []byte {
	n := d.uvarint()
	if d.err != nil || n < txnAlignMin {
		if d.err == nil && n > uint64(len(d.b)) {
			d.fail("truncated field")
		}
		if d.err != nil {
			return nil
		}
		s := d.b[:n:n]
		d.b = d.b[n:]
		return s
	}
	pad := padTo(d.n - len(d.b))
	if n > uint64(len(d.b)) || int(n)+pad > len(d.b) {
		d.fail("truncated field")
		return nil
	}
	for _, c := range d.b[:pad] {
		if c != 0 {
			d.fail("nonzero alignment padding")
			return nil
		}
	}
	s := d.b[pad : pad+int(n) : pad+int(n)]
	d.b = d.b[pad+int(n):]
	return s
}

// UnmarshalTxnSummed is UnmarshalTxn for an encoding whose whole 4 KiB
// blocks have the crc32c sums (from its first byte, as the rpc layer takes
// them): write data that starts at a block boundary of b gets its blocks'
// sums (see WriteSummed).
func UnmarshalTxnSummed(b []byte, sums []uint32) (*Txn, error) {
	t, err := UnmarshalTxn(b)
	if err != nil || len(sums) == 0 {
		return t, err
	}
	for i := range t.ops {
		o := &t.ops[i]
		if (o.typ != opWrite && o.typ != opPut) || len(o.data) < blockSize {
			continue
		}
		off := int(uintptr(unsafe.Pointer(&o.data[0])) - uintptr(unsafe.Pointer(&b[0])))
		if off < 0 || off%blockSize != 0 {
			continue
		}
		first, last := off/blockSize, (off+len(o.data))/blockSize
		if last <= len(sums) {
			o.sums = sums[first:last:last]
		}
	}
	return t, nil
}

// UnmarshalTxn decodes a Txn produced by Marshal. The input comes from the
// network: it never panics, bounds every allocation by the input size and
// validates the result. Returned byte slices alias b.
func UnmarshalTxn(b []byte) (*Txn, error) {
	if len(b) > MaxTxnBytes+1024 {
		return nil, invalidf("objstore: encoded transaction of %d bytes too large", len(b))
	}
	if len(b) < len(txnMagic)+1 || string(b[:len(txnMagic)]) != txnMagic {
		return nil, invalidf("objstore: not an encoded transaction")
	}
	if b[len(txnMagic)] != txnVersion {
		return nil, invalidf("objstore: transaction encoding version %d not supported (want %d)", b[len(txnMagic)], txnVersion)
	}
	d := &decoder{b: b[len(txnMagic)+1:], n: len(b)}
	n := d.uvarint()
	// Every op takes at least 3 bytes, which bounds the preallocation.
	if d.err == nil && n > uint64(len(d.b))/3 {
		d.fail("op count exceeds input")
	}
	t := &Txn{}
	if d.err == nil {
		t.ops = make([]op, 0, n)
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		var o op
		o.typ = opType(d.byte1())
		if d.err == nil && (o.typ == 0 || o.typ >= opMax) {
			d.fail(fmt.Sprintf("unknown op type %d", o.typ))
			break
		}
		o.coll = string(d.str(MaxNameLen))
		o.name = string(d.str(MaxNameLen))
		switch o.typ {
		case opWrite:
			o.off = d.uvarint()
			o.data = d.bulk()
		case opPut:
			o.data = d.bulk()
		case opTruncate:
			o.off = d.uvarint()
		case opSetXattr:
			o.key = d.str(MaxXattrKeyLen)
			o.data = d.str(MaxXattrValueLen)
		case opOmapSet:
			o.key = d.str(MaxOmapKeyLen)
			o.data = d.str(MaxOmapValueLen)
		case opRmXattr:
			o.key = d.str(MaxXattrKeyLen)
		case opOmapRm:
			o.key = d.str(MaxOmapKeyLen)
		case opRename:
			o.key = d.str(MaxNameLen)
		case opOmapRmRange:
			o.key = d.str(MaxOmapKeyLen)
			switch d.byte1() {
			case 0:
			case 1:
				o.hasEnd = true
				o.end = d.str(MaxOmapKeyLen)
				if o.end == nil {
					o.end = []byte{}
				}
			default:
				d.fail("bad range-end flag")
			}
		}
		if d.err == nil {
			t.add(o)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, invalidf("objstore: decoding transaction: %v", d.err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}
