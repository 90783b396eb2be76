package ec

import "fmt"

// Whole objects. A shard holds exactly the bytes the format puts on it
// and no padding: data shard i holds chunk i of every stripe, cut where
// the object ends; a parity shard is as long as shard 0 (the bytes past
// the longest data chunk of the last stripe encode zeros, so their parity
// is zero and need not be kept). A reader pads what a shard lacks below
// the span it asks for with zeros (ShardLen says how long each is).

// ShardLen is how many bytes shard i holds for an object of size bytes.
func (l Layout) ShardLen(size int64, i int) int64 {
	if i >= l.K {
		i = 0
	}
	full := size / l.StripeBytes()
	rest := size % l.StripeBytes()
	return full*int64(l.Unit) + min(int64(l.Unit), max(0, rest-int64(i)*int64(l.Unit)))
}

// ShardSums returns the checksums of data shard i's whole block-byte
// blocks, taken from sums, the checksums of the object's whole blocks (a
// trailing one of a short last block is ignored), or nil if they cannot
// be: a data shard holds whole chunks of the object, so with the unit
// block-aligned each of its whole blocks is a whole block of the object,
// and a put need not read its data shards again to checksum them.
func (l Layout) ShardSums(sums []uint32, size int64, i, block int) []uint32 {
	b := int64(block)
	if i >= l.K || int64(l.Unit)%b != 0 || int64(len(sums)) < size/b {
		return nil
	}
	n := l.ShardLen(size, i) / b
	out := make([]uint32, n)
	for j := range out {
		at := int64(j) * b
		pos := at/int64(l.Unit)*l.StripeBytes() + int64(i)*int64(l.Unit) + at%int64(l.Unit)
		out[j] = sums[pos/b]
	}
	return out
}

// Span returns the part [from, to) of every shard that bytes [off, end)
// of an object touch: whole chunks of the stripes the range crosses, so
// one read per shard serves the range (and its rebuild).
func (l Layout) Span(off, end int64) (from, to int64) {
	if end <= off {
		return 0, 0
	}
	first := off / l.StripeBytes()
	last := (end - 1) / l.StripeBytes()
	return first * int64(l.Unit), (last + 1) * int64(l.Unit)
}

// DataChunks returns the data chunks bytes [off, end) of an object touch:
// the positions a read of the range asks for their span.
func (l Layout) DataChunks(off, end int64) []int {
	var out []int
	for i := 0; i < l.K; i++ {
		if end-off >= l.StripeBytes() {
			out = append(out, i)
			continue
		}
		s0, c0, _ := l.Locate(off)
		s1, c1, _ := l.Locate(end - 1)
		if s0 == s1 && i >= c0 && i <= c1 || s0 != s1 && (i >= c0 || i <= c1) {
			out = append(out, i)
		}
	}
	return out
}

// EncodeObject cuts a whole object into its K+M shards, parity included.
// The shards are new buffers; data is not kept.
//
// Reed-Solomon works byte by byte, and shard i holds chunk i of every
// stripe one after the other, so coding the shards whole, padded with
// zeros to the longest (shard 0), gives each stripe's parity at its place
// in one call: no per-stripe buffers or calls, and the parity is written
// where it stays.
func (c *Codec) EncodeObject(data []byte) ([][]byte, error) {
	return c.EncodeObjectInto(data, func(n int) []byte { return make([]byte, n) })
}

// EncodeObjectInto is EncodeObject with the shards in buffers from get,
// which returns n bytes of any content (a pool's): every byte of each
// shard is written here, the padding of a short last stripe zeroed. Shard
// i is a prefix of the i-th buffer get returned, so a caller can hand the
// buffers back by their capacity once it is done with the shards. On
// error, the shards made so far are returned with it, for the same.
func (c *Codec) EncodeObjectInto(data []byte, get func(n int) []byte) ([][]byte, error) {
	l := c.l
	size := int64(len(data))
	n := l.ShardLen(size, 0)
	shards := make([][]byte, l.K+l.M)
	for i := range shards {
		shards[i] = get(int(n))
	}
	for base, at := int64(0), int64(0); base < size; base, at = base+l.StripeBytes(), at+int64(l.Unit) {
		for i := 0; i < l.K; i++ {
			lo := min(size, base+int64(i)*int64(l.Unit))
			copy(shards[i][at:], data[lo:min(size, lo+int64(l.Unit))])
		}
	}
	for i := 0; i < l.K; i++ {
		// A data shard's bytes are a prefix of it (only the last stripe
		// is short); the rest is the padding Reed-Solomon codes over.
		clear(shards[i][l.ShardLen(size, i):])
	}
	if n > 0 {
		// Encode overwrites the parity shards whole.
		if err := c.rs.Encode(shards); err != nil {
			return shards, fmt.Errorf("encode: %w", err)
		}
	}
	for i := 0; i < l.K; i++ {
		shards[i] = shards[i][:l.ShardLen(size, i)]
	}
	return shards, nil
}

// EncodePieces is EncodeObjectInto without copying the data: data shard
// i comes as the views of data it consists of (chunk i of each stripe,
// in order, none empty), and parity shard j in a buffer from get (a
// piece of its own unless empty; parity[j] for the caller to hand back). A
// sender writes each shard from its views, so the object's bytes are not
// copied before they reach the network. Each stripe is coded on its own,
// the last, if short, from a zero-padded copy of it (at most a stripe).
func (c *Codec) EncodePieces(data []byte, get func(n int) []byte) (pieces [][][]byte, parity [][]byte, err error) {
	l := c.l
	size := int64(len(data))
	unit := int64(l.Unit)
	pieces = make([][][]byte, l.K+l.M)
	parity = make([][]byte, l.M)
	for j := range parity {
		parity[j] = get(int(l.ShardLen(size, 0)))[:l.ShardLen(size, 0)]
		if len(parity[j]) > 0 {
			pieces[l.K+j] = [][]byte{parity[j]}
		}
	}
	stripe := make([][]byte, l.K+l.M)
	var pad []byte
	for base, at := int64(0), int64(0); base < size; base, at = base+l.StripeBytes(), at+unit {
		n := min(unit, size-base) // chunk 0's length: every chunk of the stripe is coded at it
		for i := 0; i < l.K; i++ {
			lo := min(size, base+int64(i)*unit)
			chunk := data[lo:min(size, lo+unit)]
			if len(chunk) > 0 {
				pieces[i] = append(pieces[i], chunk)
			}
			if int64(len(chunk)) < n {
				if pad == nil {
					pad = make([]byte, l.StripeBytes())
				}
				p := pad[int64(i)*unit : int64(i)*unit+n]
				clear(p[copy(p, chunk):])
				chunk = p
			}
			stripe[i] = chunk
		}
		for j := range parity {
			stripe[l.K+j] = parity[j][at : at+n]
		}
		if err := c.rs.Encode(stripe); err != nil {
			return pieces, parity, fmt.Errorf("encode: %w", err)
		}
	}
	return pieces, parity, nil
}
