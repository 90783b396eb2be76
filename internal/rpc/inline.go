package rpc

import (
	"crypto/tls"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// inlineWriter lets a caller write its request to the socket itself when
// the connection's writer goroutine has nothing to do, instead of handing
// the frame over and waiting for that goroutine to be scheduled.
//
// Why: at one request in flight, every hand-over between goroutines is a
// wake-up of an idle thread. In a virtual machine each can take longer than
// the network and the replica's parsing together, so a primary's
// replicate frames left well after the write came in. A caller that writes
// its own frame sends it at once.
//
// Only frames up to inlineMax are written so. A large one takes long
// enough to copy that the wake-up does not matter, and a primary that
// copied megabytes to its replicas' sockets itself would start its own
// write that much later (large writes ran slower so).
//
// The write never blocks: it takes what the socket takes now. Whatever is
// left of the frame goes to the writer goroutine, which writes it before
// anything else; until then callers queue their frames as before.
//
// Under load the writer does better: it yields once before it writes, so
// the frames of callers about to send go out in the same system call and
// wake the peer once (writeBatch). So a client writes inline only the one
// call in flight on its connection, as a server does the reply to the only
// request in flight: with 16 calls in flight, callers that each wrote their
// own frame cost a gateway one writev per request, and small random object
// reads ran slower, on more OSD CPU per read, than when the writer batched
// them.
type inlineWriter struct {
	raw     syscall.RawConn
	writeFn func(fd uintptr) bool // writeSome, bound once: a closure per write would allocate
	// whole, instead of raw, is an encrypted connection (tls.go): it has no
	// socket to write to without blocking, so a frame is copied into
	// scratch and written whole, as one TLS record, blocking under mu.
	// On loopback and any network whose socket buffer is not full that
	// returns at once; if it is full the caller waits as the writer
	// goroutine would have.
	whole   io.Writer
	scratch []byte
	kick    chan struct{} // capacity 1: rest waits for the writer

	mu      sync.Mutex // held by whoever writes to the socket
	rest    outFrame   // under mu, while hasRest: a frame begun inline
	restN   int        // bytes of rest the socket already took
	hasRest bool
	closed  bool // under mu: the writer is gone, nothing is written inline

	// Under mu, for writeSome: the frame being written, what is left of
	// it, and what the socket took.
	cur      outFrame
	parts    [][]byte
	partsBuf [8][]byte
	wrote    int
	werr     error

	frames, rests atomic.Int64 // frames begun inline; of those, left unfinished
}

const inlineMax = 64 << 10

func newInlineWriter(nc any) *inlineWriter {
	if tc, ok := nc.(*tls.Conn); ok {
		return &inlineWriter{whole: tc, kick: make(chan struct{}, 1)}
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &inlineWriter{raw: raw, kick: make(chan struct{}, 1)}
	w.writeFn = w.writeSome
	return w
}

// send writes f to the socket from the calling goroutine if no other
// writer holds it, and reports whether it took f (written, or begun with
// the rest handed to the writer goroutine). A socket error is returned with
// f released; the connection is then broken.
func (w *inlineWriter) send(f outFrame) (bool, error) {
	if w == nil || f.size() > inlineMax || !w.mu.TryLock() {
		return false, nil
	}
	defer w.mu.Unlock()
	if w.hasRest || w.closed {
		return false, nil
	}
	if w.whole != nil {
		return true, w.sendWhole(f)
	}
	w.cur = f
	w.parts = w.cur.parts(w.partsBuf[:0])
	total := partsLen(w.parts)
	w.wrote, w.werr = 0, nil
	err := w.raw.Write(w.writeFn)
	if err == nil {
		err = w.werr
	}
	n := w.wrote
	w.cur, w.parts, w.werr = outFrame{}, nil, nil
	clear(w.partsBuf[:])
	w.frames.Add(1)
	if err != nil {
		f.release()
		return true, err
	}
	if n == total {
		f.release()
		return true, nil
	}
	w.rest, w.restN, w.hasRest = f, n, true
	w.rests.Add(1)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return true, nil
}

// sendWhole writes f to an encrypted connection in one Write, under mu.
func (w *inlineWriter) sendWhole(f outFrame) error {
	defer f.release()
	var a [8][]byte
	w.scratch = w.scratch[:0]
	for _, p := range f.parts(a[:0]) {
		w.scratch = append(w.scratch, p...)
	}
	w.frames.Add(1)
	_, err := w.whole.Write(w.scratch)
	return err
}

// writeSome is send's callback for RawConn.Write: it writes w.parts with
// writev until they are all written or the socket would block, and never
// asks to wait.
func (w *inlineWriter) writeSome(fd uintptr) bool {
	for len(w.parts) > 0 {
		n, err := writev(int(fd), w.parts)
		if n > 0 {
			w.wrote += n
			w.parts = skipBytes(w.parts, n)
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true // the writer goroutine finishes it
		case err != nil:
			w.werr = err
			return true
		case n == 0:
			return true
		}
	}
	return true
}

// flushRest writes, blocking, what an inline write left of its frame.
// The writer goroutine calls it holding mu.
func (w *inlineWriter) flushRest(dst interface{ Write([]byte) (int, error) }) error {
	if w == nil || !w.hasRest {
		return nil
	}
	f := w.rest
	var a [8][]byte
	parts := skipBytes(f.parts(a[:0]), w.restN)
	w.rest, w.restN, w.hasRest = outFrame{}, 0, false
	defer f.release()
	for _, p := range parts {
		if _, err := dst.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// close stops inline writes and releases a frame left unwritten. The
// writer goroutine calls it when it exits.
func (w *inlineWriter) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.hasRest {
		w.rest.release()
		w.rest, w.hasRest = outFrame{}, false
	}
}

// writev is writev(2) of up to four non-empty parts.
func writev(fd int, parts [][]byte) (int, error) {
	var iov [4]syscall.Iovec
	k := 0
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		if k == len(iov) {
			break
		}
		iov[k].Base = &p[0]
		iov[k].SetLen(len(p))
		k++
	}
	if k == 0 {
		return 0, nil
	}
	n, _, e := syscall.Syscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// skipBytes drops the first n bytes of parts.
func skipBytes(parts [][]byte, n int) [][]byte {
	for len(parts) > 0 && n >= len(parts[0]) {
		n -= len(parts[0])
		parts = parts[1:]
	}
	if n > 0 {
		parts[0] = parts[0][n:]
	}
	return parts
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}
