package ec

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Reading a range of an erasure-coded object. Reed-Solomon works byte by
// byte, so bytes [a, b) of a chunk follow from bytes [a, b) of any K
// chunks of the same stripe: a range is read from its data shards, and
// where one of them cannot answer, the same in-chunk range is read from
// the other shards and rebuilt. Nothing beyond the range is read.

// ReadShard reads n bytes at off of shard i; an error (the shard is down,
// or its bytes fail their checksums) makes the read fall back to others.
type ReadShard func(shard int, off int64, n int) ([]byte, error)

// ErrUnreadable is returned when fewer than K shards of a stripe answer.
var ErrUnreadable = errors.New("fewer than K shards of a stripe could be read")

// ReadRange returns bytes [off, off+n) of an object of size bytes (cut at
// its end), reading shards through read and rebuilding what a failed data
// shard holds from K others. bad lists the shards that failed, for repair.
func (c *Codec) ReadRange(size, off int64, n int, read ReadShard) (out []byte, bad []int, err error) {
	end := min(size, off+int64(n))
	out = make([]byte, 0, max(0, end-off)) // one buffer, not one per append
	failed := map[int]bool{}
	for pos := off; pos < end; {
		stripe, chunk, in := c.l.Locate(pos)
		l := int(min(int64(c.l.Unit-in), end-pos))
		part, err := c.readChunk(stripe, chunk, in, l, read, failed)
		if err != nil {
			return nil, sortedKeys(failed), err
		}
		out = append(out, part...)
		pos += int64(l)
	}
	return out, sortedKeys(failed), nil
}

// readChunk reads bytes [in, in+l) of data chunk `chunk` of a stripe,
// rebuilding them if its shard fails.
func (c *Codec) readChunk(stripe int64, chunk, in, l int, read ReadShard, failed map[int]bool) ([]byte, error) {
	off := c.l.ShardOffset(stripe, in)
	if !failed[chunk] {
		b, err := read(chunk, off, l)
		if err == nil && len(b) == l {
			return b, nil
		}
		failed[chunk] = true
	}
	parts := make([][]byte, c.l.K+c.l.M)
	have := 0
	for s := 0; s < len(parts) && have < c.l.K; s++ {
		if failed[s] {
			continue
		}
		b, err := read(s, off, l)
		if err != nil || len(b) != l {
			failed[s] = true
			continue
		}
		parts[s] = b
		have++
	}
	if have < c.l.K {
		return nil, fmt.Errorf("stripe %d: %w (%d of %d)", stripe, ErrUnreadable, have, c.l.K+c.l.M)
	}
	if err := c.Reconstruct(parts); err != nil {
		return nil, err
	}
	return parts[chunk], nil
}

func sortedKeys(m map[int]bool) []int { return slices.Sorted(maps.Keys(m)) }

// AssembleSums returns the checksums of the whole block-byte blocks of
// what Assemble puts in a dst of n bytes, taken from sums (sums[i]: the
// checksums of span i's whole blocks, as its reader took them), or nil
// when any of them is not one block of a span: Assemble copies chunks
// whole, so with off, from and the unit block-aligned every block of dst
// is a block of one span, and the reply need not be read again to be
// checksummed.
func (l Layout) AssembleSums(off, from int64, n, block int, sums [][]uint32) []uint32 {
	b := int64(block)
	if n < block || off%b != 0 || from%b != 0 || int64(l.Unit)%b != 0 {
		return nil
	}
	out := make([]uint32, 0, n/block)
	for pos := off; pos+b <= off+int64(n); pos += b {
		stripe, chunk, in := l.Locate(pos)
		at := l.ShardOffset(stripe, in) - from
		if at < 0 || chunk >= len(sums) || at/b >= int64(len(sums[chunk])) {
			return nil
		}
		out = append(out, sums[chunk][at/b])
	}
	return out
}

// Assemble fills dst with object bytes [off, off+len(dst)) from spans,
// the data shards' bytes from shard offset from on (spans[i] of data
// shard i, as long as the shard holds there: Span and ShardLen), copying
// each byte once. It is the read of healthy shards, with no rebuild; it
// returns false if a span is too short for the range (the shard does not
// hold what its meta says), and the caller then reads with ReadRange.
func (l Layout) Assemble(dst []byte, off, from int64, spans [][]byte) bool {
	pieces, ok := l.Pieces(off, off+int64(len(dst)), from, spans)
	for _, p := range pieces {
		dst = dst[copy(dst, p):]
	}
	return ok
}

// Pieces is Assemble without the copy: object bytes [off, end) as views
// of spans in order, one per chunk the range touches, for a caller that
// sends them one after another. ok is false as Assemble's is.
func (l Layout) Pieces(off, end, from int64, spans [][]byte) (pieces [][]byte, ok bool) {
	for pos := off; pos < end; {
		stripe, chunk, in := l.Locate(pos)
		n := min(int64(l.Unit-in), end-pos)
		at := l.ShardOffset(stripe, in) - from
		if chunk >= len(spans) || at < 0 || at+n > int64(len(spans[chunk])) {
			return nil, false
		}
		pieces = append(pieces, spans[chunk][at:at+n])
		pos += n
	}
	return pieces, true
}
