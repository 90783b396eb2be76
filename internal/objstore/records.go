package objstore

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/bits"
)

// Key space of the pebble index. Every key starts with a one-byte tag so the
// record kinds never collide; see doc.go for the full picture.
const (
	tagMeta    = 0x00 // superblock and id high-water mark
	tagXattr   = 'A'  // A id(8) key -> value
	tagFileRef = 'F'  // F fileID(8) -> objID(8): the data file is live
	tagJournal = 'J'  // J seq(8) -> deferred write
	tagCsum    = 'K'  // K fileID(8) chunk(4) -> presence bitmap + crcs
	tagOmap    = 'M'  // M id(8) key -> value
	tagObject  = 'O'  // O esc(coll) esc(name) -> object record
)

var (
	keySuperblock = []byte{tagMeta, 's', 'b'}
	keyIDHigh     = []byte{tagMeta, 'i', 'd'}
)

const (
	blockSize   = 4096
	chunkBlocks = 64
	// InlineMax is the largest object kept inside pebble instead of a file.
	InlineMax = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func blockCRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// zeroBlockCRC is the checksum of a block of zeros (a block never written).
var zeroBlockCRC = blockCRC(make([]byte, blockSize))

// appendEsc appends s escaped so that byte-wise order of encodings equals the
// order of the strings and no encoding is a prefix of another: 0x00 becomes
// 0x00 0xff and the string ends with 0x00 0x01.
func appendEsc(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			b = append(b, 0, 0xff)
		} else {
			b = append(b, s[i])
		}
	}
	return append(b, 0, 1)
}

// unesc decodes one escaped string from the front of b and returns the rest.
func unesc(b []byte) (string, []byte, bool) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", nil, false
		}
		switch b[i+1] {
		case 0xff:
			out = append(out, 0)
			i++
		case 1:
			return string(out), b[i+2:], true
		default:
			return "", nil, false
		}
	}
	return "", nil, false
}

func collPrefix(coll string) []byte {
	return appendEsc([]byte{tagObject}, coll)
}

// collEnd is the first key after every object of coll.
func collEnd(coll string) []byte {
	p := collPrefix(coll)
	p[len(p)-1] = 2
	return p
}

func objKey(coll, name string) []byte {
	b := make([]byte, 0, 1+len(coll)+len(name)+4)
	b = append(b, tagObject)
	b = appendEsc(b, coll)
	return appendEsc(b, name)
}

func idKey(tag byte, id uint64, suffix []byte) []byte {
	b := make([]byte, 9, 9+len(suffix))
	b[0] = tag
	binary.BigEndian.PutUint64(b[1:], id)
	return append(b, suffix...)
}

func csumKey(fileID uint64, chunk uint64) []byte {
	b := make([]byte, 13)
	b[0] = tagCsum
	binary.BigEndian.PutUint64(b[1:], fileID)
	binary.BigEndian.PutUint32(b[9:], uint32(chunk))
	return b
}

func journalKey(seq uint64) []byte { return idKey(tagJournal, seq, nil) }

// objRec is the object record stored under the O key.
//
//	ver(1)=1 flags(1) objID(8) size(8) mtime(8) fileID(8)
//	inline only: crc(4) per 4 KiB block, then size bytes of data
type objRec struct {
	id     uint64
	size   uint64
	mtime  int64
	fileID uint64 // 0 when inline
	inline bool
	crcs   []uint32 // inline only
	data   []byte   // inline only, len == size
}

const (
	recVersion    = 1
	recFlagInline = 1
	recHeaderLen  = 2 + 8*4
)

func nblocks(size uint64) uint64 { return (size + blockSize - 1) / blockSize }

func (r *objRec) encode() []byte {
	n := recHeaderLen
	if r.inline {
		n += 4*len(r.crcs) + len(r.data)
	}
	b := make([]byte, recHeaderLen, n)
	b[0] = recVersion
	if r.inline {
		b[1] = recFlagInline
	}
	binary.BigEndian.PutUint64(b[2:], r.id)
	binary.BigEndian.PutUint64(b[10:], r.size)
	binary.BigEndian.PutUint64(b[18:], uint64(r.mtime))
	binary.BigEndian.PutUint64(b[26:], r.fileID)
	if r.inline {
		for _, c := range r.crcs {
			b = binary.BigEndian.AppendUint32(b, c)
		}
		b = append(b, r.data...)
	}
	return b
}

// decodeObjRec parses an object record; it copies, so b may be reused.
func decodeObjRec(b []byte) (objRec, error) {
	var r objRec
	if len(b) < recHeaderLen {
		return r, errors.New("object record too short")
	}
	if b[0] != recVersion {
		return r, errors.New("unknown object record version")
	}
	if b[1]&^recFlagInline != 0 {
		return r, errors.New("unknown object record flags")
	}
	r.inline = b[1]&recFlagInline != 0
	r.id = binary.BigEndian.Uint64(b[2:])
	r.size = binary.BigEndian.Uint64(b[10:])
	r.mtime = int64(binary.BigEndian.Uint64(b[18:]))
	r.fileID = binary.BigEndian.Uint64(b[26:])
	rest := b[recHeaderLen:]
	if r.size > MaxObjectSize {
		return r, errors.New("object size out of range")
	}
	if !r.inline {
		if len(rest) != 0 || r.fileID == 0 {
			return r, errors.New("bad file-backed object record")
		}
		return r, nil
	}
	if r.fileID != 0 || r.size > InlineMax {
		return r, errors.New("bad inline object record")
	}
	nb := nblocks(r.size)
	if uint64(len(rest)) != 4*nb+r.size {
		return r, errors.New("inline object record length mismatch")
	}
	r.crcs = make([]uint32, nb)
	for i := range r.crcs {
		r.crcs[i] = binary.BigEndian.Uint32(rest[4*i:])
	}
	r.data = append([]byte(nil), rest[4*nb:]...)
	return r, nil
}

