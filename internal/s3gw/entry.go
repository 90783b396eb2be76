package s3gw

import (
	"fmt"
	"time"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// stripeSize is how much of an object's data one cluster object holds.
// Each entry records its own, so it may change without a migration.
const stripeSize = 4 << 20

// Entry is an object's index record: what HEAD answers and where its data
// lies. Its value in the index shard is Entry.encode().
type Entry struct {
	Size     uint64
	ETag     string // without quotes: hex MD5, or hex MD5 of the parts' MD5s + "-N"
	MTime    time.Time
	Headers  StdHeaders
	Meta     []MetaKV // user metadata (x-amz-meta-*), names in lower case, in order
	Checksum Checksum
	UploadID string // set when the object was completed from a multipart upload
	Stripe   uint32 // stripe size of its data objects
	Parts    []Part // the data: one for a plain PUT, one per part for multipart
	// Inline marks an object whose data lives in the index shard itself,
	// under inlineKey, prefixed with this id (a random one per write); it
	// has no parts. readEntry loads the data into inline.
	Inline string
	inline []byte
}

// inlineMax is the largest object whose data lives in its index shard: a
// small PUT is then one commit and a small GET one read, where an object
// with data objects costs three round trips to write and two to read.
// Larger objects would grow the shards, which splits copy whole.
const inlineMax = 16 << 10

// StdHeaders are the standard headers S3 stores with an object.
type StdHeaders struct {
	ContentType, CacheControl, ContentDisposition, ContentEncoding, ContentLanguage, Expires string
}

// MetaKV is one x-amz-meta-* pair.
type MetaKV struct{ Name, Value string }

// Checksum is an object's (or a part's) S3 checksum; Alg 0 means none.
// Parts > 0 marks a COMPOSITE checksum of that many parts.
type Checksum struct {
	Alg   checksum.Algorithm
	Sum   []byte
	Parts int
}

// Part is one run of the object's data, stored in stripes
// s3d.<bucket>.<DataID>.<n>.
type Part struct {
	DataID   string
	Size     uint64
	MD5      []byte // binary; the part's ETag
	Checksum []byte // of Entry.Checksum.Alg (multipart), or nil
}

// Entries are written in version 1, or 2 when the data is inline (2
// adds the Inline id), so that only gateways that know inline data see it.
const (
	entryVersion       = 1
	entryVersionInline = 2
)

// Limits of a record: more than S3 allows, so a decoder bounds its work.
const (
	maxMetaPairs = 1000
	maxParts     = checksum.MaxParts
)

func (e *Entry) encode() []byte {
	w := &enc{b: make([]byte, 0, 128+len(e.Parts)*48)}
	if e.Inline != "" {
		w.b = append(w.b, entryVersionInline)
	} else {
		w.b = append(w.b, entryVersion)
	}
	w.uvarint(e.Size)
	w.str(e.ETag)
	w.varint(e.MTime.UnixNano())
	h := &e.Headers
	for _, s := range []string{h.ContentType, h.CacheControl, h.ContentDisposition, h.ContentEncoding, h.ContentLanguage, h.Expires} {
		w.str(s)
	}
	w.uvarint(uint64(len(e.Meta)))
	for _, m := range e.Meta {
		w.str(m.Name)
		w.str(m.Value)
	}
	w.b = append(w.b, byte(e.Checksum.Alg))
	w.bytes(e.Checksum.Sum)
	w.uvarint(uint64(e.Checksum.Parts))
	w.str(e.UploadID)
	w.uvarint(uint64(e.Stripe))
	w.uvarint(uint64(len(e.Parts)))
	for _, p := range e.Parts {
		w.str(p.DataID)
		w.uvarint(p.Size)
		w.bytes(p.MD5)
		w.bytes(p.Checksum)
	}
	if e.Inline != "" {
		w.str(e.Inline)
	}
	return w.b
}

// decodeEntry parses an index record; damaged bytes are an error, never a
// panic (FuzzDecodeEntry).
func decodeEntry(b []byte) (*Entry, error) {
	d := &dec{b: b}
	v := d.byte1()
	if d.err == nil && v != entryVersion && v != entryVersionInline {
		return nil, fmt.Errorf("%w: version %d", errCorruptRecord, v)
	}
	e := &Entry{}
	e.Size = d.uvarint()
	e.ETag = d.str()
	e.MTime = time.Unix(0, d.varint()).UTC()
	h := &e.Headers
	for _, s := range []*string{&h.ContentType, &h.CacheControl, &h.ContentDisposition, &h.ContentEncoding, &h.ContentLanguage, &h.Expires} {
		*s = d.str()
	}
	if n := d.count(maxMetaPairs); n > 0 {
		e.Meta = make([]MetaKV, n)
		for i := range e.Meta {
			e.Meta[i] = MetaKV{d.str(), d.str()}
		}
	}
	e.Checksum.Alg = checksum.Algorithm(d.byte1())
	e.Checksum.Sum = d.bytes()
	e.Checksum.Parts = d.count(maxParts)
	e.UploadID = d.str()
	e.Stripe = uint32(d.count(1 << 30))
	if n := d.count(maxParts); n > 0 {
		e.Parts = make([]Part, n)
		for i := range e.Parts {
			p := &e.Parts[i]
			p.DataID = d.str()
			p.Size = d.uvarint()
			p.MD5 = d.bytes()
			p.Checksum = d.bytes()
		}
	}
	if v == entryVersionInline {
		if e.Inline = d.str(); e.Inline == "" && d.err == nil {
			return nil, fmt.Errorf("%w: inline data without an id", errCorruptRecord)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after its end", errCorruptRecord, len(d.b))
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	return e, nil
}

// check verifies what the gateway relies on when it reads an entry: the
// parts add up to the size, a stripe size that makes progress, a valid
// checksum algorithm of the right length.
func (e *Entry) check() error {
	if e.Inline != "" {
		if len(e.Parts) != 0 || e.Size > inlineMax {
			return fmt.Errorf("%w: inline data of %d bytes with %d parts", errCorruptRecord, e.Size, len(e.Parts))
		}
		return e.checkSum()
	}
	var total uint64
	for _, p := range e.Parts {
		if total+p.Size < total {
			return fmt.Errorf("%w: part sizes overflow", errCorruptRecord)
		}
		total += p.Size
	}
	if total != e.Size {
		return fmt.Errorf("%w: parts hold %d bytes, the entry says %d", errCorruptRecord, total, e.Size)
	}
	if e.Stripe == 0 && e.Size > 0 {
		return fmt.Errorf("%w: stripe size 0", errCorruptRecord)
	}
	return e.checkSum()
}

// checkSum verifies the checksum's algorithm and length.
func (e *Entry) checkSum() error {
	if a := e.Checksum.Alg; a != 0 && (a.Size() == 0 || len(e.Checksum.Sum) != 0 && len(e.Checksum.Sum) != a.Size()) {
		return fmt.Errorf("%w: checksum %d of %d bytes", errCorruptRecord, a, len(e.Checksum.Sum))
	}
	return nil
}

// stripes returns how many stripe objects a part of size bytes uses.
func stripes(size uint64, stripe uint32) uint64 {
	if size == 0 {
		return 0
	}
	return (size + uint64(stripe) - 1) / uint64(stripe)
}
