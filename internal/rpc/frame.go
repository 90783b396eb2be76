package rpc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Frame header layout, big-endian:
//
//	magic u32 | kind u8 | reserved [3]u8 (zero) | id u64 | body length u32 | body sum u32
//
// The body sum is the crc32c of the big-endian crc32c of each sumBlock-byte
// block of the body (the last may be shorter). A receiver computes the
// block checksums as the bytes arrive, while they are in the CPU cache, and
// keeps them with a large body: the object store takes them as the
// checksums of the blocks it writes (proto aligns large payloads to
// blocks) instead of reading megabytes again from memory to checksum them.
const (
	frameMagic  = 0x43524e46 // "CRNF"
	headerLen   = 24
	kindRequest = 1
	kindReply   = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sumBlock is the block size of the body sum: the object store's block.
const sumBlock = proto.Align

// bodySum computes a body sum over bytes written in pieces of any size.
type bodySum struct {
	outer uint32   // crc32c of the finished blocks' checksums
	cur   uint32   // crc32c of the current block so far
	fill  int      // bytes in the current block
	keep  bool     // whether to keep the blocks' checksums
	sums  []uint32 // the kept checksums of the finished blocks
}

func (s *bodySum) write(p []byte) {
	for len(p) > 0 {
		n := min(len(p), sumBlock-s.fill)
		s.cur = crc32.Update(s.cur, castagnoli, p[:n])
		s.fill += n
		p = p[n:]
		if s.fill == sumBlock {
			s.endBlock()
		}
	}
}

func (s *bodySum) endBlock() {
	s.outer = crcAppend32(s.outer, s.cur)
	if s.keep {
		s.sums = append(s.sums, s.cur)
	}
	s.cur, s.fill = 0, 0
}

// crcAppend32 is crc32.Update(crc, castagnoli, v in big-endian bytes),
// byte by byte: through crc32.Update, the four bytes escaped to the heap,
// an allocation for every 4 KiB block of every frame.
func crcAppend32(crc, v uint32) uint32 {
	crc = ^crc
	for shift := 24; shift >= 0; shift -= 8 {
		crc = castagnoli[byte(crc)^byte(v>>shift)] ^ crc>>8
	}
	return ^crc
}

// sum ends the body and returns its sum.
func (s *bodySum) sum() uint32 {
	if s.fill > 0 {
		s.endBlock()
	}
	return s.outer
}

// writeKnown is write for p whose whole blocks have the checksums sums
// (if len(sums) says so and p starts at a block of the body): they are
// taken as they are instead of reading p.
func (s *bodySum) writeKnown(p []byte, sums []uint32) {
	if s.fill != 0 || len(sums) != len(p)/sumBlock {
		s.write(p)
		return
	}
	for _, c := range sums {
		s.cur, s.fill = c, sumBlock
		s.endBlock()
	}
	s.write(p[len(sums)*sumBlock:])
}

// checksum is the body sum of b.
func checksum(b []byte) uint32 {
	var s bodySum
	s.write(b)
	return s.sum()
}

// keepSumsMin is the body size from which the reader keeps the blocks'
// checksums: below proto.AlignMin no payload is aligned to blocks.
const keepSumsMin = proto.AlignMin

// frameError is a violation of the framing rules: the stream can no longer be
// trusted, so the connection is closed with this reason.
type frameError struct{ reason string }

func (e *frameError) Error() string { return "rpc: bad frame: " + e.reason }

// frameReader reads frames from a post-handshake byte stream. It holds no
// socket so it can be fuzzed on plain bytes.
type frameReader struct {
	r        *bufio.Reader
	hdr      [headerLen]byte
	keepSums bool // keep a large body's block checksums (servers use them)
}

// smallBody is the body size up to which a frame is read into a buffer of
// its declared size at once. Frames only flow after the handshake proved the
// cluster key, and cairn's own senders keep payloads at or below 16 MiB, so
// that covers every real frame: growing the buffer as bytes arrive copies
// and zeroes it again at every step, a large cost on 4 MiB writes. Larger bodies
// still grow as bytes arrive, so a header that lies about its length cannot
// make us allocate 65 MiB for nothing.
const smallBody = 17 << 20

// sumPiece is how much of a body is read before it is checksummed.
const sumPiece = 128 << 10

// next returns the next frame. body is owned by the caller (decoded
// messages alias it); a large one comes from bufpool, and the caller may
// hand it back once nothing uses it. For a body of keepSumsMin bytes or
// more, sums holds the crc32c of each of its whole sumBlock-byte blocks. At
// a clean frame boundary it returns io.EOF; a short frame is
// io.ErrUnexpectedEOF; rule violations are *frameError.
func (fr *frameReader) next() (kind byte, id uint64, body []byte, sums []uint32, err error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, 0, nil, nil, err
	}
	h := fr.hdr[:]
	if m := binary.BigEndian.Uint32(h[0:4]); m != frameMagic {
		return 0, 0, nil, nil, &frameError{fmt.Sprintf("magic %#08x, want %#08x", m, frameMagic)}
	}
	kind = h[4]
	if kind != kindRequest && kind != kindReply {
		return 0, 0, nil, nil, &frameError{fmt.Sprintf("unknown kind %d", kind)}
	}
	if h[5]|h[6]|h[7] != 0 {
		return 0, 0, nil, nil, &frameError{"reserved header bytes are not zero"}
	}
	id = binary.BigEndian.Uint64(h[8:16])
	n := binary.BigEndian.Uint32(h[16:20])
	want := binary.BigEndian.Uint32(h[20:24])
	if n > proto.MaxFrameBytes {
		return 0, 0, nil, nil, &frameError{fmt.Sprintf("body length %d exceeds limit %d", n, proto.MaxFrameBytes)}
	}
	var sum bodySum
	if n <= smallBody {
		if n >= bufpool.MinSize {
			body = bufpool.Get(int(n))
		} else {
			body = make([]byte, n)
		}
		if fr.keepSums && n >= keepSumsMin {
			sum.keep = true
			sum.sums = make([]uint32, 0, n/sumBlock+1)
		}
		// Summed piece by piece as it arrives, while each piece is still
		// in the CPU cache: summing 4 MiB afterwards would read it all
		// again from memory.
		for off := 0; off < len(body); off += sumPiece {
			p := body[off:min(off+sumPiece, len(body))]
			if _, err := io.ReadFull(fr.r, p); err != nil {
				bufpool.Put(body)
				return 0, 0, nil, nil, noEOF(err)
			}
			sum.write(p)
		}
	} else {
		body = make([]byte, 0, smallBody)
		for len(body) < int(n) {
			if len(body) == cap(body) {
				grown := make([]byte, len(body), min(2*cap(body), int(n)))
				copy(grown, body)
				body = grown
			}
			m, err := io.ReadFull(fr.r, body[len(body):cap(body)])
			body = body[:len(body)+m]
			if err != nil {
				return 0, 0, nil, nil, noEOF(err)
			}
		}
		sum.write(body)
	}
	if got := sum.sum(); got != want {
		bufpool.Put(body)
		return 0, 0, nil, nil, &frameError{fmt.Sprintf("crc32c body sum %#08x of %d-byte body, header says %#08x", got, n, want)}
	}
	if sum.keep {
		sums = sum.sums[:min(len(sum.sums), int(n/sumBlock))] // whole blocks only
	}
	return kind, id, body, sums, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Frame buffers are pooled: a frame is encoded by its caller (so encoding runs
// in parallel), handed to the connection's writer, copied into its bufio
// buffer and returned here. Small frames share one pool of growing buffers;
// a frame carrying bulk data is encoded into a bufpool buffer sized for it,
// so it is neither allocated nor grown by copying.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// maxPooled keeps the odd large payload from pinning memory in the pool of
// small frames.
const maxPooled = 256 << 10

// frameSlack is room beyond the bulk data for a message's other fields.
const frameSlack = 4 << 10

func getBuf(hint int) *[]byte {
	if hint+frameSlack > maxPooled {
		b := bufpool.Get(hint + frameSlack)[:0]
		return &b
	}
	return bufPool.Get().(*[]byte)
}

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooled {
		*b = (*b)[:0]
		bufPool.Put(b)
		return
	}
	bufpool.Put(*b)
}

// errTooLarge is returned (not a connection error) for a message that would
// exceed proto.MaxFrameBytes.
type errTooLarge int

func (e errTooLarge) Error() string {
	return fmt.Sprintf("rpc: message of %d bytes exceeds frame limit %d", int(e), proto.MaxFrameBytes)
}

// beginFrame returns a pooled buffer holding room for a header; the caller
// appends the encoded message, of which about bulk bytes are data, and
// calls sealFrame.
func beginFrame(bulk int) (*[]byte, []byte) {
	var zero [headerLen]byte
	bp := getBuf(headerLen + bulk)
	return bp, append((*bp)[:0], zero[:]...)
}

// sealFrame fills in the header of b (header room plus body) and stores b in
// bp. A body over proto.MaxFrameBytes is refused and the buffer released.
func sealFrame(bp *[]byte, b []byte, kind byte, id uint64) error {
	*bp = b
	body := b[headerLen:]
	if len(body) > proto.MaxFrameBytes {
		putBuf(bp)
		return errTooLarge(len(body))
	}
	putHeader(b[:headerLen], kind, id, len(body), checksum(body))
	return nil
}

func putHeader(h []byte, kind byte, id uint64, n int, sum uint32) {
	binary.BigEndian.PutUint32(h[0:4], frameMagic)
	h[4] = kind
	h[5], h[6], h[7] = 0, 0, 0
	binary.BigEndian.PutUint64(h[8:16], id)
	binary.BigEndian.PutUint32(h[16:20], uint32(n))
	binary.BigEndian.PutUint32(h[20:24], sum)
}

// Shared is a request encoded and checksummed once for several
// connections: a replicated write sends the same bytes to every replica,
// and copying and checksumming megabytes once per replica was a pass over
// the data each. Each call takes a reference until its frame is written;
// the creator drops its own with Release.
type Shared struct {
	head  []byte   // the encoding up to parts (all of it for Share)
	parts [][]byte // sent from where they lie: ShareParts' Txn, ShareData's Data
	tail  []byte
	// release gives back what parts point into, once no frame needs them.
	release func()
	sum     uint32
	refs    atomic.Int32
}

// Share encodes req for CallShared.
func Share(req *proto.Request) (*Shared, error) {
	var b []byte
	if n := len(req.Data) + len(req.Txn) + frameSlack; n > maxPooled {
		b = bufpool.Get(n)[:0]
	} else {
		// A small write: room for its fixed fields, grown if need be.
		b = make([]byte, 0, len(req.Data)+len(req.Txn)+len(req.Object)+128)
	}
	b = proto.AppendRequest(b, req)
	if len(b) > proto.MaxFrameBytes {
		bufpool.Put(b)
		return nil, errTooLarge(len(b))
	}
	s := &Shared{head: b, sum: checksum(b)}
	s.refs.Store(1)
	return s, nil
}

// Part is a piece of a Shared request's Txn. Sums, if set, are the crc32c
// checksums of its whole blocks, taken when the data arrived: they go
// into the frame's sum as they are, so the data is not read again, and a
// replica checks the bytes against the checksums of their first arrival.
type Part struct {
	Bytes []byte
	Sums  []uint32
}

// ShareParts is Share for a request whose Txn, given as parts (req.Txn is
// not read), is sent from where it lies, not copied. release is called
// once no frame needs the parts any more (after Release, and after every
// call's frame is written or dropped); on error, at once.
func ShareParts(req *proto.Request, parts []Part, release func()) (*Shared, error) {
	n := sharedLen(parts)
	head := proto.AppendRequestHead(make([]byte, 0, headRoom(req, n)), req, n)
	return shareParts(head, parts, proto.AppendRequestTail(nil, req), release)
}

// ShareData is ShareParts for a request whose Data, given as parts
// (req.Data is not read), is sent from where it lies; its Txn is copied.
func ShareData(req *proto.Request, parts []Part, release func()) (*Shared, error) {
	n := sharedLen(parts)
	head := proto.AppendRequestUpToData(make([]byte, 0, headRoom(req, n)), req, n)
	return shareParts(head, parts, proto.AppendRequestAfterData(nil, req, len(head)+n), release)
}

func sharedLen(parts []Part) int {
	n := 0
	for _, p := range parts {
		n += len(p.Bytes)
	}
	return n
}

// headRoom is room enough for the encoding of req's fields before a bulk
// payload of n bytes.
func headRoom(req *proto.Request, n int) int {
	room := len(req.Object) + len(req.Key) + 128
	if n >= proto.AlignMin {
		room += proto.Align // the padding that aligns the payload
	}
	return room
}

// shareParts is the Shared request of head, then parts, then tail.
func shareParts(head []byte, parts []Part, tail []byte, release func()) (*Shared, error) {
	bs := make([][]byte, len(parts))
	for i, p := range parts {
		bs[i] = p.Bytes
	}
	s := &Shared{head: head, parts: bs, tail: tail, release: release}
	if n := s.len(); n > proto.MaxFrameBytes {
		release()
		return nil, errTooLarge(n)
	}
	var sum bodySum
	sum.write(head)
	for _, p := range parts {
		sum.writeKnown(p.Bytes, p.Sums)
	}
	sum.write(s.tail)
	s.sum = sum.sum()
	s.refs.Store(1)
	return s, nil
}

// Release drops the creator's reference: the buffers go back to the pool
// once every frame using them is written. No call may start after Release.
func (s *Shared) Release() { s.unref() }

func (s *Shared) ref() {
	if s.refs.Add(1) <= 1 {
		panic("rpc: Shared request used after its last reference was dropped")
	}
}

func (s *Shared) unref() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		bufpool.Put(s.head)
		if s.release != nil {
			s.release()
		}
	case n < 0:
		panic("rpc: Shared request released more often than referenced")
	}
}

