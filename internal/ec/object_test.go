package ec

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// shardReader reads the shards EncodeObject made as the OSD does: bytes a
// shard does not hold (past its end, below the span asked) read as zeros;
// the shards in failed fail.
func shardReader(shards [][]byte, failed map[int]bool) ReadShard {
	return func(s int, off int64, n int) ([]byte, error) {
		if failed[s] {
			return nil, fmt.Errorf("shard %d is down", s)
		}
		out := make([]byte, n)
		if off < int64(len(shards[s])) {
			copy(out, shards[s][off:])
		}
		return out, nil
	}
}

// TestEncodeObject encodes objects of every awkward size (empty, one
// byte, a chunk and a byte, a stripe less a byte, several stripes and a
// bit) and reads them back whole and by range, with no shard and with
// any M shards failing: whatever the size, any K shards rebuild the
// object, and each shard holds exactly ShardLen bytes.
func TestEncodeObject(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, l := range []Layout{{2, 1, 4096}, {4, 2, 8192}, {3, 3, 4096}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		sb := int(l.StripeBytes())
		for _, size := range []int{0, 1, l.Unit - 1, l.Unit, l.Unit + 1, sb - 1, sb, sb + 1, 3*sb + l.Unit + 7, 5 * sb} {
			obj := randomBytes(r, size)
			shards, err := c.EncodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			total := int64(0)
			for i, s := range shards {
				if int64(len(s)) != l.ShardLen(int64(size), i) {
					t.Fatalf("%d+%d, %d bytes: shard %d holds %d bytes, ShardLen says %d", l.K, l.M, size, i, len(s), l.ShardLen(int64(size), i))
				}
				if i < l.K {
					total += int64(len(s))
				}
			}
			if total != int64(size) {
				t.Fatalf("%d+%d, %d bytes: the data shards hold %d bytes", l.K, l.M, size, total)
			}
			for trial := 0; trial < 10; trial++ {
				failed := map[int]bool{}
				for _, s := range r.Perm(l.K + l.M)[:r.IntN(l.M+1)] {
					failed[s] = true
				}
				off, n := int64(0), size
				if trial > 0 && size > 0 {
					off = r.Int64N(int64(size))
					n = 1 + r.IntN(size-int(off))
				}
				got, _, err := c.ReadRange(int64(size), off, n, shardReader(shards, failed))
				if err != nil || !bytes.Equal(got, obj[off:off+int64(n)]) {
					t.Fatalf("%d+%d, %d bytes, failed %v: read [%d, +%d): %v (same bytes: %v)", l.K, l.M, size, failed, off, n, err, bytes.Equal(got, obj[off:off+int64(n)]))
				}
			}
		}
	}
}

// TestSpan checks that a range's span covers every shard byte the range
// and its rebuild read, and no whole stripe more.
func TestSpan(t *testing.T) {
	l := Layout{K: 2, M: 1, Unit: 4096}
	for _, tc := range []struct{ off, end, from, to int64 }{
		{0, 0, 0, 0},
		{0, 1, 0, 4096},
		{8191, 8193, 0, 8192},
		{8192, 8193, 4096, 8192},
		{100, 3 * 8192, 0, 3 * 4096},
	} {
		if from, to := l.Span(tc.off, tc.end); from != tc.from || to != tc.to {
			t.Errorf("Span(%d, %d) = [%d, %d), want [%d, %d)", tc.off, tc.end, from, to, tc.from, tc.to)
		}
	}
}

// FuzzEncodeObject: any object, encoded, reads back from every choice of
// K shards; one shard more than M lost is refused, never answered wrong.
func FuzzEncodeObject(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte("x"), uint8(1))
	f.Add(bytes.Repeat([]byte("cairn"), 3000), uint8(2))
	c, err := New(Layout{K: 2, M: 1, Unit: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, obj []byte, lost uint8) {
		shards, err := c.EncodeObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := c.ReadRange(int64(len(obj)), 0, len(obj), shardReader(shards, map[int]bool{int(lost % 3): true}))
		if err != nil || !bytes.Equal(got, obj) {
			t.Fatalf("one shard lost (%d): %v", lost%3, err)
		}
		two := map[int]bool{int(lost % 3): true, int(lost+1) % 3: true}
		got, _, err = c.ReadRange(int64(len(obj)), 0, len(obj), shardReader(shards, two))
		if err == nil && !bytes.Equal(got, obj) || err != nil && !errors.Is(err, ErrUnreadable) {
			t.Fatalf("two shards lost: %v", err)
		}
	})
}

