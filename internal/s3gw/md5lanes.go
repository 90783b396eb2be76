package s3gw

import (
	"crypto/md5"
	"errors"
	"hash"
	"sync"

	md5simd "github.com/minio/md5-simd"
)

// md5Lanes computes the ETag MD5 of large PUT bodies on one multi-lane
// server (minio/md5-simd: up to 16 bodies in one instruction stream with
// AVX-512, 8 with AVX2). MD5 is the most costly step of a PUT in the
// gateway and cannot be split within one body; across bodies it can, but
// only while several are hashed at the same moment. With one or two the
// lanes run mostly empty, which costs more than hashing each alone
// (crypto/md5).
//
// So bodies gather: nothing needs a stripe's MD5 until that stripe is
// stored, and a stripe waiting for its MD5 waits for the next group to run
// (gather). A group runs once it fills the lanes, once every large body in
// flight has joined it (no other could), or once the stripe of any of its
// bodies is stored, so no body waits longer for its MD5 than its stripe
// takes to store. Under load many stripes are being stored at once and
// the groups fill; a lone body is hashed at once, alone, while its stripe
// is stored.
//
// md5-simd keeps every hash opened on its server in a table for good,
// closed or not, and walks that table for every block it hashes: a hash
// opened per body would make each PUT cost more than the one before. So
// the lanes' hashes are opened once, at most lanesMax of them, and reset
// for the next body; a body that finds none free is hashed alone.
type md5Lanes struct {
	once     sync.Once
	server   md5simd.Server
	mu       sync.Mutex
	next     *md5Group        // the group bodies join; nil: none yet
	inFlight int              // large bodies not yet hashed whole, under mu
	free     []md5simd.Hasher // lane hashes opened and not in use, under mu
	opened   int              // lane hashes opened, under mu
	counted  func(how string) // if set, told how each large body is hashed: "lanes" or "alone"
}

// md5Group is bodies whose next bytes are hashed together.
type md5Group struct {
	run  chan struct{} // closed when the group runs
	size int           // bodies in the group; fixed once run is closed
}

const (
	// lanesMinBody is the smallest body that gathers: a smaller one is
	// not worth a lane, and is hashed as its bytes come in.
	lanesMinBody = 1 << 20
	// lanesMinGroup is the smallest group whose bodies take lanes: below
	// it md5-simd hashes each lane alone anyway, and more slowly than
	// crypto/md5.
	lanesMinGroup = 3
	// lanesMax is how many lane hashes may be open: a full group
	// finishing while the next one runs.
	lanesMax = 2 * md5simd.Lanes
)

// hash returns an MD5 hash for a body of size bytes, and what to call
// once the request is done with it (a body cut short never reaches its
// end). A large body's hash gives back its lane as soon as its last byte
// is hashed, not when its request ends: the lane server waits for every
// open lane.
func (l *md5Lanes) hash(size uint64) (hash.Hash, func()) {
	if size < lanesMinBody {
		return md5.New(), func() {}
	}
	l.mu.Lock()
	l.inFlight++
	l.mu.Unlock()
	h := &sizedMD5{lanes: l, size: size, left: size}
	h.release = l.landed
	return h, h.finish
}

// landed counts a large body out of those in flight: its last byte is
// hashed, or its request ended without it. A group it left behind may
// now hold every body in flight.
func (l *md5Lanes) landed() {
	l.mu.Lock()
	l.inFlight--
	if g := l.next; g != nil && g.size >= l.inFlight {
		l.runLocked(g)
	}
	l.mu.Unlock()
}

// gather waits until the group the caller joins runs: it is full, or it
// holds every large body in flight, or stored is closed (the caller's
// stripe is stored: nothing is gained by waiting longer), or another
// body's stripe was stored. It returns the group's size.
func (l *md5Lanes) gather(stored <-chan struct{}) int {
	l.mu.Lock()
	g := l.next
	if g == nil {
		g = &md5Group{run: make(chan struct{})}
		l.next = g
	}
	g.size++
	if g.size == md5simd.Lanes || g.size >= l.inFlight {
		l.runLocked(g)
	}
	l.mu.Unlock()
	select {
	case <-g.run:
	case <-stored:
		l.mu.Lock()
		if l.next == g {
			l.runLocked(g)
		}
		l.mu.Unlock()
	}
	return g.size
}

// runLocked starts g; bodies that gather from now on form the next group.
func (l *md5Lanes) runLocked(g *md5Group) {
	close(g.run)
	l.next = nil
}

// lane returns a free hash on the multi-lane server, or nil if all
// lanesMax are in use.
func (l *md5Lanes) lane() md5simd.Hasher {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		h := l.free[n-1]
		l.free = l.free[:n-1]
		l.mu.Unlock()
		return h
	}
	if l.opened == lanesMax {
		l.mu.Unlock()
		return nil
	}
	l.opened++
	l.mu.Unlock()
	l.once.Do(func() { l.server = md5simd.NewServer() })
	return l.server.NewHash()
}

// freeLane resets a lane's hash for the next body.
func (l *md5Lanes) freeLane(h md5simd.Hasher) {
	h.Reset()
	l.mu.Lock()
	l.free = append(l.free, h)
	l.mu.Unlock()
}

func (l *md5Lanes) count(how string) {
	if l.counted != nil {
		l.counted(how)
	}
}

// sizedMD5 is the MD5 of a large body of known size. Its first group
// decides whether it is hashed on a lane or alone; it sums itself and
// releases its lane once the last byte is in. It is used by one goroutine
// at a time, as a request's body is.
type sizedMD5 struct {
	hash.Hash // nil until the first bytes or group decide
	lanes     *md5Lanes
	size      uint64
	left      uint64 // bytes still to come
	sum       []byte // once summed
	release   func() // nil once called
}

// gather waits for h's next bytes to be hashed with other bodies' (see
// md5Lanes); writeData calls it before each stripe.
func (h *sizedMD5) gather(stored <-chan struct{}) {
	if h.sum != nil {
		return
	}
	n := h.lanes.gather(stored)
	if h.Hash == nil {
		h.choose(n)
	}
}

// choose hashes h on a lane when it runs in a group of n that fills
// enough of them and a lane is free, else alone.
func (h *sizedMD5) choose(n int) {
	var lane md5simd.Hasher
	if n >= lanesMinGroup {
		lane = h.lanes.lane()
	}
	if lane == nil {
		h.lanes.count("alone")
		h.Hash = md5.New()
		return
	}
	h.lanes.count("lanes")
	h.Hash, h.release = lane, func() { h.lanes.freeLane(lane); h.lanes.landed() }
}

func (h *sizedMD5) Write(p []byte) (int, error) {
	if h.sum != nil {
		return 0, errBodyHashed
	}
	if h.Hash == nil {
		h.choose(1)
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
	if h.Hash == nil {
		h.choose(1)
	}
	return h.Hash.Sum(b)
}

// Reset starts the body over.
func (h *sizedMD5) Reset() {
	h.finish()
	h.lanes.mu.Lock()
	h.lanes.inFlight++
	h.lanes.mu.Unlock()
	h.Hash, h.left, h.sum, h.release = nil, h.size, nil, h.lanes.landed
}

func (h *sizedMD5) Size() int      { return md5.Size }
func (h *sizedMD5) BlockSize() int { return md5.BlockSize }

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

// gatherer is a hash whose next bytes wait to be hashed with other
// bodies' (sizedMD5).
type gatherer interface {
	gather(stored <-chan struct{})
}
