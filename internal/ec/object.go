package ec

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

// EncodeObject cuts a whole object into its K+M shards, parity included.
// The shards are new buffers; data is not kept.
func (c *Codec) EncodeObject(data []byte) ([][]byte, error) {
	l := c.l
	size := int64(len(data))
	shards := make([][]byte, l.K+l.M)
	for i := range shards {
		shards[i] = make([]byte, l.ShardLen(size, i))
	}
	stripes := (size + l.StripeBytes() - 1) / l.StripeBytes()
	chunks := make([][]byte, l.K)
	for s := int64(0); s < stripes; s++ {
		base := s * l.StripeBytes()
		at := s * int64(l.Unit)
		n := min(int64(l.Unit), int64(len(shards[0]))-at) // shard 0's chunk is the stripe's longest
		for i := range chunks {
			lo := min(size, base+int64(i)*int64(l.Unit))
			hi := min(size, lo+n)
			copy(shards[i][at:], data[lo:hi])
			// The stripe's chunks, zero-padded to n (a shard's buffer
			// past its own length holds nothing, so pad apart).
			if hi-lo == n {
				chunks[i] = shards[i][at : at+n]
			} else {
				chunks[i] = make([]byte, n)
				copy(chunks[i], data[lo:hi])
			}
		}
		parity, err := c.Encode(chunks)
		if err != nil {
			return nil, err
		}
		for j, p := range parity {
			copy(shards[l.K+j][at:], p)
		}
	}
	return shards, nil
}
