package placement

import (
	"math/bits"

	"github.com/zeebo/xxh3"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Everything in this file is a frozen on-disk format: clients and OSDs of
// different versions must agree on it, and any change moves data. The golden
// tests in hash_test.go and placement_test.go pin it.

// Seeds of the name hashes, so that a host, a rack and a shared flash
// device of the same name draw differently.
const (
	seedHostName  = 1
	seedRackName  = 2
	seedFlashName = 3
)

// Selectors keep the two draws of one PG (failure domain, OSD inside it)
// independent of each other.
const (
	selDomain = 1 << 32
	selOSD    = 2 << 32
)

const golden = 0x9e3779b97f4a7c15 // 2^64 / phi, odd

// PGOf maps an object name to its placement group in pool. The frozen
// format is: h = XXH3-64(name, seed 0), seed = stableMod(h, pool.PGNum).
// Stable mod means that raising pg_num from n to n+1 only moves objects of
// one parent PG into the new PG n, so pg_num can grow by splitting.
func PGOf(pool *clustermap.Pool, name string) clustermap.PGID {
	return clustermap.PGID{Pool: pool.ID, Seed: stableMod(xxh3.HashString(name), pool.PGNum)}
}

// stableMod folds x into [0, n): the low bits under the next power of two,
// folded onto the lower half when they land beyond n. With a power-of-two
// pg_num every PG gets the same share of objects; otherwise the folded PGs
// get twice the share of the others, which is why pg_num should be a power
// of two.
func stableMod(x uint64, n uint32) uint32 {
	if n <= 1 {
		return 0
	}
	mask := uint64(1)<<bits.Len32(n-1) - 1
	if x&mask < uint64(n) {
		return uint32(x & mask)
	}
	return uint32(x & (mask >> 1))
}

// mix64 is the SplitMix64 finalizer: a bijection with full avalanche, cheap
// enough to run for every item of every draw.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// pgKey is the per-PG half of the draw hash, computed once per placement.
func pgKey(pg clustermap.PGID) uint64 {
	return mix64((uint64(pg.Pool)<<32 | uint64(pg.Seed)) + golden)
}

// drawHash is the frozen draw input: a 64-bit hash of (pg, item, selector).
func drawHash(pgk, item, sel uint64) uint64 {
	return mix64(mix64(pgk^item) + (sel+1)*golden)
}

// Constants of lnUnit. ln2 is split so that e*ln2Hi is exact.
const (
	ln2Hi  = 6.93147180369123816490e-01
	ln2Lo  = 1.90821492927058770002e-10
	sqrt2  = 1.41421356237309504880
	inv3   = 1.0 / 3
	inv5   = 1.0 / 5
	inv7   = 1.0 / 7
	inv9   = 1.0 / 9
	inv11  = 1.0 / 11
	inv13  = 1.0 / 13
	inv15  = 1.0 / 15
	inv17  = 1.0 / 17
	inv19  = 1.0 / 19
	unitSh = 11 // 64 - 53 bits of mantissa
)

// lnUnit returns ln(u) for u = (h>>11 + 1) / 2^53, a uniform value in
// (0, 1]. It uses only IEEE-754 +, -, *, / with every product rounded by an
// explicit conversion, so the compiler may not fuse them: the result is
// bit-identical on every platform, unlike math.Log (assembly on amd64,
// possibly FMA-fused Go on arm64). Accuracy is within a few ulp.
func lnUnit(h uint64) float64 {
	k := h>>unitSh + 1 // 1 .. 2^53, exact as a float64
	e := bits.Len64(k) - 1
	m := float64(k) / float64(uint64(1)<<e) // exact: k = m * 2^e, m in [1, 2)
	if m > sqrt2 {
		m /= 2 // exact
		e++
	}
	// ln(m) = 2 atanh(s) = 2(s + s^3/3 + s^5/5 + ...), |s| <= 0.1716.
	s := (m - 1) / (m + 1)
	z := float64(s * s)
	p := float64(z*inv19) + inv17
	p = float64(p*z) + inv15
	p = float64(p*z) + inv13
	p = float64(p*z) + inv11
	p = float64(p*z) + inv9
	p = float64(p*z) + inv7
	p = float64(p*z) + inv5
	p = float64(p*z) + inv3
	p = float64(p * z) // s^2/3 + s^4/5 + ...
	lnm := float64(2*s) + float64(float64(2*s)*p)
	f := float64(e - 53)
	return float64(f*ln2Hi) + (float64(f*ln2Lo) + lnm)
}
