package objstore

// The commit log's format (commitlog.go says what the log is for).
//
// A segment is a sequence of groups, each starting at a multiple of
// the device's direct-IO alignment (never rewritten once written, so a torn
// write can only hit the group being written, which was not acknowledged):
//
//	magic(4) crc32c(4) seq(8) tail(8) len(4) align(4) | records (len bytes) | zero pad to align
//	record: n(4) | pebble batch representation (n bytes)
//
// The crc covers seq through the records. Groups are numbered without gaps
// across segments; a segment is written from its start, so its groups end
// at the first one that is invalid or does not follow its predecessor.
// tail is the number of the oldest group recovery needs; align, the
// alignment the group was written with (512 to 4096), says where the next
// one starts.

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
)

const (
	logMagic     = 0xCA1C0106
	logHeaderLen = 32
	logMinAlign  = 512 // the smallest alignment a group is written with
)

// decodeLogGroup checks the group at the start of b (header and records;
// the padding need not be there) and returns its records' batches. It
// fails on anything but a whole, intact group.
func decodeLogGroup(b []byte) (seq, tail uint64, recs [][]byte, n int, err error) {
	if len(b) < logHeaderLen || binary.BigEndian.Uint32(b) != logMagic {
		return 0, 0, nil, 0, errors.New("no group")
	}
	ln := binary.BigEndian.Uint32(b[24:])
	if uint64(ln) > uint64(len(b)-logHeaderLen) {
		return 0, 0, nil, 0, errors.New("group runs past the segment")
	}
	n = logHeaderLen + int(ln)
	if crc32.Checksum(b[8:n], castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return 0, 0, nil, 0, errors.New("group checksum mismatch")
	}
	seq, tail = binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])
	if a := binary.BigEndian.Uint32(b[28:]); tail > seq || a < logMinAlign || a > 4096 || a&(a-1) != 0 {
		return 0, 0, nil, 0, errors.New("bad group header")
	}
	for r := b[logHeaderLen:n]; len(r) > 0; {
		if len(r) < 4 || uint64(binary.BigEndian.Uint32(r)) > uint64(len(r)-4) {
			return 0, 0, nil, 0, errors.New("record runs past its group")
		}
		k := binary.BigEndian.Uint32(r)
		recs = append(recs, r[4:4+k])
		r = r[4+k:]
	}
	return seq, tail, recs, n, nil
}

// groupSize is the bytes g takes in its segment, padding included.
func groupSize(g logGroup) int64 {
	return roundUp(int64(len(g.body)), int64(binary.BigEndian.Uint32(g.body[28:])))
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

// encodeLogGroup appends group number seq, holding recs, to dst, padded to
// align.
func encodeLogGroup(dst []byte, seq, tail uint64, align uint32, recs [][]byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, logMagic)
	dst = binary.BigEndian.AppendUint32(dst, 0) // crc, below
	dst = binary.BigEndian.AppendUint64(dst, seq)
	dst = binary.BigEndian.AppendUint64(dst, tail)
	dst = binary.BigEndian.AppendUint32(dst, 0) // length, below
	dst = binary.BigEndian.AppendUint32(dst, align)
	for _, r := range recs {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(r)))
		dst = append(dst, r...)
	}
	b := dst[start:]
	binary.BigEndian.PutUint32(b[24:], uint32(len(b)-logHeaderLen))
	binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[8:], castagnoli))
	pad := int(roundUp(int64(len(b)), int64(align))) - len(b)
	dst = slices.Grow(dst, pad)
	n := len(dst)
	dst = dst[:n+pad]
	clear(dst[n:])
	return dst
}
