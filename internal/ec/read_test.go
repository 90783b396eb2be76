package ec

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReadRange reads random ranges of random objects while up to M shards
// fail (down, or failing only at some offsets, as a bad block would), and
// compares with the object; with more than M failed, reads that need a
// rebuild fail with ErrUnreadable rather than return wrong bytes.
func TestReadRange(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rebuilt, refused := 0, 0
	for trial := 0; trial < 200; trial++ {
		l := Layout{K: 2 + r.IntN(5), M: 1 + r.IntN(3), Unit: 4096 * (1 + r.IntN(2))}
		m := newShardModel(t, l, 6)
		obj := randomBytes(r, 1+r.IntN(int(5*l.StripeBytes())))
		m.write(t, 0, obj)
		nfail := r.IntN(l.M + 2) // sometimes one more than M
		failing := r.Perm(l.K + l.M)[:nfail]
		badAt := r.Int64N(int64(6 * l.Unit)) // a shard fails only from here on
		read := func(s int, off int64, n int) ([]byte, error) {
			if i := slices.Index(failing, s); i == 0 && off+int64(n) > badAt || i > 0 {
				return nil, fmt.Errorf("shard %d fails at %d", s, off)
			}
			return bytes.Clone(m.shards[s][off : off+int64(n)]), nil
		}
		for q := 0; q < 20; q++ {
			off := r.Int64N(int64(len(obj)))
			n := 1 + r.IntN(len(obj)-int(off))
			got, bad, err := m.c.ReadRange(int64(len(obj)), off, n, read)
			if nfail > l.M && errors.Is(err, ErrUnreadable) {
				refused++
				continue
			}
			if err != nil {
				t.Fatalf("trial %d (%d+%d, failing %v): read [%d, +%d): %v", trial, l.K, l.M, failing, off, n, err)
			}
			if !bytes.Equal(got, obj[off:off+int64(n)]) {
				t.Fatalf("trial %d (%d+%d, failing %v from %d): read [%d, +%d) returned other bytes", trial, l.K, l.M, failing, badAt, off, n)
			}
			if len(bad) > 0 {
				rebuilt++
			}
			for _, s := range bad {
				if !slices.Contains(failing, s) {
					t.Fatalf("trial %d: shard %d reported bad, but only %v fail", trial, s, failing)
				}
			}
		}
	}
	t.Logf("%d reads rebuilt from other shards, %d refused with more than M failed", rebuilt, refused)
	if rebuilt < 500 || refused < 100 {
		t.Fatalf("too few reads met a failed shard (%d rebuilt, %d refused): the test tests little", rebuilt, refused)
	}
}

// randomObject draws a layout (2-6 data and 1-3 parity chunks of 4-16
// KiB) and an object of at least least bytes and up to five stripes more,
// and codes it.
func randomObject(t *testing.T, r *rand.Rand, least int) (Layout, []byte, [][]byte) {
	t.Helper()
	l := Layout{K: 2 + r.IntN(5), M: 1 + r.IntN(3), Unit: 4096 * (1 + r.IntN(4))}
	c, err := New(l)
	if err != nil {
		t.Fatal(err)
	}
	obj := randomBytes(r, least+r.IntN(int(5*l.StripeBytes())))
	shards, err := c.EncodeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return l, obj, shards
}

// TestAssemble reads random ranges of random objects from their data
// shards' spans, copied and as pieces, and compares with the object; a
// span cut short is refused.
func TestAssemble(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 1))
	for trial := 0; trial < 200; trial++ {
		l, obj, shards := randomObject(t, r, 1)
		for q := 0; q < 20; q++ {
			off := r.Int64N(int64(len(obj)))
			end := off + 1 + r.Int64N(int64(len(obj))-off)
			from, to := l.Span(off, end)
			spans := make([][]byte, l.K)
			for i := range spans {
				spans[i] = shards[i][min(from, int64(len(shards[i]))):min(to, int64(len(shards[i])))]
			}
			dst := make([]byte, end-off)
			if !l.Assemble(dst, off, from, spans) || !bytes.Equal(dst, obj[off:end]) {
				t.Fatalf("%+v: [%d, %d) of %d bytes assembled wrong", l, off, end, len(obj))
			}
			pieces, ok := l.Pieces(off, end, from, spans)
			if !ok || !bytes.Equal(bytes.Join(pieces, nil), obj[off:end]) || slices.ContainsFunc(pieces, func(p []byte) bool { return len(p) == 0 || len(p) > l.Unit }) {
				t.Fatalf("%+v: [%d, %d) of %d bytes in pieces: wrong", l, off, end, len(obj))
			}
			if i := r.IntN(l.K); len(spans[i]) > 0 {
				spans[i] = spans[i][:len(spans[i])-1]
				if l.Assemble(dst, off, from, spans) && !bytes.Equal(dst, obj[off:end]) {
					t.Fatalf("%+v: a short span assembled wrong bytes", l)
				}
			}
		}
	}
}

