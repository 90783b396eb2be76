package ec

import (
	"math/rand/v2"
	"testing"
)

// Folds of an object's shards, taken in uneven pieces, code together; a
// byte changed in one shard is found and, with M ≥ 2, placed on its
// position; with M = 1 it is found but not placed.
func TestCheckFolds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, l := range []Layout{{K: 2, M: 1, Unit: 4096}, {K: 4, M: 2, Unit: 4096}, {K: 3, M: 3, Unit: 8192}} {
		c, err := New(l)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 20 {
			data := make([]byte, 1+rng.IntN(10*int(l.StripeBytes())))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			shards, err := c.EncodeObject(data)
			if err != nil {
				t.Fatal(err)
			}
			fold := func() [][]byte {
				folds := make([][]byte, len(shards))
				for i, sh := range shards {
					folds[i] = make([]byte, l.Unit)
					for at := 0; at < len(sh); {
						n := min(len(sh)-at, 1+rng.IntN(3*l.Unit))
						l.FoldInto(folds[i], sh[at:at+n], int64(at))
						at += n
					}
				}
				return folds
			}
			if ok, bad, err := c.CheckFolds(fold()); !ok || bad != -1 || err != nil {
				t.Fatalf("%+v round %d: a good object: %v %d %v", l, round, ok, bad, err)
			}
			victim := rng.IntN(len(shards))
			if len(shards[victim]) == 0 {
				continue
			}
			shards[victim][rng.IntN(len(shards[victim]))] ^= byte(1 + rng.IntN(255))
			ok, bad, err := c.CheckFolds(fold())
			want := victim
			if l.M == 1 {
				want = -1
			}
			if ok || bad != want || err != nil {
				t.Fatalf("%+v round %d: shard %d changed: ok %v, bad %d, want %d (%v)", l, round, victim, ok, bad, want, err)
			}
		}
	}
}
