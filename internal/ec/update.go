package ec

import (
	"crypto/subtle"
	"errors"
	"fmt"
)

// Partial writes and truncates of an object already cut into shards.
// Each stripe the change touches is planned (Plan) and its new chunks
// worked out here, on the primary: the write's own bytes for its data
// shards, and for the parity shards either the old parity with the data's
// delta XORed in (Delta) or the stripe encoded again (Full, Reread). So
// every shard gets plain bytes to put at an offset, not a delta to apply
// to what it holds: a shard write sent twice (its answer lost) lands the
// same once or twice. WriteDelta, for small writes, is the exception: its
// parity deltas are applied by the parity shard's holder, once. The old
// bytes are read through a ReadShard (ReadRange's), so a data shard that
// cannot be read is rebuilt from the others; a parity shard that cannot be
// read turns its stripe from Delta into Reread, which needs no old parity.

// ShardUpdate is what a write or truncate leaves on one shard: bytes to
// put at offsets (in ascending order, not overlapping, all below Len;
// none is Xor, except from WriteDelta), and the shard's length afterwards
// (ShardLen of the object's new size): a shard that grows is filled with
// zeros, one that shrinks is cut, after the writes.
type ShardUpdate struct {
	Writes []ShardWrite
	Len    int64
}

// WriteAt returns what each shard of an object of size bytes must do for
// data to be written at off (the object grows to off+len(data) if that is
// past its end, with zeros in any hole). read reads the shards as they
// stand; only bytes below a shard's length are asked for. An empty write
// changes nothing (it does not move the object's end).
func (c *Codec) WriteAt(size, off int64, data []byte, read ReadShard) ([]ShardUpdate, error) {
	if len(data) == 0 {
		return c.update(size, size, size, nil, read)
	}
	return c.update(size, max(size, off+int64(len(data))), off, data, read)
}

// WriteDelta is WriteAt for a small write: one that lies inside the
// object and in one stripe, planned as a Delta. It reads only the old
// bytes of the data chunks the write covers and leaves each parity shard
// a single delta to XOR into what it holds (ShardWrite.Xor), so the
// parity shard reads its own old bytes instead of sending them; its
// holder must check it is at the version the delta was worked out
// against, and apply it once. ok is false for any other write, and when
// a data shard cannot be read (rebuilding it needs the parity): the
// caller takes WriteAt.
func (c *Codec) WriteDelta(size, off int64, data []byte, read ReadShard) (ups []ShardUpdate, ok bool) {
	work := c.l.Plan(size, off, len(data))
	if len(work) != 1 || work[0].Kind != Delta || off+int64(len(data)) > size {
		return nil, false
	}
	dataOnly := func(i int, at int64, n int) ([]byte, error) {
		if i >= c.l.K {
			return nil, errors.New("a delta write reads no parity")
		}
		if at+int64(n) <= c.l.ShardLen(size, i) {
			return read(i, at, n) // inside the object: ReadRange copies it
		}
		return readPadded(c.l, size, read, i, at, n)
	}
	ws, err := c.Writes(work[0], c.writeSrc(off, data, work[0]), c.oldChunk(size, work[0], dataOnly))
	if err != nil {
		return nil, false
	}
	if len(work[0].Ranges) > 1 {
		// Each parity shard's deltas summed (they overlap where the write
		// covers one column of several chunks): XORed into zeros.
		ws, _ = c.applyDeltas(ws, func(_ int, _ int64, n int) ([]byte, error) { return make([]byte, n), nil })
	}
	ups = make([]ShardUpdate, c.l.K+c.l.M)
	for i := range ups {
		ups[i].Len = c.l.ShardLen(size, i)
	}
	for _, sw := range ws {
		sw.Xor = sw.Shard >= c.l.K
		ups[sw.Shard].add(sw)
	}
	return ups, true
}

// Truncate returns what each shard of an object of size bytes must do for
// the object to be to bytes long. A cut inside a stripe zeroes the
// stripe's bytes past to first (a write of zeros, so the stripe's parity
// follows); every shard then takes its new length. Growing writes no
// bytes: zeros code to zero parity.
func (c *Codec) Truncate(size, to int64, read ReadShard) ([]ShardUpdate, error) {
	var zeros []byte
	if sb := c.l.StripeBytes(); to < size && to%sb != 0 {
		zeros = make([]byte, min(size, (to/sb+1)*sb)-to)
	}
	return c.update(size, to, to, zeros, read)
}

// update plans the write of data at off into an object of size bytes that
// is newSize bytes long afterwards.
func (c *Codec) update(size, newSize, off int64, data []byte, read ReadShard) ([]ShardUpdate, error) {
	l := c.l
	rd := func(i int, at int64, n int) ([]byte, error) { return readPadded(l, size, read, i, at, n) }
	ups := make([]ShardUpdate, l.K+l.M)
	for i := range ups {
		ups[i].Len = l.ShardLen(newSize, i)
	}
	for _, w := range l.Plan(size, off, len(data)) {
		ws, err := c.stripeWrites(size, off, data, w, rd)
		if err != nil {
			return nil, fmt.Errorf("stripe %d: %w", w.Stripe, err)
		}
		for _, sw := range ws {
			ups[sw.Shard].add(sw)
		}
	}
	for i := range ups {
		ups[i].merge()
	}
	return ups, nil
}

