package volume

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cairn-storage/cairn/client"
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

// Export writes the whole volume (at the snapshot it was opened at) as a
// stream: the written parts only.
func (v *Volume) Export(ctx context.Context, w io.Writer, progress Progress) error {
	sw, err := newStreamWriter(w, StreamHeader{Size: v.Size, ObjectSize: v.ObjectSize, ToSnap: v.snapName})
	if err != nil {
		return err
	}
	for off := uint64(0); off < v.Size; off += v.ObjectSize {
		n := min(v.ObjectSize, v.Size-off)
		ext, err := v.Read(ctx, off, n)
		if err != nil {
			return err
		}
		pos := off
		for _, e := range ext {
			if e.Data != nil {
				if err := sw.nonZero(pos, e.Data); err != nil {
					return err
				}
				pos += uint64(len(e.Data))
			} else {
				pos += e.Hole
			}
		}
		if progress != nil {
			progress(off+n, v.Size)
		}
	}
	return sw.end()
}

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

// ExportDiff writes the changes of a volume from snapshot from to snapshot
// to (empty: the volume as it is now) as a diff stream. Objects that did
// not change are found from their snapshot state, without reading data;
// each changed object is sent whole (its data, and zeros for the rest).
func ExportDiff(ctx context.Context, p *client.Pool, name, from, to string, w io.Writer, progress Progress) error {
	if from == "" {
		return fmt.Errorf("%w: a diff needs the snapshot it starts from", ErrInvalid)
	}
	a, err := OpenSnap(ctx, p, name, from)
	if err != nil {
		return err
	}
	b, err := OpenSnap(ctx, p, name, to)
	if err != nil {
		return err
	}
	fromID := b.Info.mustSnap(from)
	toID := uint64(0)
	if to != "" {
		toID = b.Info.mustSnap(to)
		if toID < fromID {
			return fmt.Errorf("%w: snapshot %q is older than %q", ErrInvalid, to, from)
		}
	}
	sw, err := newStreamWriter(w, StreamHeader{Size: b.Size, ObjectSize: b.ObjectSize, FromSnap: from, ToSnap: to})
	if err != nil {
		return err
	}
	n := b.objects(b.Size)
	for idx := uint64(0); idx < n; idx++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		changed, err := b.changed(ctx, idx, fromID, toID, a.Size)
		if err != nil {
			return err
		}
		if changed {
			off := idx * b.ObjectSize
			length := min(b.ObjectSize, b.Size-off)
			data, _, _, err := b.readObject(ctx, idx, 0, length)
			if err != nil {
				return err
			}
			if err := sw.exact(off, data, length); err != nil {
				return err
			}
		}
		if progress != nil {
			progress((idx+1)*b.ObjectSize, n*b.ObjectSize)
		}
	}
	return sw.end()
}

// mustSnap returns the ID of a snapshot known to exist.
func (i *Info) mustSnap(name string) uint64 {
	s, ok := i.snap(name)
	if !ok {
		panic("volume: snapshot " + name + " vanished from a header already read")
	}
	return s.ID
}

// changed reports whether object idx differs between snapshots from and
// to (0: the head), from the object's snapshot state alone.
func (v *Volume) changed(ctx context.Context, idx, from, to, fromSize uint64) (bool, error) {
	if idx*v.ObjectSize >= fromSize {
		return true, nil // beyond the old end: send what is there now
	}
	set, _, err := v.p.AtSnap(0).Snaps(ctx, v.objectName(idx))
	if errors.Is(err, client.ErrNotFound) {
		return false, nil // absent now, so at both (in a clone: the parent's, at both)
	}
	if err != nil {
		return false, err
	}
	return set.Resolve(from, true) != set.Resolve(to, true), nil
}

// ImportDiff applies a diff stream to a volume that has the stream's
// starting snapshot and has not changed since it, then takes the stream's
// ending snapshot. A damaged stream or a failure part-way rolls the volume
// back to the starting snapshot, so nothing is ever half-applied.
func ImportDiff(ctx context.Context, p *client.Pool, r io.Reader, name string, progress Progress) (info Info, err error) {
	sr, err := newStreamReader(r)
	if err != nil {
		return Info{}, err
	}
	h := sr.Header
	if h.FromSnap == "" {
		return Info{}, fmt.Errorf("%w: this is a full stream: use import", ErrInvalid)
	}
	info, err = Stat(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	from, ok := info.snap(h.FromSnap)
	if !ok {
		return Info{}, fmt.Errorf("%w: the diff starts at snapshot %q, which %s/%s does not have", ErrInvalid, h.FromSnap, p.Name(), name)
	}
	if h.ToSnap != "" {
		if _, ok := info.snap(h.ToSnap); ok {
			return Info{}, fmt.Errorf("%w: %s/%s already has snapshot %q, where the diff ends", ErrSnapExists, p.Name(), name, h.ToSnap)
		}
	}
	if h.ObjectSize != info.ObjectSize {
		return Info{}, fmt.Errorf("%w: the diff has %d-byte objects, %s/%s %d-byte ones", ErrInvalid, h.ObjectSize, p.Name(), name, info.ObjectSize)
	}
	if err := unchangedSince(ctx, p, &info, from); err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			rctx := context.WithoutCancel(ctx)
			if rerr := Rollback(rctx, p, name, h.FromSnap, nil); rerr != nil {
				err = fmt.Errorf("%w (and rolling %s/%s back to %q failed: %v)", err, p.Name(), name, h.FromSnap, rerr)
			} else {
				err = fmt.Errorf("%w; %s/%s was rolled back to snapshot %q", err, p.Name(), name, h.FromSnap)
			}
		}
	}()
	if h.Size > info.Size {
		if _, err := Resize(ctx, p, name, h.Size, false); err != nil {
			return Info{}, err
		}
	}
	v, err := Open(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	defer v.Close()
	for done := false; !done; {
		rec, err := sr.next()
		if err != nil {
			return Info{}, err
		}
		switch rec.typ {
		case recEnd:
			done = true
		case recData:
			err = v.WriteAt(ctx, rec.data, rec.offset)
		case recZero:
			err = v.Zero(ctx, rec.offset, uint64(rec.length), true)
		}
		if err != nil {
			return Info{}, err
		}
		if progress != nil {
			progress(min(rec.offset+uint64(rec.length), h.Size), h.Size)
		}
	}
	if progress != nil {
		progress(h.Size, h.Size) // the whole stream is applied
	}
	if h.Size < v.Size {
		// This import is the volume's writer: the shrink is its own.
		if _, err := Resize(ctx, p, name, h.Size, true); err != nil {
			return Info{}, err
		}
	}
	if h.ToSnap != "" {
		if _, err := SnapCreate(ctx, p, name, h.ToSnap); err != nil {
			return Info{}, err
		}
	}
	return Stat(ctx, p, name)
}