func (s *Shared) len() int {
	n := len(s.head) + len(s.tail)
	for _, p := range s.parts {
		n += len(p)
	}
	return n
}

// outFrame is one frame for a connection's writer, which owns it once
// queued: a whole encoded frame; or the header of a Shared body; or a frame
// whose bulk data is sent from where it lies (data != nil): buf holds the
// header and the encoding before the data up to split, the rest after it.
type outFrame struct {
	buf    *[]byte
	hdr    [headerLen]byte
	shared *Shared
	data   []byte
	split  int
	done   func() // called once the frame is written or dropped
}

func sharedFrame(s *Shared, kind byte, id uint64) outFrame {
	f := outFrame{shared: s}
	putHeader(f.hdr[:], kind, id, s.len(), s.sum)
	return f
}

// release gives back what f holds (its writer is done with it, or it was
// never queued).
func (f outFrame) release() {
	if f.shared != nil {
		f.shared.unref()
	} else {
		putBuf(f.buf)
	}
	if f.done != nil {
		f.done()
	}
}

// size is the number of bytes f is sent as.
func (f *outFrame) size() int {
	switch {
	case f.data != nil:
		return len(*f.buf) + len(f.data)
	case f.shared == nil:
		return len(*f.buf)
	}
	return len(f.hdr) + f.shared.len()
}

