package ec

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// objModel is an object as its shards hold it, next to the plain bytes a
// client wrote (obj), the oracle.
type objModel struct {
	t      *testing.T
	c      *Codec
	l      Layout
	r      *rand.Rand
	obj    []byte
	shards [][]byte // each exactly ShardLen bytes
	seen   map[string]int
}

// erase picks up to M shards that fail their reads.
func (m *objModel) erase() map[int]bool {
	out := map[int]bool{}
	for _, i := range m.r.Perm(m.l.K + m.l.M)[:m.r.IntN(m.l.M+1)] {
		out[i] = true
	}
	return out
}

// strictReader serves an update's reads: a shard in failed fails, and a
// read past a shard's end is a bug of the caller (readPadded stops there).
func (m *objModel) strictReader(failed map[int]bool) ReadShard {
	return func(i int, off int64, n int) ([]byte, error) {
		if failed[i] {
			return nil, fmt.Errorf("shard %d is down", i)
		}
		if off < 0 || off+int64(n) > int64(len(m.shards[i])) {
			m.t.Fatalf("read of shard %d [%d, +%d) past its %d bytes", i, off, n, len(m.shards[i]))
		}
		return bytes.Clone(m.shards[i][off : off+int64(n)]), nil
	}
}

// apply lands each shard's update as an OSD's transaction does: its
// writes, then its new length (zeros where it grows).
func (m *objModel) apply(ups []ShardUpdate) {
	for i, u := range ups {
		s := m.shards[i]
		end := int64(-1)
		for _, w := range u.Writes {
			if w.Off < end || w.Off+int64(len(w.Data)) > u.Len || w.Xor && (i < m.l.K || w.Off+int64(len(w.Data)) > int64(len(s))) {
				m.t.Fatalf("shard %d: write [%d, +%d) out of order, past its new length %d, or a delta to a data shard or past the parity's end", i, w.Off, len(w.Data), u.Len)
			}
			end = w.Off + int64(len(w.Data))
			if end > int64(len(s)) {
				s = append(s, make([]byte, end-int64(len(s)))...)
			}
			if w.Xor {
				xorInto(s[w.Off:], w.Data) // as the parity shard's holder applies it
				continue
			}
			copy(s[w.Off:], w.Data)
		}
		if u.Len > int64(len(s)) {
			s = append(s, make([]byte, u.Len-int64(len(s)))...)
		}
		m.shards[i] = s[:u.Len]
	}
}

func (m *objModel) put(data []byte) {
	shards, err := m.c.EncodeObject(data)
	if err != nil {
		m.t.Fatal(err)
	}
	m.obj, m.shards = bytes.Clone(data), shards
}

func (m *objModel) writeAt(off int64, data []byte) {
	failed := m.erase()
	ups, ok := m.writeDelta(off, data, failed)
	if !ok {
		m.count(m.l.Plan(int64(len(m.obj)), off, len(data)), failed)
		var err error
		if ups, err = m.c.WriteAt(int64(len(m.obj)), off, data, m.strictReader(failed)); err != nil {
			m.t.Fatal(err)
		}
	}
	m.apply(ups)
	if len(data) == 0 {
		return // an empty write does not move the end
	}
	if end := off + int64(len(data)); end > int64(len(m.obj)) {
		m.obj = append(m.obj, make([]byte, end-int64(len(m.obj)))...)
	}
	copy(m.obj[off:], data)
}

// writeDelta takes WriteDelta for half the writes it accepts: a small
// write reads no parity shard (such a read fails the test) and cannot
// rebuild a lost data shard (it declines then).
func (m *objModel) writeDelta(off int64, data []byte, failed map[int]bool) ([]ShardUpdate, bool) {
	if m.r.IntN(2) == 0 {
		return nil, false
	}
	strict := m.strictReader(failed)
	ups, ok := m.c.WriteDelta(int64(len(m.obj)), off, data, func(i int, at int64, n int) ([]byte, error) {
		if i >= m.l.K {
			m.t.Fatalf("WriteDelta read parity shard %d", i)
		}
		return strict(i, at, n)
	})
	if ok {
		m.seen["delta sent as xor"]++
		if len(m.l.Plan(int64(len(m.obj)), off, len(data))[0].Ranges) > 1 {
			m.seen["xor over two chunks"]++
		}
	}
	return ups, ok
}

