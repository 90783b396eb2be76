package volume

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/zeebo/xxh3"
)

// The volume stream: what `cairn volume export` writes and `import` reads.
// Version 1, all integers big-endian:
//
//	header  "CAIRNVOL" | version u16 | flags u16 (0) | size u64 | object size u64 |
//	        from-snapshot name (u16 length + bytes; empty: a full stream) |
//	        to-snapshot name (u16 length + bytes; empty: the volume's head) |
//	        crc32c of the header so far u32
//	record  type u8 | offset u64 | length u32 | data (DATA only) |
//	        crc32c of the record so far u32
//	        DATA (1): length bytes at offset
//	        ZERO (2): the range reads as zeros (diff streams)
//	        END  (3): offset = number of records before it; length 0; then the
//	              xxh3-64 of every byte before END (u64) before the crc
//
// A full stream holds DATA records for the written parts of the volume only
// (holes are implied). Every record is checked before it is applied; an
// import that meets a damaged or truncated stream removes what it created,
// so nothing is ever half-applied.
const (
	streamMagic   = "CAIRNVOL"
	streamVersion = 1
	recData       = 1
	recZero       = 2
	recEnd        = 3
	maxRecordData = 4 << 20
)

// ErrBadStream marks a damaged, truncated or foreign stream.
var ErrBadStream = errors.New("volume stream is damaged")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StreamHeader describes a stream.
type StreamHeader struct {
	Size       uint64
	ObjectSize uint64
	FromSnap   string
	ToSnap     string
}

// streamWriter writes records, keeping the digest END carries.
type streamWriter struct {
	w       *bufio.Writer
	digest  *xxh3.Hasher
	records uint64
}

func newStreamWriter(w io.Writer, h StreamHeader) (*streamWriter, error) {
	sw := &streamWriter{w: bufio.NewWriterSize(w, 1<<20), digest: xxh3.New()}
	b := []byte(streamMagic)
	b = binary.BigEndian.AppendUint16(b, streamVersion)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint64(b, h.Size)
	b = binary.BigEndian.AppendUint64(b, h.ObjectSize)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.FromSnap)))
	b = append(b, h.FromSnap...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.ToSnap)))
	b = append(b, h.ToSnap...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return sw, sw.emit(b)
}

func (sw *streamWriter) emit(b []byte) error {
	sw.digest.Write(b)
	_, err := sw.w.Write(b)
	return err
}

func (sw *streamWriter) record(typ byte, off uint64, data []byte, length uint32) error {
	b := make([]byte, 0, 17+len(data))
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	b = append(b, data...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	sw.records++
	return sw.emit(b)
}

func (sw *streamWriter) data(off uint64, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), maxRecordData)
		if err := sw.record(recData, off, data[:n], uint32(n)); err != nil {
			return err
		}
		off, data = off+uint64(n), data[n:]
	}
	return nil
}

