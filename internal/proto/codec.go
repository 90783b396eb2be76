package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Version is the encoding version written as the first byte of every
// message. A decoder rejects any other value, so a layout change must bump it.
// Version 3 aligns large bulk payloads (see Align).
const Version = 3

// A request's bulk payload (Data or Txn) and a response's Data, of at
// least AlignMin bytes, start at an Align-aligned offset of their message:
// zero bytes pad the gap after the length, as many as the position
// demands, so the encoding stays canonical. A receiver that reads the
// message into an aligned buffer (rpc does) can hand the payload to
// O_DIRECT as it lies, instead of copying every large write into an aligned
// buffer first, and payload blocks are blocks of the frame's sum (see
// package rpc), so known block checksums serve both.
const (
	Align    = 4096
	AlignMin = 128 << 10
)

// Limits on decoded messages. They bound what a peer can make a daemon
// allocate and keep a single message within one frame.
const (
	// MaxDataLen bounds Data and Txn: the largest object write or read
	// carried in one message.
	MaxDataLen = 64 << 20
	// MaxFrameBytes bounds one encoded message (and so one rpc frame body):
	// the largest payload plus room for names, keys and headers.
	MaxFrameBytes = MaxDataLen + 1<<20
	// MaxObjectNameLen bounds object names (Request.Object, Response.Names).
	MaxObjectNameLen = 1024
	// MaxKeyLen bounds xattr names, omap keys and listing bounds.
	MaxKeyLen = 4096
	// MaxKeys bounds the number of Keys, KVs and Names in one message.
	MaxKeys = 4096
	// MaxMessageLen bounds Response.Message.
	MaxMessageLen = 4096
)

// ErrMalformed is matched (errors.Is) by every decoding error: the bytes are
// not a message this version understands. The error text says what is wrong.
var ErrMalformed = errors.New("proto: malformed message")

type decodeError struct{ msg string }

func (e *decodeError) Error() string        { return e.msg }
func (e *decodeError) Is(target error) bool { return target == ErrMalformed }

var opNames = [...]string{
	OpPing: "ping", OpWrite: "write", OpPut: "put", OpRead: "read",
	OpTruncate: "truncate", OpDelete: "delete", OpStat: "stat", OpCreate: "create",
	OpSetXattr: "setxattr", OpGetXattr: "getxattr", OpRmXattr: "rmxattr",
	OpListXattrs: "listxattrs", OpOmapSet: "omap-set", OpOmapGet: "omap-get",
	OpOmapRm: "omap-rm", OpOmapList: "omap-list", OpOmapRmRange: "omap-rm-range",
	OpList: "list", OpReplicate: "replicate", OpReadReplica: "read-replica", OpStatus: "status",
	OpPGList: "pg-list", OpScrub: "scrub", OpSnaps: "snaps", OpSnapTrim: "snap-trim",
	OpOmapTxn: "omap-txn", OpOmapListDelim: "omap-list-delim",
	OpShardRollBack: "shard-rollback", OpShardTrim: "shard-trim", OpShardTrims: "shard-trims",
	OpStage: "stage",
}