// TestEncodeObjectParityPerStripe checks the parity EncodeObject codes
// over whole shards against Encode of each stripe's chunks.
func TestEncodeObjectParityPerStripe(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 2))
	for _, l := range []Layout{{2, 1, 4096}, {4, 2, 8192}, {3, 3, 4096}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		obj := randomBytes(r, 3*l.StripeBytes()+int64(l.Unit)+7)
		shards, err := c.EncodeObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		for at := int64(0); at < int64(len(shards[0])); at += int64(l.Unit) {
			chunks := make([][]byte, l.K)
			for i := range chunks {
				chunks[i] = make([]byte, l.Unit)
				if at < int64(len(shards[i])) {
					copy(chunks[i], shards[i][at:])
				}
			}
			parity, err := c.Encode(chunks)
			if err != nil {
				t.Fatal(err)
			}
			for j, p := range parity {
				got := shards[l.K+j][at:min(at+int64(l.Unit), int64(len(shards[l.K+j])))]
				if !bytes.Equal(got, p[:len(got)]) {
					t.Fatalf("%d+%d: parity %d of the stripe at shard offset %d differs", l.K, l.M, j, at)
				}
			}
		}
	}
}

// BenchmarkEncodeObject codes a 4 MiB object of a 2+1 pool with the
// default stripe unit, as a put does.
func BenchmarkEncodeObject(b *testing.B) {
	c, err := New(Layout{K: 2, M: 1, Unit: 16 << 10})
	if err != nil {
		b.Fatal(err)
	}
	obj := make([]byte, 4<<20)
	b.SetBytes(int64(len(obj)))
	for range b.N {
		if _, err := c.EncodeObject(obj); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeObjectInto is BenchmarkEncodeObject with the shards coded
// into buffers used before, as the OSD's pool gives them back.
func BenchmarkEncodeObjectInto(b *testing.B) {
	c, err := New(Layout{K: 2, M: 1, Unit: 16 << 10})
	if err != nil {
		b.Fatal(err)
	}
	obj := make([]byte, 4<<20)
	var free [][]byte
	b.SetBytes(int64(len(obj)))
	for range b.N {
		shards, err := c.EncodeObjectInto(obj, func(n int) []byte {
			if len(free) > 0 && cap(free[0]) >= n {
				buf := free[0][:n]
				free = free[1:]
				return buf
			}
			return make([]byte, n)
		})
		if err != nil {
			b.Fatal(err)
		}
		free = shards
	}
}

// TestEncodeObjectInto codes into buffers full of another object's bytes
// (a pool's, handed back): the shards, padding and parity included, are
// those of fresh zeroed buffers, and each lies at the start of its buffer.
func TestEncodeObjectInto(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, l := range []Layout{{2, 1, 4096}, {4, 2, 8192}, {3, 3, 4096}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		sb := int(l.StripeBytes())
		for _, size := range []int{0, 1, l.Unit - 1, l.Unit + 1, sb - 1, sb, 3*sb + l.Unit + 7, 5 * sb} {
			obj := randomBytes(r, size)
			want, err := c.EncodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			var bufs [][]byte
			got, err := c.EncodeObjectInto(obj, func(n int) []byte {
				b := make([]byte, n+7)
				for i := range b {
					b[i] = 0xdb
				}
				bufs = append(bufs, b)
				return b[:n]
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("%d+%d, %d bytes: shard %d coded into a used buffer differs from a fresh one", l.K, l.M, size, i)
				}
				if len(got[i]) > 0 && &got[i][0] != &bufs[i][0] {
					t.Fatalf("%d+%d, %d bytes: shard %d is not at the start of its buffer", l.K, l.M, size, i)
				}
			}
		}
	}
}

// TestEncodePieces: the pieces of each data shard, joined, are its shard
// as EncodeObject cuts it, and they are views of the object (no copy);
// the parity, coded stripe by stripe into used buffers, is EncodeObject's.
func TestEncodePieces(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, l := range []Layout{{2, 1, 4096}, {4, 2, 8192}, {3, 3, 4096}, {2, 2, 262144}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		sb := int(l.StripeBytes())
		for _, size := range []int{0, 1, l.Unit - 1, l.Unit + 1, sb - 1, sb, 3*sb + l.Unit + 7, 5 * sb, 2*sb + 1} {
			obj := randomBytes(r, size)
			want, err := c.EncodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			pieces, parity, err := c.EncodePieces(obj, func(n int) []byte { return bytes.Repeat([]byte{0xdb}, n+3) })
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				var got []byte
				for _, p := range pieces[i] {
					if len(p) == 0 {
						t.Fatalf("%d+%d, %d bytes: shard %d has an empty piece", l.K, l.M, size, i)
					}
					lo, at := uintptr(unsafe.Pointer(unsafe.SliceData(obj))), uintptr(unsafe.Pointer(&p[0]))
					if i < l.K && (at < lo || at+uintptr(len(p)) > lo+uintptr(len(obj))) {
						t.Fatalf("%d+%d, %d bytes: a piece of data shard %d is not a view of the object", l.K, l.M, size, i)
					}
					got = append(got, p...)
				}
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("%d+%d, %d bytes: shard %d from its pieces differs from EncodeObject's", l.K, l.M, size, i)
				}
				if i >= l.K && !bytes.Equal(parity[i-l.K], want[i]) {
					t.Fatalf("%d+%d, %d bytes: parity %d differs", l.K, l.M, size, i-l.K)
				}
			}
		}
	}
}