// inlineBlockCRC checksums block i of inline data, zero-padded to 4 KiB so
// inline and file-backed blocks share one definition.
func inlineBlockCRC(data []byte, i uint64) uint32 {
	lo := i * blockSize
	hi := min(lo+blockSize, uint64(len(data)))
	c := crc32.Update(0, castagnoli, data[lo:hi])
	if pad := blockSize - (hi - lo); pad > 0 {
		c = crc32.Update(c, castagnoli, zeroBlock[:pad])
	}
	return c
}

var zeroBlock = make([]byte, blockSize)

// chunk holds the checksums of 64 consecutive blocks of a data file. A block
// whose bit is clear was never written (or was truncated away) and reads as
// zeros without touching the file.
//
//	bitmap(8) crc(4) per set bit, in block order [slotB(8)]
//
// Every block has two homes in its file: slot A at its logical offset and
// slot B at Store.slotBase plus that offset. A large overwrite of committed
// blocks writes the other slot and flips the blocks' slotB bits in the same
// commit (copy-on-write), so the old bytes stay intact until then. slotB is
// present only when a present block lives in slot B; it never has bits of
// absent blocks.
type chunk struct {
	bits  uint64
	crc   [chunkBlocks]uint32
	slotB uint64
	// orig and origSlotB are the bitmaps as committed before this
	// transaction; origUnknown means the chunk was cut by a truncate and may
	// still hold live blocks.
	orig, origSlotB uint64
	origUnknown     bool
	dirty           bool
}

func (c *chunk) present(i uint64) bool { return c.bits&(1<<i) != 0 }

// inB reports whether present block i lives in slot B.
func (c *chunk) inB(i uint64) bool { return c.slotB&c.bits&(1<<i) != 0 }

func (c *chunk) encode() []byte {
	b := make([]byte, 8, 16+4*bits.OnesCount64(c.bits))
	binary.BigEndian.PutUint64(b, c.bits)
	for i := uint64(0); i < chunkBlocks; i++ {
		if c.present(i) {
			b = binary.BigEndian.AppendUint32(b, c.crc[i])
		}
	}
	if sb := c.slotB & c.bits; sb != 0 {
		b = binary.BigEndian.AppendUint64(b, sb)
	}
	return b
}

func decodeChunk(b []byte) (*chunk, error) {
	if len(b) < 8 {
		return nil, errors.New("checksum chunk too short")
	}
	c := &chunk{bits: binary.BigEndian.Uint64(b)}
	n := 8 + 4*bits.OnesCount64(c.bits)
	switch len(b) {
	case n:
	case n + 8:
		c.slotB = binary.BigEndian.Uint64(b[n:])
		if c.slotB == 0 || c.slotB&^c.bits != 0 {
			return nil, errors.New("checksum chunk has slot bits of absent blocks")
		}
	default:
		return nil, errors.New("checksum chunk length mismatch")
	}
	j := 8
	for i := uint64(0); i < chunkBlocks; i++ {
		if c.present(i) {
			c.crc[i] = binary.BigEndian.Uint32(b[j:])
			j += 4
		}
	}
	c.orig, c.origSlotB = c.bits, c.slotB
	return c, nil
}

// journal record: a deferred write of whole blocks into a data file.
//
//	ver(1)=1 fileID(8) off(8) data
type jrec struct {
	fileID uint64
	off    uint64
	data   []byte
}

const (
	jrecVersion = 1
	jrecHeader  = 17
)

func (j *jrec) encode() []byte {
	b := make([]byte, jrecHeader+len(j.data))
	j.encodeTo(b)
	return b
}

// encodeTo encodes j into b, which is exactly jrecHeader+len(j.data) long.
func (j *jrec) encodeTo(b []byte) {
	b[0] = jrecVersion
	binary.BigEndian.PutUint64(b[1:], j.fileID)
	binary.BigEndian.PutUint64(b[9:], j.off)
	if copy(b[jrecHeader:], j.data) != len(j.data) || len(b) != jrecHeader+len(j.data) {
		panic("objstore: journal record buffer of the wrong size")
	}
}

// decodeJrec parses a journal record; data aliases b.
func decodeJrec(b []byte) (jrec, error) {
	var j jrec
	if len(b) < jrecHeader || b[0] != jrecVersion {
		return j, errors.New("bad journal record header")
	}
	j.fileID = binary.BigEndian.Uint64(b[1:])
	j.off = binary.BigEndian.Uint64(b[9:])
	j.data = b[17:]
	if j.fileID == 0 || j.off%blockSize != 0 || len(j.data) == 0 || len(j.data)%blockSize != 0 ||
		!validJrecExtent(j.off, uint64(len(j.data))) {
		return j, errors.New("bad journal record extent")
	}
	return j, nil
}

// validJrecExtent reports whether a journal record's extent lies in one
// slot: off is a physical offset, a block's logical offset in slot A or
// that plus the slot base in slot B (4 TiB on a real filesystem, past
// MaxObjectSize).
func validJrecExtent(off, n uint64) bool {
	in := func(base uint64) bool {
		return off >= base && off-base <= MaxObjectSize && n <= MaxObjectSize-(off-base)
	}
	return in(0) || in(slotBaseMem) || in(slotBaseReal)
}