// String names the op for logs and errors.
func (op Op) String() string {
	if op.Valid() && int(op) < len(opNames) && opNames[op] != "" {
		return opNames[op]
	}
	return "op(" + strconv.Itoa(int(op)) + ")"
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool { return s < statusMax }

var statusNames = [...]string{
	StatusOK: "ok", StatusNotFound: "not found", StatusExists: "exists",
	StatusInvalid: "invalid", StatusNoSpace: "no space", StatusCorrupt: "corrupt",
	StatusWrongEpoch: "wrong epoch", StatusNotPrimary: "not primary",
	StatusUnavailable: "unavailable", StatusIOError: "io error", StatusAuth: "auth",
	StatusPrecondition: "precondition failed", StatusNoStage: "no staged shard",
}

// String names the status for logs and errors.
func (s Status) String() string {
	if s.Valid() && int(s) < len(statusNames) && statusNames[s] != "" {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// AppendRequest appends the encoding of r to dst. It does not check limits:
// the decoder does, and the sender (package rpc) refuses frames over
// MaxFrameBytes.
func AppendRequest(dst []byte, r *Request) []byte {
	return AppendRequestTail(append(AppendRequestHead(dst, r, len(r.Txn)), r.Txn...), r)
}

// AppendRequestHead appends the encoding of r up to its Txn, of txnLen
// bytes, which follows it on the wire (aligned, see Align, if the head
// starts the message), then AppendRequestTail's bytes: a sender can send a
// large Txn from where it lies (in pieces, even) instead of copying it.
// r.Txn is not read.
func AppendRequestHead(dst []byte, r *Request, txnLen int) []byte {
	base := len(dst) // alignment is relative to the message's first byte
	dst = append(AppendRequestUpToData(dst, r, len(r.Data)), r.Data...)
	return appendAfterData(dst, base, r, txnLen)
}

// AppendRequestUpToData appends the encoding of r up to its Data, of
// dataLen bytes, which follows it on the wire (aligned, see Align, if the
// head starts the message), then AppendRequestAfterData's bytes: a sender
// can send a large Data from where it lies (in pieces, even) instead of
// copying it. r.Data is not read.
func AppendRequestUpToData(dst []byte, r *Request, dataLen int) []byte {
	base := len(dst)
	dst = append(dst, Version, byte(r.Op))
	dst = binary.AppendUvarint(dst, uint64(r.Flags))
	dst = binary.AppendUvarint(dst, uint64(r.Epoch))
	dst = binary.AppendUvarint(dst, uint64(r.PG.Pool))
	dst = binary.AppendUvarint(dst, uint64(r.PG.Seed))
	dst = appendString(dst, r.Object)
	dst = binary.AppendUvarint(dst, r.Offset)
	dst = binary.AppendUvarint(dst, r.Length)
	dst = binary.AppendUvarint(dst, uint64(r.Limit))
	dst = appendString(dst, r.Key)
	dst = appendBytes(dst, r.Start)
	dst = appendBytes(dst, r.End)
	return appendBulkHead(dst, base, dataLen)
}

// AppendRequestAfterData appends the encoding of r after its Data, Txn
// included, for a message whose bytes before it number at (what
// AppendRequestUpToData gave, and the Data).
func AppendRequestAfterData(dst []byte, r *Request, at int) []byte {
	dst = appendAfterData(dst, len(dst)-at, r, len(r.Txn))
	return AppendRequestTail(append(dst, r.Txn...), r)
}

// appendAfterData appends the encoding of r from its Keys up to its Txn,
// of txnLen bytes, for a message that starts at dst[base] (base may be
// negative: the message's start is not in dst).
func appendAfterData(dst []byte, base int, r *Request, txnLen int) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(r.Keys)))
	for _, k := range r.Keys {
		dst = appendBytes(dst, k)
	}
	dst = appendKVs(dst, r.KVs)
	dst = binary.AppendUvarint(dst, r.PGVersion)
	return appendBulkHead(dst, base, txnLen)
}

// AppendRequestTail appends the encoding of r after its Txn.
func AppendRequestTail(dst []byte, r *Request) []byte {
	dst = binary.AppendUvarint(dst, r.SnapSeq)
	return binary.AppendUvarint(dst, r.Snap)
}

// DecodeRequest decodes one request that fills b exactly.
//
// The returned request's byte slices (Data, Txn, Start, End, Keys, KVs) alias
// b, so large payloads are not copied: the caller must not modify b while the
// request is in use. Empty byte fields decode as nil. Strings are copied.
// Errors match ErrMalformed; the decoder never panics and allocates no more
// than b's length justifies.
func DecodeRequest(b []byte) (*Request, error) {
	d := decoder{b: b, what: "request"}
	d.header()
	r := new(Request)
	if d.err == nil && len(d.b) > 1 {
		r.Op = Op(d.b[1])
		if !r.Op.Valid() {
			d.fail("unknown op %d", d.b[1])
		}
		d.off = 2
	} else {
		d.fail("truncated before op")
	}
	r.Flags = d.u32("flags")
	r.Epoch = clustermap.Epoch(d.uvarint("epoch"))
	r.PG.Pool = clustermap.PoolID(d.u32("pool"))
	r.PG.Seed = d.u32("pg seed")
	r.Object = d.str("object name", MaxObjectNameLen)
	r.Offset = d.uvarint("offset")
	r.Length = d.uvarint("length")
	r.Limit = d.u32("limit")
	r.Key = d.str("xattr name", MaxKeyLen)
	r.Start = d.bytes("range start", MaxKeyLen)
	r.End = d.bytes("range end", MaxKeyLen)
	r.Data = d.bulk("data", MaxDataLen)
	if n := d.count("omap key", 1); n > 0 {
		r.Keys = make([][]byte, n)
		for i := range r.Keys {
			r.Keys[i] = d.bytes("omap key", MaxKeyLen)
		}
	}
	r.KVs = d.kvs()
	r.PGVersion = d.uvarint("pg version")
	r.Txn = d.bulk("transaction", MaxDataLen)
	r.SnapSeq = d.uvarint("snapshot sequence")
	r.Snap = d.uvarint("snapshot")
	if err := d.finish(); err != nil {
		return nil, err
	}
	return r, nil
}