// readPadded reads n bytes at off of shard i of an object of size bytes:
// what lies below the shard's length through read, zeros past it.
func readPadded(l Layout, size int64, read ReadShard, i int, off int64, n int) ([]byte, error) {
	hi := min(off+int64(n), l.ShardLen(size, i))
	out := make([]byte, n)
	if hi <= off {
		return out, nil
	}
	b, err := read(i, off, int(hi-off))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != hi-off {
		return nil, fmt.Errorf("shard %d: %d bytes at %d, want %d", i, len(b), off, hi-off)
	}
	copy(out, b)
	return out, nil
}

// stripeWrites works out one stripe's new chunks as plain shard writes.
func (c *Codec) stripeWrites(size, off int64, data []byte, w StripeWork, read ReadShard) ([]ShardWrite, error) {
	src, old := c.writeSrc(off, data, w), c.oldChunk(size, w, read)
	ws, err := c.Writes(w, src, old)
	if err != nil || w.Kind != Delta {
		return ws, err
	}
	if plain, ok := c.applyDeltas(ws, read); ok {
		return plain, nil
	}
	w.Kind = Reread
	return c.Writes(w, src, old)
}

// writeSrc returns the bytes of data, written at off, that fall in a
// chunk range of stripe w.
func (c *Codec) writeSrc(off int64, data []byte, w StripeWork) func(ChunkRange) []byte {
	base := w.Stripe * c.l.StripeBytes()
	return func(r ChunkRange) []byte {
		lo := base + int64(r.Chunk)*int64(c.l.Unit) + int64(r.From) - off
		return data[lo : lo+int64(r.To-r.From)]
	}
}

// oldChunk reads a range of a data chunk of stripe w of an object of size
// bytes as it stands, through ReadRange (so a lost data shard is rebuilt),
// zeros past the object's end.
func (c *Codec) oldChunk(size int64, w StripeWork, read ReadShard) ReadChunk {
	base := w.Stripe * c.l.StripeBytes()
	return func(chunk, from, to int) ([]byte, error) {
		b, _, err := c.ReadRange(size, base+int64(chunk)*int64(c.l.Unit)+int64(from), to-from, read)
		if err != nil || len(b) == to-from {
			return b, err // ReadRange's own buffer
		}
		out := make([]byte, to-from)
		copy(out, b)
		return out, nil
	}
}

// applyDeltas turns the parity deltas among ws (one stripe's) into the
// parity bytes they make: per parity shard, the old bytes of the span its
// deltas cover, every delta XORed in (the deltas of several chunks of one
// stripe overlap on the parity shards). False if a parity shard cannot be
// read.
func (c *Codec) applyDeltas(ws []ShardWrite, read ReadShard) ([]ShardWrite, bool) {
	var out []ShardWrite
	for j := c.l.K; j < c.l.K+c.l.M; j++ {
		lo, hi := int64(-1), int64(0)
		for _, w := range ws {
			if w.Shard == j {
				if lo < 0 || w.Off < lo {
					lo = w.Off
				}
				hi = max(hi, w.Off+int64(len(w.Data)))
			}
		}
		if lo < 0 {
			continue
		}
		par, err := read(j, lo, int(hi-lo))
		if err != nil {
			return nil, false
		}
		for _, w := range ws {
			if w.Shard == j {
				xorInto(par[w.Off-lo:], w.Data)
			}
		}
		out = append(out, ShardWrite{Shard: j, Off: lo, Data: par})
	}
	for _, w := range ws {
		if !w.Xor {
			out = append(out, w)
		}
	}
	return out, true
}

func xorInto(dst, src []byte) { subtle.XORBytes(dst, dst, src) }

// add appends w to the shard's writes, cut at its new length (parity
// past the longest data chunk of the last stripe codes zeros and is not
// kept).
func (u *ShardUpdate) add(w ShardWrite) {
	if w.Off >= u.Len || len(w.Data) == 0 {
		return
	}
	w.Data = w.Data[:min(int64(len(w.Data)), u.Len-w.Off)]
	u.Writes = append(u.Writes, w)
}

// merge joins writes that touch (a shard's chunks of consecutive
// stripes) into one, each run copied once into a buffer of its own.
func (u *ShardUpdate) merge() {
	var out []ShardWrite
	for i := 0; i < len(u.Writes); {
		j, n := i+1, len(u.Writes[i].Data)
		for j < len(u.Writes) && u.Writes[i].Off+int64(n) == u.Writes[j].Off {
			n += len(u.Writes[j].Data)
			j++
		}
		w := u.Writes[i]
		if j > i+1 {
			w.Data = make([]byte, 0, n)
			for _, p := range u.Writes[i:j] {
				w.Data = append(w.Data, p.Data...)
			}
		}
		out = append(out, w)
		i = j
	}
	u.Writes = out
}