// count notes the kinds of stripe work a write runs, so the test knows
// it covers them all.
func (m *objModel) count(work []StripeWork, failed map[int]bool) {
	parityLost := false
	for j := m.l.K; j < m.l.K+m.l.M; j++ {
		parityLost = parityLost || failed[j]
	}
	for _, w := range work {
		m.seen[w.Kind.String()]++
		switch {
		case w.Kind == Delta && parityLost:
			m.seen["delta with a parity shard lost"]++
		case w.Kind == Delta && len(w.Ranges) > 2:
			m.seen["delta over three chunks"]++
		}
	}
}

func (m *objModel) truncate(to int64) {
	ups, err := m.c.Truncate(int64(len(m.obj)), to, m.strictReader(m.erase()))
	if err != nil {
		m.t.Fatal(err)
	}
	m.apply(ups)
	if to > int64(len(m.obj)) {
		m.obj = append(m.obj, make([]byte, to-int64(len(m.obj)))...)
	}
	m.obj = m.obj[:to]
}

// check: every shard is as long as ShardLen says, every stripe's data
// chunks hold the object's bytes and its parity verifies, and the object
// reads back whole and by a random range with up to M shards erased.
func (m *objModel) check(what string) {
	m.t.Helper()
	l, size := m.l, int64(len(m.obj))
	for i, s := range m.shards {
		if int64(len(s)) != l.ShardLen(size, i) {
			m.t.Fatalf("%s: shard %d holds %d bytes, ShardLen says %d", what, i, len(s), l.ShardLen(size, i))
		}
	}
	for st := int64(0); st*l.StripeBytes() < size; st++ {
		chunks := make([][]byte, l.K+l.M)
		for i := range chunks {
			chunks[i] = make([]byte, l.Unit)
			copy(chunks[i], m.shards[i][min(int64(len(m.shards[i])), st*int64(l.Unit)):])
		}
		if ok, err := m.c.Verify(chunks); err != nil || !ok {
			m.t.Fatalf("%s: stripe %d: parity does not verify (%v)", what, st, err)
		}
	}
	failed := m.erase()
	got, _, err := m.c.ReadRange(size, 0, int(size), shardReader(m.shards, failed))
	if err != nil || !bytes.Equal(got, m.obj) {
		m.t.Fatalf("%s: read back with shards %v erased: %v (equal: %v)", what, failed, err, bytes.Equal(got, m.obj))
	}
	off := m.r.Int64N(size + 1)
	n := 1 + m.r.IntN(int(2*l.StripeBytes()))
	got, _, err = m.c.ReadRange(size, off, n, shardReader(m.shards, failed))
	if want := m.obj[off:min(size, off+int64(n))]; err != nil || !bytes.Equal(got, want) {
		m.t.Fatalf("%s: read [%d, +%d) with shards %v erased: %v", what, off, n, failed, err)
	}
}

// Random sequences of whole puts, writes at random offsets and lengths
// (inside the object, across its end, past it with a hole) and truncates
// (cutting inside a stripe, at a stripe's edge, growing) keep the shards
// equal to the plain bytes they model: with up to M shards erased while
// a write reads what it needs (a data shard rebuilt, a parity shard's
// loss turning a delta into a reread) and again before each read.
func TestWriteAtKeepsTheObject(t *testing.T) {
	seen := map[string]int{}
	for _, l := range []Layout{{K: 2, M: 1, Unit: 4096}, {K: 4, M: 2, Unit: 4096}} {
		for seed := uint64(1); seed <= 25; seed++ {
			r := rand.New(rand.NewPCG(seed, uint64(l.K)))
			c, err := New(l)
			if err != nil {
				t.Fatal(err)
			}
			m := &objModel{t: t, c: c, l: l, r: r, seen: seen}
			m.put(nil)
			for step := range 40 {
				sb := l.StripeBytes()
				size := int64(len(m.obj))
				what := fmt.Sprintf("%d+%d seed %d step %d", l.K, l.M, seed, step)
				switch op := r.IntN(10); {
				case op == 0:
					m.put(randBytes(r, r.IntN(int(4*sb))))
				case op <= 2:
					to := r.Int64N(size + 2*sb + 1)
					if r.IntN(3) == 0 {
						to = to / sb * sb
					}
					m.truncate(to)
				default:
					off := r.Int64N(size + sb + 1)
					n := r.IntN(int(3 * sb))
					if r.IntN(4) == 0 {
						n = r.IntN(64) + 1 // small: a delta
					}
					m.writeAt(off, randBytes(r, n))
				}
				m.check(what)
			}
		}
	}
	t.Logf("stripe work: %v", seen)
	for _, k := range []string{"full", "delta", "reread", "delta with a parity shard lost", "delta over three chunks", "delta sent as xor", "xor over two chunks"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the run: the test does not cover it", k)
		}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