// DataChunks names exactly the data chunks a range has bytes in.
func TestDataChunks(t *testing.T) {
	l := Layout{K: 3, M: 1, Unit: 4096}
	sb := l.StripeBytes()
	for off := int64(0); off < 2*sb; off += 1000 {
		for _, n := range []int64{1, 4095, 4096, 5000, sb - 1, sb, 2 * sb} {
			want := map[int]bool{}
			for b := off; b < off+n; b++ {
				_, c, _ := l.Locate(b)
				want[c] = true
			}
			got := l.DataChunks(off, off+n)
			for c := range l.K {
				if want[c] != slices.Contains(got, c) {
					t.Fatalf("[%d, +%d): chunks %v, want %v", off, n, got, want)
				}
			}
		}
	}
}

// randomBytes returns n bytes from r.
func randomBytes[N int | int64](r *rand.Rand, n N) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// blockSums is what a frame reader takes: the crc32c of each whole block
// of data, and of a short last one.
func blockSums(data []byte, block int) []uint32 {
	var out []uint32
	for off := 0; off < len(data); off += block {
		out = append(out, crc32.Checksum(data[off:min(off+block, len(data))], crc32.MakeTable(crc32.Castagnoli)))
	}
	return out
}

// ShardSums gives each data shard the checksums its own blocks have, from
// the object's, at every awkward size; none where the unit is not made of
// whole blocks, for a parity shard, or from too few sums.
func TestShardSums(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const block = 4096
	for _, l := range []Layout{{2, 1, 4096}, {4, 2, 16384}, {3, 3, 8192}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		sb := int(l.StripeBytes())
		for _, size := range []int{0, 1, block + 5, l.Unit - 1, l.Unit + block, sb - 1, sb, 3*sb + l.Unit + 7, 5 * sb} {
			obj := randomBytes(r, size)
			shards, err := c.EncodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			sums := blockSums(obj, block)
			for i := 0; i < l.K; i++ {
				want := blockSums(shards[i][:len(shards[i])/block*block], block)
				if got := l.ShardSums(sums, int64(size), i, block); !slices.Equal(got, want) && len(want)+len(got) > 0 {
					t.Fatalf("%d+%d unit %d, %d bytes, shard %d: sums %x, want %x", l.K, l.M, l.Unit, size, i, got, want)
				}
			}
			if l.ShardSums(sums, int64(size), l.K, block) != nil {
				t.Fatalf("%d+%d, %d bytes: sums for a parity shard", l.K, l.M, size)
			}
			if size >= block && l.ShardSums(sums[:size/block-1], int64(size), 0, block) != nil {
				t.Fatalf("%d+%d, %d bytes: sums from too few", l.K, l.M, size)
			}
		}
	}
	if (Layout{2, 1, 6144}).ShardSums(make([]uint32, 10), 40960, 0, block) != nil {
		t.Fatal("sums for a unit that is not whole blocks")
	}
}