// AppendResponse appends the encoding of r to dst.
func AppendResponse(dst []byte, r *Response) []byte {
	return AppendResponseTail(append(AppendResponseHead(dst, r), r.Data...), r)
}

// AppendResponseHead appends the encoding of r up to its Data, which
// follows it on the wire, then AppendResponseTail's bytes: a server can
// send a large Data from where it lies instead of copying it.
func AppendResponseHead(dst []byte, r *Response) []byte {
	base := len(dst) // alignment is relative to the message's first byte
	dst = append(dst, Version, byte(r.Status))
	dst = binary.AppendUvarint(dst, uint64(r.Epoch))
	dst = appendString(dst, r.Message)
	dst = binary.AppendUvarint(dst, r.Size)
	dst = binary.AppendUvarint(dst, r.Version)
	return appendBulkHead(dst, base, len(r.Data))
}

// AppendResponseTail appends the encoding of r after its Data.
func AppendResponseTail(dst []byte, r *Response) []byte {
	dst = appendKVs(dst, r.KVs)
	dst = binary.AppendUvarint(dst, uint64(len(r.Names)))
	for _, n := range r.Names {
		dst = appendString(dst, n)
	}
	more := byte(0)
	if r.More {
		more = 1
	}
	return append(dst, more)
}

// DecodeResponse decodes one response that fills b exactly. As with
// DecodeRequest, Data and KVs alias b and errors match ErrMalformed.
func DecodeResponse(b []byte) (*Response, error) {
	d := decoder{b: b, what: "response"}
	d.header()
	r := new(Response)
	if d.err == nil && len(d.b) > 1 {
		r.Status = Status(d.b[1])
		if !r.Status.Valid() {
			d.fail("unknown status %d", d.b[1])
		}
		d.off = 2
	} else {
		d.fail("truncated before status")
	}
	r.Epoch = clustermap.Epoch(d.uvarint("epoch"))
	r.Message = d.str("message", MaxMessageLen)
	r.Size = d.uvarint("size")
	r.Version = d.uvarint("version")
	r.Data = d.bulk("data", MaxDataLen)
	r.KVs = d.kvs()
	if n := d.count("name", 1); n > 0 {
		r.Names = make([]string, n)
		for i := range r.Names {
			r.Names[i] = d.str("name", MaxObjectNameLen)
		}
	}
	if d.err == nil {
		if d.off >= len(d.b) {
			d.fail("truncated before more flag")
		} else if m := d.b[d.off]; m > 1 {
			d.fail("more flag %d is not 0 or 1", m)
		} else {
			r.More = m == 1
			d.off++
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return r, nil
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendBulk is appendBytes for a bulk payload of a message that starts at
// dst[base]: from AlignMin bytes on, zero padding puts it at an aligned
// offset (see Align).
func appendBulk(dst []byte, base int, b []byte) []byte {
	return append(appendBulkHead(dst, base, len(b)), b...)
}

// appendBulkHead is appendBulk without the n bytes of payload.
func appendBulkHead(dst []byte, base, n int) []byte {
	dst = binary.AppendUvarint(dst, uint64(n))
	if n >= AlignMin {
		dst = append(dst, make([]byte, PadTo(len(dst)-base))...)
	}
	return dst
}

// PadTo is how many bytes take offset off to the next multiple of Align.
func PadTo(off int) int { return (Align - off%Align) % Align }

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendKVs(dst []byte, kvs []KV) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(kvs)))
	for _, kv := range kvs {
		dst = appendBytes(dst, kv.Key)
		dst = appendBytes(dst, kv.Value)
	}
	return dst
}

