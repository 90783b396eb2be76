package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

func TestStableModRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []uint32{0, 1, 2, 3, 5, 6, 7, 8, 100, 1000, 1024, 65535, 65536} {
		for range 2000 {
			x := rng.Uint64()
			got := stableMod(x, n)
			if got >= max(n, 1) {
				t.Fatalf("stableMod(%#x, %d) = %d, out of range", x, n, got)
			}
		}
	}
}

// Growing pg_num from n to n+1 must only move objects into the new PG n:
// that is what lets a pool split PGs instead of reshuffling every object.
func TestStableModSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]uint64, 4000)
	for i := range xs {
		xs[i] = rng.Uint64()
	}
	for n := uint32(1); n < 300; n++ {
		moved := 0
		for _, x := range xs {
			a, b := stableMod(x, n), stableMod(x, n+1)
			if a != b {
				if b != n {
					t.Fatalf("pg_num %d→%d moved hash %#x from PG %d to PG %d, want only to the new PG %d", n, n+1, x, a, b, n)
				}
				moved++
			}
		}
		if n&(n-1) == 0 && moved != 0 { // n a power of two: PG n splits off PG 0
			parent := 0
			for _, x := range xs {
				if stableMod(x, n+1) == n && stableMod(x, n) != 0 {
					parent++
				}
			}
			if parent != 0 {
				t.Fatalf("pg_num %d→%d: %d objects of a PG other than 0 moved", n, n+1, parent)
			}
		}
	}
}

// With a power-of-two pg_num, every PG gets the same share of names.
func TestPGOfUniform(t *testing.T) {
	pool := &clustermap.Pool{ID: 3, PGNum: 64}
	const names = 64 * 400
	counts := make([]int, pool.PGNum)
	for i := range names {
		pg := PGOf(pool, fmt.Sprintf("rbd_data.1234.%016x", i))
		if pg.Pool != pool.ID || pg.Seed >= pool.PGNum {
			t.Fatalf("PGOf gave %v for pool %d with pg_num %d", pg, pool.ID, pool.PGNum)
		}
		counts[pg.Seed]++
	}
	for s, c := range counts {
		// Expected 400, sd 20: ±25% is 5 sd.
		if c < 300 || c > 500 {
			t.Errorf("PG %d got %d of %d names, want 400±100", s, c, names)
		}
	}
}

// Golden values: if this fails, the object → PG format changed and every
// object of every cluster would move.
func TestPGOfGolden(t *testing.T) {
	cases := []struct {
		name  string
		pgNum uint32
		want  uint32
	}{
		{"", 1, 0},
		{"", 1024, 0xc2},
		{"obj", 100, 0x27},
		{"rbd_data.1234.0000000000000001", 4096, 0xc9c},
		{"rbd_data.1234.0000000000000001", 3000, 0x49c},
		{"héllo wörld", 65536, 0x6864},
	}
	for _, c := range cases {
		pool := &clustermap.Pool{ID: 9, PGNum: c.pgNum}
		if got := PGOf(pool, c.name); got != (clustermap.PGID{Pool: 9, Seed: c.want}) {
			t.Errorf("PGOf(pg_num %d, %q) = %v, want 9.%x (frozen format changed)", c.pgNum, c.name, got, c.want)
		}
	}
}

func TestLnUnitAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	check := func(h uint64) {
		u := float64(h>>11+1) / (1 << 53)
		want := math.Log(u)
		got := lnUnit(h)
		if want == 0 {
			if got != 0 {
				t.Fatalf("lnUnit(%#x) = %g, want 0", h, got)
			}
			return
		}
		if rel := math.Abs(got-want) / math.Abs(want); rel > 1e-15 {
			t.Fatalf("lnUnit(%#x) = %.17g, math.Log(%.17g) = %.17g, relative error %.3g", h, got, u, want, rel)
		}
	}
	for _, h := range []uint64{0, 1, 1 << 11, 1<<63 - 1, 1 << 63, math.MaxUint64, math.MaxUint64 - 1<<11} {
		check(h)
	}
	for range 200000 {
		check(rng.Uint64())
	}
	for e := range 64 { // every exponent
		check(1 << e)
		check(1<<e | rng.Uint64()&(1<<e-1))
	}
}

// Straw2 needs ln(u) to be monotonic in u, else a smaller hash could beat a
// larger one at equal weight.
func TestLnUnitMonotonic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100000 {
		h := rng.Uint64() &^ (1<<11 - 1)
		if h == math.MaxUint64&^(1<<11-1) {
			continue
		}
		a, b := lnUnit(h), lnUnit(h+1<<11)
		if !(a <= b) {
			t.Fatalf("lnUnit not monotonic: lnUnit(%#x) = %.17g > lnUnit(%#x) = %.17g", h, a, h+1<<11, b)
		}
	}
}

// Golden values of the hash pipeline, bit-exact: a failure means the frozen
// draw format changed.
func TestHashGolden(t *testing.T) {
	if got, want := xxh3.HashStringSeed("host-01", seedHostName), uint64(0x4883c89f8590eeb7); got != want {
		t.Errorf("host key = %#x, want %#x", got, want)
	}
	pgk := pgKey(clustermap.PGID{Pool: 1, Seed: 0x2a})
	if want := uint64(0x4e08d6bdb0507523); pgk != want {
		t.Errorf("pgKey(1.2a) = %#x, want %#x", pgk, want)
	}
	h := drawHash(pgk, 7, selOSD)
	if want := uint64(0x2b0dd5d8ce3264a7); h != want {
		t.Errorf("drawHash = %#x, want %#x", h, want)
	}
	if got, want := math.Float64bits(lnUnit(h)), uint64(0xbffc8606be13ebc3); got != want {
		t.Errorf("lnUnit(%#x) bits = %#x (%.17g), want %#x (%.17g)", h, got, lnUnit(h), want, math.Float64frombits(want))
	}
}
