package objstore

// Replaying the commit log at Open.
//
// The index's flushed state is the effect of some prefix of the
// log, since batches are applied in log order. Every batch is a sequence of
// blind writes (set, delete, range delete of given values), so applying again
// any suffix of the log that reaches back at least to the flushed prefix ends
// in the state of the whole log. Open replays the groups from the newest
// group's tail to it, then flushes the index and starts a new segment. A
// segment is freed, and the tail moves past it, only after an index flush
// made every batch in it durable in sstables. A group missing between the
// tail and the newest group, or an intact group after a damaged one, is
// corruption: Open refuses the store rather than drop acknowledged writes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// logGroup is one intact group found on disk.
type logGroup struct {
	seg       int
	off       int64
	seq, tail uint64
	body      []byte // header and records
}

// readGroup returns the intact group at off of segment i, if there is one.
func (l *commitLog) readGroup(i int, off int64) (logGroup, bool, error) {
	seg := l.segs[i]
	var hdr [logHeaderLen]byte
	if _, err := seg.f.ReadAt(hdr[:], off); err != nil {
		return logGroup{}, false, fmt.Errorf("objstore: read commit log %s: %w", seg.path, err)
	}
	ln := int64(binary.BigEndian.Uint32(hdr[24:]))
	if binary.BigEndian.Uint32(hdr[:]) != logMagic || ln > l.segSize-off-logHeaderLen {
		return logGroup{}, false, nil
	}
	b := make([]byte, logHeaderLen+ln)
	if _, err := seg.f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return logGroup{}, false, fmt.Errorf("objstore: read commit log %s: %w", seg.path, err)
	}
	seq, tail, _, _, err := decodeLogGroup(b)
	if err != nil {
		return logGroup{}, false, nil
	}
	return logGroup{seg: i, off: off, seq: seq, tail: tail, body: b}, true, nil
}

// scanSegment returns the unbroken run of groups at the start of segment
// i, and where it ends.
func (l *commitLog) scanSegment(i int) ([]logGroup, int64, error) {
	var out []logGroup
	off := int64(0)
	for off+logHeaderLen <= l.segSize {
		g, ok, err := l.readGroup(i, off)
		if err != nil {
			return nil, 0, err
		}
		if !ok || len(out) > 0 && g.seq != out[len(out)-1].seq+1 {
			break
		}
		out = append(out, g)
		off += groupSize(g)
	}
	return out, off, nil
}

// laterGroup looks for an intact group numbered after newest in segment i
// from off on: one there means a damaged group hid it from the scan.
func (l *commitLog) laterGroup(i int, off int64, newest uint64) (uint64, bool, error) {
	const chunk = 1 << 20
	buf := make([]byte, chunk+logHeaderLen)
	for ; off+logHeaderLen <= l.segSize; off += chunk {
		n, err := l.segs[i].f.ReadAt(buf[:min(int64(len(buf)), l.segSize-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, fmt.Errorf("objstore: read commit log %s: %w", l.segs[i].path, err)
		}
		for o := 0; o+logHeaderLen <= n && o < chunk; o += logMinAlign {
			if binary.BigEndian.Uint32(buf[o:]) != logMagic || binary.BigEndian.Uint64(buf[o+8:]) <= newest {
				continue
			}
			if g, ok, err := l.readGroup(i, off+int64(o)); err != nil || ok && g.seq > newest {
				return g.seq, ok, err
			}
		}
	}
	return 0, false, nil
}

// replay applies the groups from the newest one's tail to it (see the
// top of this file), and leaves cur and seq where the next group goes: at the
// start of the segment after the newest group's.
func (l *commitLog) replay() (int, error) {
	bySeq := map[uint64]logGroup{}
	ends := make([]int64, len(l.segs))
	var newest logGroup
	for i := range l.segs {
		run, end, err := l.scanSegment(i)
		if err != nil {
			return 0, err
		}
		ends[i] = end
		for _, g := range run {
			bySeq[g.seq] = g
			if g.seq > newest.seq {
				newest = g
			}
		}
	}
	for i := range l.segs {
		if seq, ok, err := l.laterGroup(i, ends[i], newest.seq); err != nil {
			return 0, err
		} else if ok {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log %s: a damaged group hides group %d, an acknowledged commit", l.segs[i].path, seq)}
		}
	}
	if newest.seq == 0 {
		l.cur, l.seq = 0, 1
		return 0, nil
	}
	n := 0
	for seq := newest.tail; seq <= newest.seq; seq++ {
		g, ok := bySeq[seq]
		if !ok {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d, needed to recover up to group %d, is missing or damaged", seq, newest.seq)}
		}
		_, _, recs, _, err := decodeLogGroup(g.body)
		if err != nil {
			return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d: %v", seq, err)}
		}
		for _, r := range recs {
			b := new(pebble.Batch)
			if err := b.SetRepr(r); err != nil {
				return 0, &CorruptionError{Detail: fmt.Sprintf("commit log group %d: %v", seq, err)}
			}
			if err := l.apply(b); err != nil {
				return 0, fmt.Errorf("objstore: commit log replay: %w", err)
			}
			n++
		}
	}
	l.cur = (newest.seg + 1) % logSegments
	l.seq = newest.seq + 1
	return n, nil
}