// unchangedSince checks that a volume holds what it held at snapshot s
// (like zfs receive, a diff applies only onto the state it was made from).
// Objects unwritten since are found from their snapshot state; the data of
// the others (rewritten by a rollback, say) is compared.
func unchangedSince(ctx context.Context, p *client.Pool, info *Info, s Snap) error {
	if info.Size != s.Size {
		return fmt.Errorf("%w: %s/%s was resized since snapshot %q: roll it back first (cairn volume snap rollback)", ErrInvalid, p.Name(), info.Name, s.Name)
	}
	now, err := OpenSnap(ctx, p, info.Name, "")
	if err != nil {
		return err
	}
	then, err := OpenSnap(ctx, p, info.Name, s.Name)
	if err != nil {
		return err
	}
	return info.eachDataObject(ctx, p, 0, nil, func(idx uint64) error {
		set, _, err := p.Snaps(ctx, info.objectName(idx))
		if errors.Is(err, client.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if set.Resolve(s.ID, true).Head {
			return nil
		}
		same, err := sameObject(ctx, now, then, idx)
		if err != nil || same {
			return err
		}
		return fmt.Errorf("%w: %s/%s was written after snapshot %q (at byte %d): roll it back first (cairn volume snap rollback)", ErrInvalid, p.Name(), info.Name, s.Name, idx*info.ObjectSize)
	})
}

// sameObject reports whether object idx reads the same in a and b.
func sameObject(ctx context.Context, a, b *Volume, idx uint64) (bool, error) {
	da, _, _, err := a.readObject(ctx, idx, 0, a.ObjectSize)
	if err != nil {
		return false, err
	}
	db, _, _, err := b.readObject(ctx, idx, 0, b.ObjectSize)
	if err != nil {
		return false, err
	}
	n := max(len(da), len(db))
	return bytes.Equal(append(da, make([]byte, n-len(da))...), append(db, make([]byte, n-len(db))...)), nil
}

// Import creates the volume name from a full stream. If the stream turns
// out damaged or the import fails, the volume is removed again.
func Import(ctx context.Context, p *client.Pool, r io.Reader, name string, progress Progress) (info Info, err error) {
	sr, err := newStreamReader(r)
	if err != nil {
		return Info{}, err
	}
	if sr.Header.FromSnap != "" {
		return Info{}, fmt.Errorf("%w: this is a diff stream (from snapshot %q): use import-diff", ErrInvalid, sr.Header.FromSnap)
	}
	info, err = Create(ctx, p, name, sr.Header.Size, sr.Header.ObjectSize)
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			if rerr := Remove(context.WithoutCancel(ctx), p, name, true); rerr != nil {
				err = fmt.Errorf("%w (and removing the partly imported volume failed: %v)", err, rerr)
			}
		}
	}()
	v, err := Open(ctx, p, name)
	if err != nil {
		return Info{}, err
	}
	defer v.Close()
	for {
		rec, err := sr.next()
		if err != nil {
			return Info{}, err
		}
		switch rec.typ {
		case recEnd:
			if progress != nil {
				progress(v.Size, v.Size)
			}
			if sr.Header.ToSnap != "" {
				// The stream was made at a snapshot: take it here too, so
				// diffs from it apply.
				if _, err := SnapCreate(ctx, p, name, sr.Header.ToSnap); err != nil {
					return Info{}, err
				}
				return Stat(ctx, p, name)
			}
			return info, nil
		case recData:
			if err := v.WriteAt(ctx, rec.data, rec.offset); err != nil {
				return Info{}, err
			}
		case recZero:
			if err := v.Zero(ctx, rec.offset, uint64(rec.length), true); err != nil {
				return Info{}, err
			}
		}
		if progress != nil {
			progress(rec.offset+uint64(rec.length), v.Size)
		}
	}
}