// decoder reads fields in order and keeps the first error; once err is set
// every read returns a zero value, so decode functions read straight through
// and check once at the end.
type decoder struct {
	b    []byte
	off  int
	what string // "request" or "response", for error text
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &decodeError{"proto: " + d.what + ": " + fmt.Sprintf(format, args...)}
	}
}

func (d *decoder) header() {
	switch {
	case len(d.b) > MaxFrameBytes:
		d.fail("%d bytes exceeds limit %d", len(d.b), MaxFrameBytes)
	case len(d.b) == 0:
		d.fail("empty")
	case d.b[0] != Version:
		d.fail("unsupported encoding version %d (this build speaks %d)", d.b[0], Version)
	}
}

// uvarint reads a minimally encoded uvarint, so every message has exactly
// one encoding and decode→encode gives back the input bytes.
func (d *decoder) uvarint(field string) uint64 { return d.uvarintOf(field, "") }

// uvarintOf names the field as field+suffix in errors without building that
// string on the success path.
func (d *decoder) uvarintOf(field, suffix string) uint64 {
	if d.err != nil {
		return 0
	}
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		// Most fields are small or zero: one byte.
		v := d.b[d.off]
		d.off++
		return uint64(v)
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		d.fail("truncated in %s%s", field, suffix)
		return 0
	case n < 0:
		d.fail("%s%s overflows 64 bits", field, suffix)
		return 0
	case n > 1 && d.b[d.off+n-1] == 0:
		d.fail("%s%s is not minimally encoded", field, suffix)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) u32(field string) uint32 {
	v := d.uvarint(field)
	if v > math.MaxUint32 {
		d.fail("%s %d exceeds 32 bits", field, v)
		return 0
	}
	return uint32(v)
}

// length reads a length prefix and checks it against max and against the
// bytes that remain, before anything is allocated.
func (d *decoder) length(field string, max int) int {
	n := d.uvarintOf(field, " length")
	if d.err != nil {
		return 0
	}
	if n > uint64(max) {
		d.fail("%s length %d exceeds limit %d", field, n, max)
		return 0
	}
	if rest := len(d.b) - d.off; n > uint64(rest) {
		d.fail("%s length %d exceeds the %d bytes remaining", field, n, rest)
		return 0
	}
	return int(n)
}

func (d *decoder) bytes(field string, max int) []byte {
	n := d.length(field, max)
	if n == 0 {
		return nil
	}
	b := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// bulk reads a field appendBulk wrote; its padding must be zeros, so every
// message has one encoding.
func (d *decoder) bulk(field string, max int) []byte {
	n := d.length(field, max)
	if n < AlignMin {
		if n == 0 {
			return nil
		}
		b := d.b[d.off : d.off+n : d.off+n]
		d.off += n
		return b
	}
	pad := PadTo(d.off)
	if rest := len(d.b) - d.off; n+pad > rest {
		d.fail("%s of %d bytes and %d bytes of alignment exceed the %d bytes remaining", field, n, pad, rest)
		return nil
	}
	for _, c := range d.b[d.off : d.off+pad] {
		if c != 0 {
			d.fail("%s alignment padding is not zero", field)
			return nil
		}
	}
	d.off += pad
	b := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

func (d *decoder) str(field string, max int) string {
	n := d.length(field, max)
	if n == 0 {
		return ""
	}
	s := string(d.b[d.off : d.off+n])
	d.off += n
	return s
}

// count reads an element count; minEach is the fewest bytes one element can
// take, so a count the remaining bytes cannot hold fails before allocation.
func (d *decoder) count(field string, minEach int) int {
	n := d.uvarintOf(field, " count")
	if d.err != nil {
		return 0
	}
	if n > MaxKeys {
		d.fail("%s count %d exceeds limit %d", field, n, MaxKeys)
		return 0
	}
	if rest := len(d.b) - d.off; n*uint64(minEach) > uint64(rest) {
		d.fail("%s count %d exceeds the %d bytes remaining", field, n, rest)
		return 0
	}
	return int(n)
}

func (d *decoder) kvs() []KV {
	n := d.count("key/value", 2)
	if n == 0 {
		return nil
	}
	kvs := make([]KV, n)
	for i := range kvs {
		kvs[i].Key = d.bytes("key", MaxKeyLen)
		kvs[i].Value = d.bytes("value", MaxDataLen)
	}
	return kvs
}

func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.fail("%d trailing bytes", len(d.b)-d.off)
	}
	return d.err
}