// parts appends the byte slices f is sent as, in order. Those of a Shared
// body's header point into f.
func (f *outFrame) parts(dst [][]byte) [][]byte {
	switch {
	case f.data != nil:
		b := *f.buf
		return append(dst, b[:f.split], f.data, b[f.split:])
	case f.shared == nil:
		return append(dst, *f.buf)
	}
	dst = append(dst, f.hdr[:], f.shared.head)
	dst = append(dst, f.shared.parts...)
	return append(dst, f.shared.tail)
}

func (f outFrame) writeTo(w *bufio.Writer) error {
	var a [8][]byte
	for _, p := range f.parts(a[:0]) {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// writeLoop is a connection's writer. It takes every frame that has
// queued up, copies them into one bufio buffer and flushes when the queue is
// empty, so a burst of pipelined calls costs one write syscall rather than
// one each. With in, callers may also write their frames themselves while
// it waits (inline.go); it then writes under in.mu, first what an inline
// write left. It returns on done or on the first write error.
func writeLoop(w io.Writer, q <-chan outFrame, done <-chan struct{}, in *inlineWriter) error {
	defer in.close()
	bw := bufio.NewWriterSize(w, 64<<10)
	var kick chan struct{}
	if in != nil {
		kick = in.kick
	}
	for {
		var f outFrame
		have := true
		select {
		case f = <-q:
		case <-kick:
			have = false
		case <-done:
			return nil
		}
		if in != nil {
			in.mu.Lock()
		}
		err := in.flushRest(bw)
		if err == nil && have {
			err = writeBatch(bw, q, f)
		}
		if err == nil {
			err = bw.Flush()
		}
		if in != nil {
			in.mu.Unlock()
		}
		if err != nil {
			return err
		}
	}
}

// writeBatch copies f and every frame queued behind it into bw.
func writeBatch(bw *bufio.Writer, q <-chan outFrame, f outFrame) error {
	yielded := false
	for more := true; more; {
		err := f.writeTo(bw)
		f.release()
		if err != nil {
			return err
		}
		select {
		case f = <-q:
		default:
			more = false
			if !yielded {
				// Let goroutines that are about to queue a frame (a
				// handler finishing, a caller encoding) do so, so
				// their frames share this flush.
				yielded = true
				runtime.Gosched()
				select {
				case f = <-q:
					more = true
				default:
				}
			}
		}
	}
	return nil
}
