package s3gw

import (
	"crypto/md5"
	"errors"
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
	inFlight atomic.Int32     // large bodies being hashed, their last byte not yet in
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

// hash returns an MD5 hash for a body of size bytes, and what to call
// once the request is done with it (a body cut short never reaches its
// end). A large body stops counting as in flight, and gives back its lane,
// as soon as its last byte is hashed, not when its request ends: a body
// waiting for its data to be stored hashes nothing, and a lane held
// by it would only make the server wait for it.
func (l *md5Lanes) hash(size uint64) (hash.Hash, func()) {
	if size < lanesMinBody {
		return md5.New(), func() {}
	}
	h := &sizedMD5{left: size}
	if n := l.inFlight.Add(1); n < lanesMinInFlight {
		l.count("alone")
		h.Hash, h.release = md5.New(), func() { l.inFlight.Add(-1) }
		return h, h.finish
	}
	l.count("lanes")
	l.once.Do(func() { l.server = md5simd.NewServer() })
	lane := l.server.NewHash()
	h.Hash, h.release = lane, func() { lane.Close(); l.inFlight.Add(-1) }
	return h, h.finish
}

// sizedMD5 is the MD5 of a body of known size that sums itself and
// releases what it holds once the last byte is in. It is used by one
// goroutine at a time, as a request's body is.
type sizedMD5 struct {
	hash.Hash
	left    uint64
	sum     []byte // once summed
	release func() // nil once called
}

func (h *sizedMD5) Write(p []byte) (int, error) {
	if h.sum != nil {
		return 0, errBodyHashed
	}
	n, err := h.Hash.Write(p)
	h.left -= min(h.left, uint64(n))
	if err == nil && h.left == 0 {
		h.sum = h.Hash.Sum(nil)
		h.finish()
	}
	return n, err
}

// Sum is the body's MD5 once all of it is in, else that of what is.
func (h *sizedMD5) Sum(b []byte) []byte {
	if h.sum != nil {
		return append(b, h.sum...)
	}
	return h.Hash.Sum(b)
}

// finish releases what h holds, once.
func (h *sizedMD5) finish() {
	if h.release != nil {
		h.release()
		h.release = nil
	}
}

// errBodyHashed: bytes written past the size a body declared; the
// gateway reads no more than that.
var errBodyHashed = errors.New("s3gw: MD5 written past the body's size")

func (l *md5Lanes) count(how string) {
	if l.counted != nil {
		l.counted(how)
	}
}