// TestAssembleSums: for block-aligned ranges, the checksums AssembleSums
// takes from the spans' blocks are the checksums of the assembled bytes'
// blocks; a range or a span that does not line up with blocks gives none.
func TestAssembleSums(t *testing.T) {
	const block = 4096
	blockSums := func(b []byte) []uint32 {
		var out []uint32
		for len(b) >= block {
			out = append(out, crc32.Checksum(b[:block], crc32.MakeTable(crc32.Castagnoli)))
			b = b[block:]
		}
		return out
	}
	r := rand.New(rand.NewPCG(31, 1))
	var checked, refused int
	for trial := 0; trial < 100; trial++ {
		l, obj, shards := randomObject(t, r, block)
		for q := 0; q < 20; q++ {
			off := r.Int64N(int64(len(obj))/block) * block
			if q%4 == 0 {
				off += 1 + r.Int64N(block-1) // not aligned
			}
			if off >= int64(len(obj)) {
				continue
			}
			end := off + 1 + r.Int64N(int64(len(obj))-off)
			from, to := l.Span(off, end)
			spans, sums := make([][]byte, l.K), make([][]uint32, l.K)
			for i := range spans {
				spans[i] = shards[i][min(from, int64(len(shards[i]))):min(to, int64(len(shards[i])))]
				sums[i] = blockSums(spans[i])
			}
			dst := make([]byte, end-off)
			if !l.Assemble(dst, off, from, spans) {
				t.Fatalf("%+v: [%d, %d) not assembled", l, off, end)
			}
			got := l.AssembleSums(off, from, len(dst), block, sums)
			switch {
			case got == nil && off%block == 0 && len(dst) >= block:
				t.Fatalf("%+v: no sums for the aligned range [%d, %d)", l, off, end)
			case got == nil:
				refused++
			case !slices.Equal(got, blockSums(dst)):
				t.Fatalf("%+v: [%d, %d): sums %x, want %x", l, off, end, got, blockSums(dst))
			default:
				checked++
			}
		}
	}
	if checked < 500 || refused < 200 {
		t.Fatalf("%d ranges checked, %d refused: the test tests little", checked, refused)
	}
}

// BenchmarkAssemble is the healthy read of a 4 MiB object of a 2+1 pool
// from its two data spans, against ReadRange over the same spans.
func BenchmarkAssemble(b *testing.B) {
	l := Layout{K: 2, M: 1, Unit: 64 << 10}
	c, err := New(l)
	if err != nil {
		b.Fatal(err)
	}
	obj := make([]byte, 4<<20)
	shards, err := c.EncodeObject(obj)
	if err != nil {
		b.Fatal(err)
	}
	from, _ := l.Span(0, int64(len(obj)))
	b.Run("Assemble", func(b *testing.B) {
		b.SetBytes(int64(len(obj)))
		dst := make([]byte, len(obj))
		for range b.N {
			if !l.Assemble(dst, 0, from, shards[:l.K]) {
				b.Fatal("short span")
			}
		}
	})
	b.Run("ReadRange", func(b *testing.B) {
		b.SetBytes(int64(len(obj)))
		read := func(s int, off int64, n int) ([]byte, error) { return shards[s][off : off+int64(n)], nil }
		for range b.N {
			if _, _, err := c.ReadRange(int64(len(obj)), 0, len(obj), read); err != nil {
				b.Fatal(err)
			}
		}
	})
}
