package ec

import "fmt"

// How a write of an erasure-coded object becomes work per stripe. A
// stripe whose every data chunk the write covers is encoded from the new
// bytes alone (Full). Otherwise the parity follows either by delta (read
// the old bytes of the touched ranges, send each parity shard the XOR of
// old and new through parityDelta) or by re-encoding (read the untouched
// ranges of the stripe's data chunks, encode the whole stripe): Plan takes
// the one that reads fewer bytes. Bytes past the object's end read as
// zeros, so a new stripe is a delta against nothing.

// StripeKind is how a stripe's parity follows a write.
type StripeKind int

const (
	Full   StripeKind = iota + 1 // every data chunk rewritten: encode
	Delta                        // XOR the change into each parity chunk
	Reread                       // read the rest of the stripe, encode it again
)

func (k StripeKind) String() string {
	return map[StripeKind]string{Full: "full", Delta: "delta", Reread: "reread"}[k]
}

// ChunkRange is the part [From, To) of data chunk Chunk that a write covers.
type ChunkRange struct {
	Chunk    int
	From, To int
}

// StripeWork is one stripe's share of a write.
type StripeWork struct {
	Stripe int64
	Kind   StripeKind
	Ranges []ChunkRange // the chunk ranges the write covers, by chunk
	Read   int64        // bytes to read first: old bytes (Delta) or the rest (Reread)
}

// Plan splits a write of n bytes at off into the work of each stripe it
// touches, for an object of size bytes before the write.
func (l Layout) Plan(size, off int64, n int) []StripeWork {
	if n <= 0 {
		return nil
	}
	var out []StripeWork
	end := off + int64(n)
	for pos := off; pos < end; {
		stripe, _, _ := l.Locate(pos)
		stripeEnd := min(end, (stripe+1)*l.StripeBytes())
		w := StripeWork{Stripe: stripe, Ranges: l.ranges(stripe, pos, stripeEnd)}
		w.Kind, w.Read = l.choose(size, w)
		out = append(out, w)
		pos = stripeEnd
	}
	return out
}

// Columns is the span [from, to) of chunk bytes the stripe's write
// covers in any data chunk: all a delta reads, of the data chunks it
// touches and of every parity chunk (a column of a stripe codes on its
// own). A reread reads whole chunks.
func (w StripeWork) Columns() (from, to int) {
	from = -1
	for _, r := range w.Ranges {
		if from < 0 || r.From < from {
			from = r.From
		}
		to = max(to, r.To)
	}
	return max(from, 0), to
}

// ranges cuts object bytes [from, to) of one stripe into chunk ranges.
func (l Layout) ranges(stripe, from, to int64) []ChunkRange {
	var out []ChunkRange
	for pos := from; pos < to; {
		_, chunk, in := l.Locate(pos)
		chunkEnd := min(to, stripe*l.StripeBytes()+int64(chunk+1)*int64(l.Unit))
		out = append(out, ChunkRange{Chunk: chunk, From: in, To: in + int(chunkEnd-pos)})
		pos = chunkEnd
	}
	return out
}

// choose picks the cheaper of delta and reread for a stripe the write
// does not cover whole, counting only bytes that exist (below size).
func (l Layout) choose(size int64, w StripeWork) (StripeKind, int64) {
	covered := 0
	for _, r := range w.Ranges {
		covered += r.To - r.From
	}
	if covered == l.K*l.Unit {
		return Full, 0
	}
	base := w.Stripe * l.StripeBytes()
	existing := func(chunk, from, to int) int64 { // bytes of [from, to) of chunk below size
		lo := base + int64(chunk)*int64(l.Unit) + int64(from)
		hi := lo + int64(to-from)
		return max(0, min(hi, size)-lo)
	}
	var old, rest int64
	for _, r := range w.Ranges {
		old += existing(r.Chunk, r.From, r.To)
	}
	for c := 0; c < l.K; c++ {
		rest += existing(c, 0, l.Unit)
	}
	rest -= old
	if old <= rest {
		return Delta, old
	}
	return Reread, rest
}

// ShardWrite is bytes to put at Off of shard Shard, or, with Xor, to XOR
// into the bytes there (a parity delta: the shard reads its own old bytes).
type ShardWrite struct {
	Shard int
	Off   int64
	Data  []byte
	Xor   bool
}

// ReadChunk returns bytes [from, to) of data chunk chunk of the stripe
// being written, as they are now (zeros past the object's end), in a
// buffer the caller owns: Writes turns it into the delta in place.
type ReadChunk func(chunk, from, to int) ([]byte, error)

// Writes turns one stripe's work into what each shard must write: the
// write's own bytes on their data shards, and the parity: deltas to XOR
// in (Delta), or whole chunks encoded from the stripe, reading its
// untouched ranges through old (Full, Reread). src returns the write's
// bytes for a chunk range of the stripe.
func (c *Codec) Writes(w StripeWork, src func(ChunkRange) []byte, old ReadChunk) ([]ShardWrite, error) {
	l := c.l
	var out []ShardWrite
	for _, r := range w.Ranges {
		out = append(out, ShardWrite{Shard: r.Chunk, Off: l.ShardOffset(w.Stripe, r.From), Data: src(r)})
	}
	if w.Kind == Delta {
		for _, r := range w.Ranges {
			delta, err := old(r.Chunk, r.From, r.To)
			if err != nil {
				return nil, err
			}
			if len(delta) != r.To-r.From {
				return nil, fmt.Errorf("chunk %d: %d old bytes of [%d, %d)", r.Chunk, len(delta), r.From, r.To)
			}
			xorInto(delta, src(r))
			deltas, err := c.parityDelta(r.Chunk, delta)
			if err != nil {
				return nil, err
			}
			for j, d := range deltas {
				out = append(out, ShardWrite{Shard: l.K + j, Off: l.ShardOffset(w.Stripe, r.From), Data: d, Xor: true})
			}
		}
		return out, nil
	}
	data, err := c.stripeAfter(w, src, old)
	if err != nil {
		return nil, err
	}
	parity, err := c.Encode(data)
	if err != nil {
		return nil, err
	}
	for j, p := range parity {
		out = append(out, ShardWrite{Shard: l.K + j, Off: l.ShardOffset(w.Stripe, 0), Data: p})
	}
	return out, nil
}

// stripeAfter assembles the stripe's K data chunks as the write leaves
// them: its own bytes where it writes, the old ones elsewhere.
func (c *Codec) stripeAfter(w StripeWork, src func(ChunkRange) []byte, old ReadChunk) ([][]byte, error) {
	l := c.l
	data := make([][]byte, l.K)
	for i := range data {
		data[i] = make([]byte, l.Unit)
		covered := 0
		for _, r := range w.Ranges {
			if r.Chunk == i {
				copy(data[i][r.From:r.To], src(r))
				covered += r.To - r.From
			}
		}
		if covered == l.Unit {
			continue
		}
		for _, gap := range gaps(w.Ranges, i, l.Unit) {
			prev, err := old(i, gap[0], gap[1])
			if err != nil {
				return nil, err
			}
			copy(data[i][gap[0]:gap[1]], prev)
		}
	}
	return data, nil
}

// gaps returns the parts of chunk i, of unit bytes, that no range covers.
func gaps(ranges []ChunkRange, i, unit int) [][2]int {
	var out [][2]int
	pos := 0
	for _, r := range ranges { // in chunk order, and in order within one
		if r.Chunk != i {
			continue
		}
		if r.From > pos {
			out = append(out, [2]int{pos, r.From})
		}
		pos = r.To
	}
	if pos < unit {
		out = append(out, [2]int{pos, unit})
	}
	return out
}