// nonZero writes the parts of data that are not whole 4 KiB blocks of
// zeros (sparse areas inside written objects read as zeros).
func (sw *streamWriter) nonZero(off uint64, data []byte) error {
	const blk = 4096
	start := -1
	for i := 0; i < len(data); i += blk {
		b := data[i:min(i+blk, len(data))]
		if isZero(b) {
			if start >= 0 {
				if err := sw.data(off+uint64(start), data[start:i]); err != nil {
					return err
				}
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		return sw.data(off+uint64(start), data[start:])
	}
	return nil
}

func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func (sw *streamWriter) end() error {
	b := []byte{recEnd}
	b = binary.BigEndian.AppendUint64(b, sw.records)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint64(b, sw.digest.Sum64())
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if _, err := sw.w.Write(b); err != nil {
		return err
	}
	return sw.w.Flush()
}

// streamReader reads and checks records.
type streamReader struct {
	r       *bufio.Reader
	digest  *xxh3.Hasher
	records uint64
	Header  StreamHeader
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadStream, fmt.Sprintf(format, args...))
}

func newStreamReader(r io.Reader) (*streamReader, error) {
	sr := &streamReader{r: bufio.NewReaderSize(r, 1<<20), digest: xxh3.New()}
	var fixed [8 + 2 + 2 + 8 + 8]byte
	if _, err := io.ReadFull(sr.r, fixed[:]); err != nil {
		return nil, bad("no header: %v", err)
	}
	if string(fixed[:8]) != streamMagic {
		return nil, bad("not a cairn volume stream (magic %q)", fixed[:8])
	}
	if v := binary.BigEndian.Uint16(fixed[8:]); v != streamVersion {
		return nil, fmt.Errorf("volume stream version %d: this cairn reads version %d", v, streamVersion)
	}
	if f := binary.BigEndian.Uint16(fixed[10:]); f != 0 {
		return nil, bad("unknown header flags %#x", f)
	}
	hdr := append([]byte(nil), fixed[:]...)
	sr.Header.Size = binary.BigEndian.Uint64(fixed[12:])
	sr.Header.ObjectSize = binary.BigEndian.Uint64(fixed[20:])
	readName := func() (string, error) {
		var l [2]byte
		if _, err := io.ReadFull(sr.r, l[:]); err != nil {
			return "", bad("header cut short: %v", err)
		}
		n := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(sr.r, n); err != nil {
			return "", bad("header cut short: %v", err)
		}
		hdr = append(append(hdr, l[:]...), n...)
		return string(n), nil
	}
	var err error
	if sr.Header.FromSnap, err = readName(); err != nil {
		return nil, err
	}
	if sr.Header.ToSnap, err = readName(); err != nil {
		return nil, err
	}
	var c [4]byte
	if _, err := io.ReadFull(sr.r, c[:]); err != nil {
		return nil, bad("header cut short: %v", err)
	}
	if binary.BigEndian.Uint32(c[:]) != crc32.Checksum(hdr, castagnoli) {
		return nil, bad("header checksum mismatch")
	}
	sr.digest.Write(hdr)
	sr.digest.Write(c[:])
	return sr, nil
}

// record is one checked record; END is returned as typ recEnd.
type record struct {
	typ    byte
	offset uint64
	length uint32
	data   []byte
}

// next returns the next record, checked against its crc (and, for END,
// against the record count and the digest of the whole stream).
func (sr *streamReader) next() (record, error) {
	var h [13]byte
	if _, err := io.ReadFull(sr.r, h[:]); err != nil {
		return record{}, bad("cut short after %d records (no END record): %v", sr.records, err)
	}
	rec := record{typ: h[0], offset: binary.BigEndian.Uint64(h[1:]), length: binary.BigEndian.Uint32(h[9:])}
	body := h[:]
	switch rec.typ {
	case recData:
		if rec.length == 0 || rec.length > maxRecordData {
			return record{}, bad("record %d: data length %d", sr.records, rec.length)
		}
		rec.data = make([]byte, rec.length)
		if _, err := io.ReadFull(sr.r, rec.data); err != nil {
			return record{}, bad("record %d cut short: %v", sr.records, err)
		}
		body = append(append([]byte(nil), h[:]...), rec.data...)
	case recZero:
	case recEnd:
		var d [8]byte
		if _, err := io.ReadFull(sr.r, d[:]); err != nil {
			return record{}, bad("END record cut short: %v", err)
		}
		body = append(append([]byte(nil), h[:]...), d[:]...)
		var c [4]byte
		if _, err := io.ReadFull(sr.r, c[:]); err != nil || binary.BigEndian.Uint32(c[:]) != crc32.Checksum(body, castagnoli) {
			return record{}, bad("END record checksum mismatch")
		}
		if rec.offset != sr.records {
			return record{}, bad("END says %d records, the stream holds %d", rec.offset, sr.records)
		}
		if binary.BigEndian.Uint64(d[:]) != sr.digest.Sum64() {
			return record{}, bad("stream digest mismatch")
		}
		return rec, nil
	default:
		return record{}, bad("record %d: unknown type %d", sr.records, rec.typ)
	}
	var c [4]byte
	if _, err := io.ReadFull(sr.r, c[:]); err != nil {
		return record{}, bad("record %d cut short: %v", sr.records, err)
	}
	if binary.BigEndian.Uint32(c[:]) != crc32.Checksum(body, castagnoli) {
		return record{}, bad("record %d (offset %d): checksum mismatch", sr.records, rec.offset)
	}
	if end := rec.offset + uint64(rec.length); end < rec.offset || end > sr.Header.Size {
		return record{}, bad("record %d: %d bytes at %d go past the volume's end (%d)", sr.records, rec.length, rec.offset, sr.Header.Size)
	}
	sr.digest.Write(body)
	sr.digest.Write(c[:])
	sr.records++
	return rec, nil
}

// Progress reports bytes done of a total.
type Progress func(done, total uint64)

// exact writes length bytes at off whose first len(data) are data and the
// rest zeros: DATA records for the non-zero 4 KiB blocks, ZERO records for
// the rest, so applying it makes the range read exactly so.
func (sw *streamWriter) exact(off uint64, data []byte, length uint64) error {
	const blk = 4096
	zeroFrom := uint64(0) // start of the pending zero run, relative
	zero := false
	flushZero := func(to uint64) error {
		if !zero || to <= zeroFrom {
			zero = false
			return nil
		}
		zero = false
		return sw.record(recZero, off+zeroFrom, nil, uint32(to-zeroFrom))
	}
	for i := 0; i < len(data); i += blk {
		b := data[i:min(i+blk, len(data))]
		if isZero(b) {
			if !zero {
				zero, zeroFrom = true, uint64(i)
			}
			continue
		}
		if err := flushZero(uint64(i)); err != nil {
			return err
		}
		if err := sw.data(off+uint64(i), b); err != nil {
			return err
		}
	}
	if !zero {
		zero, zeroFrom = true, uint64(len(data))
	}
	return flushZero(length)
}
