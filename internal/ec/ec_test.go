package ec

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// shardModel keeps the K+M shards of one object, written the way Plan says.
type shardModel struct {
	c      *Codec
	l      Layout
	shards [][]byte
	obj    []byte // the object as a client wrote it
}

func newShardModel(t *testing.T, l Layout, stripes int) *shardModel {
	c, err := New(l)
	if err != nil {
		t.Fatal(err)
	}
	m := &shardModel{c: c, l: l}
	for i := 0; i < l.K+l.M; i++ {
		m.shards = append(m.shards, make([]byte, stripes*l.Unit))
	}
	return m
}

// chunk is bytes [from, to) of shard i in stripe s.
func (m *shardModel) chunk(i int, s int64, from, to int) []byte {
	return m.shards[i][m.l.ShardOffset(s, from):m.l.ShardOffset(s, to)]
}

func (m *shardModel) write(t *testing.T, off int64, data []byte) []StripeWork {
	work := m.l.Plan(int64(len(m.obj)), off, len(data))
	for _, w := range work {
		base := w.Stripe * m.l.StripeBytes()
		src := func(r ChunkRange) []byte { // the write's bytes for r
			lo := base + int64(r.Chunk)*int64(m.l.Unit) + int64(r.From) - off
			return data[lo : lo+int64(r.To-r.From)]
		}
		old := func(chunk, from, to int) ([]byte, error) {
			return bytes.Clone(m.chunk(chunk, w.Stripe, from, to)), nil
		}
		writes, err := m.c.Writes(w, src, old)
		if err != nil {
			t.Fatal(err)
		}
		for _, sw := range writes {
			dst := m.shards[sw.Shard][sw.Off : sw.Off+int64(len(sw.Data))]
			if !sw.Xor {
				copy(dst, sw.Data)
				continue
			}
			for b := range dst {
				dst[b] ^= sw.Data[b]
			}
		}
	}
	if end := off + int64(len(data)); end > int64(len(m.obj)) {
		m.obj = append(m.obj, make([]byte, end-int64(len(m.obj)))...)
	}
	copy(m.obj[off:], data)
	return work
}

// check: every stripe's data chunks hold the object's bytes, its parity
// verifies, and any M chunks lost are rebuilt exactly.
func (m *shardModel) check(t *testing.T, r *rand.Rand, what string) {
	t.Helper()
	stripes := len(m.shards[0]) / m.l.Unit
	for s := int64(0); s < int64(stripes); s++ {
		chunks := make([][]byte, m.l.K+m.l.M)
		for i := range chunks {
			chunks[i] = append([]byte(nil), m.chunk(i, s, 0, m.l.Unit)...)
		}
		for i := 0; i < m.l.K; i++ {
			lo := s*m.l.StripeBytes() + int64(i)*int64(m.l.Unit)
			want := make([]byte, m.l.Unit)
			if lo < int64(len(m.obj)) {
				copy(want, m.obj[lo:min(int64(len(m.obj)), lo+int64(m.l.Unit))])
			}
			if !bytes.Equal(chunks[i], want) {
				t.Fatalf("%s: stripe %d chunk %d does not hold the object's bytes", what, s, i)
			}
		}
		if ok, err := m.c.Verify(chunks); err != nil || !ok {
			t.Fatalf("%s: stripe %d: parity does not verify (%v)", what, s, err)
		}
		lost := r.Perm(m.l.K + m.l.M)[:1+r.IntN(m.l.M)]
		broken := make([][]byte, len(chunks))
		copy(broken, chunks)
		for _, i := range lost {
			broken[i] = nil
		}
		if err := m.c.Reconstruct(broken); err != nil {
			t.Fatalf("%s: stripe %d, chunks %v lost: %v", what, s, lost, err)
		}
		for i := range chunks {
			if !bytes.Equal(broken[i], chunks[i]) {
				t.Fatalf("%s: stripe %d, chunks %v lost: chunk %d rebuilt wrong", what, s, lost, i)
			}
		}
	}
}

// Random writes through Plan keep every stripe's parity valid, and any M
// lost chunks rebuild the object.
func TestWritesKeepParity(t *testing.T) {
	kinds := map[StripeKind]int{}
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 29))
		l := Layout{K: 2 + r.IntN(5), M: 1 + r.IntN(3), Unit: 4096}
		const stripes = 6
		m := newShardModel(t, l, stripes)
		for step := 0; step < 40; step++ {
			max := int64(stripes) * l.StripeBytes()
			off := r.Int64N(max)
			n := 1 + r.IntN(int(min(max-off, 3*l.StripeBytes())))
			if r.IntN(4) == 0 { // whole stripes
				off = r.Int64N(stripes) * l.StripeBytes()
				n = int(min(max-off, l.StripeBytes()*int64(1+r.IntN(2))))
			}
			data := randomBytes(r, n)
			for _, w := range m.write(t, off, data) {
				kinds[w.Kind]++
			}
			m.check(t, r, "after a write")
		}
	}
	t.Logf("stripe work by kind: %v", kinds)
	for _, k := range []StripeKind{Full, Delta, Reread} {
		if kinds[k] == 0 {
			t.Errorf("no %s stripe in the run: the test does not cover it", k)
		}
	}
}

func TestPlan(t *testing.T) {
	l := Layout{K: 4, M: 2, Unit: 4096} // stripes of 16 KiB
	cases := []struct {
		what              string
		size, off         int64
		n                 int
		kinds             []StripeKind
		firstRanges, read int
	}{
		{"a whole stripe", 0, 16384, 16384, []StripeKind{Full}, 4, 0},
		{"4 KiB into a full stripe: a delta reads 4 KiB", 1 << 20, 4096, 4096, []StripeKind{Delta}, 1, 4096},
		{"12 KiB of a full stripe: reading the other 4 KiB is cheaper", 1 << 20, 0, 12288, []StripeKind{Reread}, 3, 4096},
		{"a new stripe past the end reads nothing", 16384, 16384, 100, []StripeKind{Delta}, 1, 0},
		{"across two stripes", 1 << 20, 12288, 8192, []StripeKind{Delta, Delta}, 1, 4096},
	}
	for _, c := range cases {
		w := l.Plan(c.size, c.off, c.n)
		if len(w) != len(c.kinds) {
			t.Fatalf("%s: %d stripes, want %d: %+v", c.what, len(w), len(c.kinds), w)
		}
		for i, k := range c.kinds {
			if w[i].Kind != k {
				t.Errorf("%s: stripe %d is %s, want %s", c.what, i, w[i].Kind, k)
			}
		}
		if len(w[0].Ranges) != c.firstRanges || w[0].Read != int64(c.read) {
			t.Errorf("%s: first stripe %+v, want %d ranges and %d bytes read", c.what, w[0], c.firstRanges, c.read)
		}
	}
}

func TestLayoutValidate(t *testing.T) {
	for _, bad := range []Layout{{1, 1, 4096}, {2, 0, 4096}, {30, 3, 4096}, {2, 1, 1000}, {2, 1, 2 << 20}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (Layout{K: 4, M: 2, Unit: 16 << 10}).Validate(); err != nil {
		t.Errorf("4+2 with 16 KiB units refused: %v", err)
	}
}

func BenchmarkEncode4Plus2(b *testing.B) {
	c, _ := New(Layout{K: 4, M: 2, Unit: 1 << 20})
	data := make([][]byte, 4)
	for i := range data {
		data[i] = bytes.Repeat([]byte{byte(i)}, 1<<20)
	}
	b.SetBytes(4 << 20)
	for b.Loop() {
		c.Encode(data)
	}
}
