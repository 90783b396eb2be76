package e2e

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// payload returns deterministic pseudo-random bytes for (name, size), so
// tests can check content without keeping it in memory.
func payload(name string, gen, size int) []byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], h.Sum64())
	binary.LittleEndian.PutUint64(seed[8:], uint64(gen))
	r := rand.NewChaCha8(seed)
	b := make([]byte, size)
	r.Read(b)
	return b
}

// logUniformSize draws a size in [0, max] whose logarithm is uniform, so
// small and large objects are both common.
func logUniformSize(r *rand.Rand, max int) int {
	return int(math.Exp(r.Float64()*math.Log(float64(max+1)))) - 1
}

func digest(b []byte) [32]byte { return sha256.Sum256(b) }
