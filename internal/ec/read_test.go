package ec

import (
	"bytes"
	"errors"
	"fmt"
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
		obj := make([]byte, 1+r.IntN(int(5*l.StripeBytes())))
		for i := range obj {
			obj[i] = byte(r.Uint32())
		}
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
