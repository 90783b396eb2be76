package s3gw

import (
	"crypto/md5"
	"hash"
	"sync"
	"sync/atomic"

	md5simd "github.com/minio/md5-simd"
)

// md5Lanes computes the ETag MD5 of large PUT bodies on one multi-lane
// server (minio/md5-simd: up to 16 bodies in one instruction stream with
// AVX-512, 8 with AVX2) while enough of them are in flight to fill its
// lanes. MD5 is the most costly step of a PUT in the gateway, and it
// cannot be split within one body; across bodies it can. With few in
// flight the lanes run mostly empty, which costs more than hashing each
// body alone (crypto/md5), so then each is.
type md5Lanes struct {
	once     sync.Once
	server   md5simd.Server
	inFlight atomic.Int32     // large bodies being hashed
	counted  func(how string) // if set, told of each large body: "lanes" or "alone"
}

const (
	// lanesMinBody is the smallest body that may share the lanes: a
	// small one is hashed before another could join it.
	lanesMinBody = 1 << 20
	// lanesMinInFlight is how many large bodies must be in flight for a
	// new one to take a lane: about half of them full pays for the rest.
	lanesMinInFlight = 8
)

// hash returns an MD5 hash for a body of size bytes, and what to call once
// it is summed.
func (l *md5Lanes) hash(size uint64) (hash.Hash, func()) {
	if size < lanesMinBody {
		return md5.New(), func() {}
	}
	n := l.inFlight.Add(1)
	done := func() { l.inFlight.Add(-1) }
	if n < lanesMinInFlight {
		l.count("alone")
		return md5.New(), done
	}
	l.count("lanes")
	l.once.Do(func() { l.server = md5simd.NewServer() })
	h := l.server.NewHash()
	return h, func() { h.Close(); done() }
}

func (l *md5Lanes) count(how string) {
	if l.counted != nil {
		l.counted(how)
	}
}
