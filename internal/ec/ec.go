// Package ec is the arithmetic of erasure-coded objects: how an object's
// bytes lie in stripes of K data chunks plus M parity chunks (Layout), the
// Reed-Solomon code over them (Codec, on klauspost/reedsolomon), and how a
// write turns into work per stripe (Plan): a full stripe is encoded, a
// small change sends each parity shard a delta, a large partial one reads
// the rest of the stripe and encodes it again.
//
// Format: an object of an erasure-coded pool is cut into stripes of
// K×Unit bytes; chunk i of stripe s is bytes [s·K·Unit + i·Unit, +Unit) of
// the object, kept at [s·Unit, +Unit) of shard i; parity chunk j of stripe
// s at [s·Unit, +Unit) of shard K+j. Bytes past the object's end are zero
// in the code, so a stripe that grows needs no rewrite of its parity
// beyond the delta of its new bytes.
//
// The OSD's write path cuts whole objects into shards (EncodeObjectInto, in
// object.go, into the OSD's pooled buffers); a write at an offset or a
// truncate runs WriteAt or Truncate (update.go), which run Plan, then
// Writes for each stripe, reading through a ReadShard the old bytes a
// stripe needs, and give each shard plain bytes to put and its new
// length. Its read
// path puts the data shards' spans together (Assemble) when they all
// answer, and otherwise runs ReadRange, which reads the data shards and
// rebuilds, from any K, the bytes of one that fails.
//
// Use it for the numbers of erasure coding; it does no IO. Which shard
// version stands after a failure is internal/pg's (DecideShards), where
// shards live internal/placement's (Shards).
package ec

import (
	"errors"
	"fmt"

	"github.com/klauspost/reedsolomon"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Layout is an erasure-coded pool's code: K data and M parity chunks of
// Unit bytes per stripe.
type Layout struct {
	K, M int
	Unit int
}

// Profile is the layout as the cluster map keeps it, whose Validate is
// the one statement of what a layout may be.
func (l Layout) Profile() clustermap.ECProfile {
	return clustermap.ECProfile{K: l.K, M: l.M, StripeUnit: l.Unit}
}

// LayoutOf is the layout of a pool's profile.
func LayoutOf(p clustermap.ECProfile) Layout { return Layout{K: p.K, M: p.M, Unit: p.StripeUnit} }

// Validate says what is wrong with l, if anything.
func (l Layout) Validate() error { return l.Profile().Validate() }

// StripeBytes is how many object bytes one stripe holds.
func (l Layout) StripeBytes() int64 { return int64(l.K) * int64(l.Unit) }

// Locate returns where object byte off lies: its stripe, its chunk (data
// shard) and the offset inside the chunk.
func (l Layout) Locate(off int64) (stripe int64, chunk, inChunk int) {
	stripe = off / l.StripeBytes()
	r := off % l.StripeBytes()
	return stripe, int(r / int64(l.Unit)), int(r % int64(l.Unit))
}

// ShardOffset is where in its shard byte inChunk of a chunk of stripe
// lies (the same for data and parity shards).
func (l Layout) ShardOffset(stripe int64, inChunk int) int64 {
	return stripe*int64(l.Unit) + int64(inChunk)
}

// Codec encodes, updates and rebuilds the chunks of one stripe.
type Codec struct {
	l  Layout
	rs reedsolomon.Encoder
}

// New returns the codec of l.
func New(l Layout) (*Codec, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	rs, err := reedsolomon.New(l.K, l.M)
	if err != nil {
		return nil, fmt.Errorf("erasure code %d+%d: %w", l.K, l.M, err)
	}
	return &Codec{l: l, rs: rs}, nil
}

// Layout is the codec's layout.
func (c *Codec) Layout() Layout { return c.l }

// Encode returns the M parity chunks of K data chunks of equal length.
func (c *Codec) Encode(data [][]byte) ([][]byte, error) {
	if len(data) != c.l.K {
		return nil, fmt.Errorf("encode: %d data chunks, want %d", len(data), c.l.K)
	}
	n := len(data[0])
	shards := make([][]byte, c.l.K+c.l.M)
	copy(shards, data)
	for i := c.l.K; i < len(shards); i++ {
		shards[i] = make([]byte, n)
	}
	if err := c.rs.Encode(shards); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return shards[c.l.K:], nil
}

// parityDelta returns, for each parity chunk, what to XOR into the bytes
// at the same offsets when the bytes of data chunk i change by delta (the
// old bytes XOR the new): Reed-Solomon is linear, so a parity shard
// updates without seeing any other data chunk.
func (c *Codec) parityDelta(i int, delta []byte) ([][]byte, error) {
	if i < 0 || i >= c.l.K {
		return nil, errors.New("parity delta: bad chunk")
	}
	parity := make([][]byte, c.l.M)
	for j := range parity {
		parity[j] = make([]byte, len(delta))
	}
	if err := c.rs.EncodeIdx(delta, i, parity); err != nil {
		return nil, fmt.Errorf("parity delta: %w", err)
	}
	return parity, nil
}

// Reconstruct fills the chunks that are nil (at most M of them) from the
// others, all of one length.
func (c *Codec) Reconstruct(chunks [][]byte) error {
	if len(chunks) != c.l.K+c.l.M {
		return fmt.Errorf("reconstruct: %d chunks, want %d", len(chunks), c.l.K+c.l.M)
	}
	if err := c.rs.Reconstruct(chunks); err != nil {
		return fmt.Errorf("reconstruct: %w", err)
	}
	return nil
}

// Verify reports whether the parity chunks match the data chunks.
func (c *Codec) Verify(chunks [][]byte) (bool, error) { return c.rs.Verify(chunks) }
