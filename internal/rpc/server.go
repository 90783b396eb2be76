package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Handler serves requests. Serve is called concurrently, up to
// ServerOptions.MaxInFlightPerConn at once per connection. ctx ends when the
// connection breaks or the server closes. The request's byte slices are the
// handler's only until Serve returns: they point into a frame buffer that is
// reused then, so a handler copies what it keeps (and no goroutine it starts
// may read them later). The returned response, and the bytes its Data
// points to, must not be modified afterwards: a large Data is written from
// where it lies. Its pooled buffer, if any, is released once it is sent.
// A nil response is sent as StatusIOError.
type Handler interface {
	Serve(ctx context.Context, req *proto.Request) *proto.Response
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *proto.Request) *proto.Response

// Serve calls f.
func (f HandlerFunc) Serve(ctx context.Context, req *proto.Request) *proto.Response {
	return f(ctx, req)
}

// ServerOptions tune a Server; zero values take the defaults.
type ServerOptions struct {
	// MaxInFlightPerConn bounds the requests of one connection being served
	// at once (default 128). When it is reached the connection's reader
	// stops reading, so a fast client is slowed by TCP back-pressure rather
	// than by spawning goroutines without bound.
	MaxInFlightPerConn int
	// Logf receives refusals and the reason each connection was closed
	// (default log.Printf).
	Logf func(format string, args ...any)
	// HandshakeTimeout bounds a new connection's handshake (default
	// HandshakeTimeout).
	HandshakeTimeout time.Duration
	// Encrypt: admit only TLS connections, the handshake bound to them
	// (tls.go).
	Encrypt bool
}

// Server accepts authenticated connections and hands their requests to a
// Handler.
type Server struct {
	key    []byte
	h      Handler
	opts   ServerOptions
	ctx    context.Context // ends on Close; parent of every handler's ctx
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	tls    *tls.Config    // set by Serve when encrypting; read by connections it accepted
	wg     sync.WaitGroup // connection goroutines, each waiting for its handlers
}

// NewServer returns a server that admits only peers holding key.
func NewServer(key []byte, h Handler, opts ServerOptions) *Server {
	if opts.MaxInFlightPerConn <= 0 {
		opts.MaxInFlightPerConn = 128
	}
	if opts.Logf == nil {
		opts.Logf = log.Printf
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = HandshakeTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		key:    append([]byte(nil), key...),
		h:      h,
		opts:   opts,
		ctx:    ctx,
		cancel: cancel,
		lns:    make(map[net.Listener]struct{}),
		conns:  make(map[net.Conn]struct{}),
	}
}

// Serve accepts connections on ln until ln is closed. It returns nil if the
// server was closed, else the error that ended accepting.
func (s *Server) Serve(ln net.Listener) error {
	if len(s.key) == 0 {
		ln.Close()
		return errors.New("rpc: server has an empty cluster key")
	}
	if s.opts.Encrypt && s.tls == nil {
		cfg, err := serverTLS()
		if err != nil {
			ln.Close()
			return err
		}
		s.tls = cfg
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: wait, do not spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.opts.Logf("rpc: accept on %s: %v; retrying in %v", ln.Addr(), err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc)
	}
}

// Close stops accepting, closes every connection, and waits for all running
// handlers (whose ctx it cancels) to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	lns := make([]net.Listener, 0, len(s.lns))
	for ln := range s.lns {
		lns = append(lns, ln)
	}
	conns := make([]net.Conn, 0, len(s.conns))
	for nc := range s.conns {
		conns = append(conns, nc)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	// Sockets first, then handlers' ctx: a handler that returns because
	// of the cancellation must not have its answer sent as if it had
	// completed.
	for _, nc := range conns {
		nc.Close()
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(tcp net.Conn) {
	defer s.wg.Done()
	defer func() {
		tcp.Close()
		s.mu.Lock()
		delete(s.conns, tcp)
		s.mu.Unlock()
	}()
	peer := peerName(tcp)
	nc := tcp // the TLS connection over it, when encrypted
	nc.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	var bind []byte
	if s.tls != nil {
		tc, b, err := serverEncrypt(tcp, s.tls)
		if err != nil {
			s.logRefused(peer, err)
			return
		}
		nc, bind = tc, b
	}
	if err := serverHandshake(nc, s.key, bind); err != nil {
		s.logRefused(peer, err)
		return
	}
	nc.SetDeadline(time.Time{})
	err := s.serveStream(nc, nc, func() { nc.Close() })
	if err != nil && s.ctx.Err() == nil {
		s.opts.Logf("rpc: closed connection from %s: %v", peer, err)
	}
}

// peerName names the far end of a connection for the log: its TCP
// address, or "a local process" on the local socket (local.go), whose
// peers have no names.
func peerName(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil && a.Network() == "tcp" {
		return a.String()
	}
	return "a local process"
}

// logRefused logs a connection refused during its handshake, unless the
// server is stopping or the peer closed it before sending a byte: a port
// probe (a load balancer's, or an OSD's check that a peer it suspects is
// gone), not a client.
func (s *Server) logRefused(peer string, err error) {
	if s.ctx.Err() == nil && !errors.Is(err, io.EOF) {
		s.opts.Logf("rpc: refused connection from %s: %v", peer, err)
	}
}

// serverConn is the state of one connection after its handshake.
type serverConn struct {
	s       *Server
	sendq   chan outFrame
	in      *inlineWriter // handlers' own replies when the writer is idle
	busy    atomic.Int32  // requests read and not yet answered
	closeFn func()
	done    chan struct{} // closed when the connection is finished
	work    chan job      // unbuffered: a send succeeds only if a worker is idle
	workers int           // started so far; only the reader touches it
	hwg     sync.WaitGroup
}

type job struct {
	id   uint64
	body []byte
	sums []uint32 // of body's blocks (frameReader.next)
}

// serveStream serves the frames of one authenticated connection, read from r
// and answered on w, until r fails or a frame breaks the rules. closeFn must
// make r fail (closing the socket); it is called when writing fails. It
// returns why the stream ended, or nil at a clean end. It takes plain
// streams so tests can drive it without sockets.
func (s *Server) serveStream(r io.Reader, w io.Writer, closeFn func()) error {
	ctx, cancel := context.WithCancel(s.ctx)
	sc := &serverConn{
		s:       s,
		sendq:   make(chan outFrame, s.opts.MaxInFlightPerConn),
		in:      newInlineWriter(w),
		closeFn: closeFn,
		done:    make(chan struct{}),
		work:    make(chan job),
	}
	var werr error
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		if werr = writeLoop(w, sc.sendq, sc.done, sc.in); werr != nil {
			closeFn()
		}
	}()

	fr := frameReader{r: bufio.NewReaderSize(r, 64<<10), keepSums: true}
	var rerr error
read:
	for {
		kind, id, body, sums, err := fr.next()
		if err != nil {
			rerr = err
			break
		}
		if kind != kindRequest {
			rerr = &frameError{"client sent a response frame"}
			break
		}
		// Each request runs concurrently with the others, on one of at
		// most MaxInFlightPerConn goroutines. They are kept for the
		// connection's life rather than started per request: a started
		// goroutine would grow its stack again for every request. When
		// all are busy the reader waits, and TCP pushes back on the
		// client.
		sc.busy.Add(1)
		j := job{id, body, sums}
		select {
		case sc.work <- j:
		default:
			if sc.workers < s.opts.MaxInFlightPerConn {
				sc.workers++
				sc.hwg.Add(1)
				go sc.worker(ctx, j)
				continue
			}
			select {
			case sc.work <- j:
			case <-writerDone:
				break read
			}
		}
	}

	// The peer is gone or misbehaved: nobody will read further responses.
	cancel()
	close(sc.done)
	sc.hwg.Wait()
	<-writerDone
	closeFn()
	switch {
	case werr != nil:
		return fmt.Errorf("write: %w", werr)
	case rerr == io.EOF:
		return nil
	default:
		return rerr
	}
}

func (sc *serverConn) worker(ctx context.Context, j job) {
	defer sc.hwg.Done()
	for {
		sc.handle(ctx, j.id, j.body, j.sums)
		select {
		case j = <-sc.work:
		case <-sc.done:
			return
		}
	}
}

// sendInPlaceMin is the Data size from which a reply is sent from where its
// data lies rather than copied into the frame: the copy would touch every
// byte of a large read once more.
const sendInPlaceMin = 64 << 10

// inPlaceReply frames resp without copying its Data. The request body, which
// Data may point into, and resp's pooled buffer go back once the frame is
// written (the body unless the handler kept it: it is then the handler's).
func inPlaceReply(id uint64, resp *proto.Response, body []byte) (outFrame, error) {
	bp, b := beginFrame(0)
	b = proto.AppendResponseHead(b, resp)
	split := len(b)
	b = proto.AppendResponseTail(b, resp)
	n := len(b) - headerLen + len(resp.Data)
	if n > proto.MaxFrameBytes {
		putBuf(bp)
		return outFrame{}, errTooLarge(n)
	}
	var sum bodySum
	sum.write(b[headerLen:split])
	sum.writeKnown(resp.Data, resp.DataSums)
	sum.write(b[split:])
	putHeader(b[:headerLen], kindReply, id, n, sum.sum())
	*bp = b
	return outFrame{buf: bp, data: resp.Data, split: split, done: func() {
		resp.Release()
		if body != nil {
			bufpool.Put(body)
		}
	}}, nil
}

// blockSums returns the checksums of field's whole blocks, if field lies in
// body at a block boundary and sums (of body's whole blocks) cover it.
func blockSums(body []byte, sums []uint32, field []byte) []uint32 {
	if len(field) < sumBlock || len(sums) == 0 {
		return nil
	}
	off := int(uintptr(unsafe.Pointer(&field[0])) - uintptr(unsafe.Pointer(&body[0])))
	if off < 0 || off+len(field) > len(body) || off%sumBlock != 0 {
		return nil
	}
	first, last := off/sumBlock, (off+len(field))/sumBlock
	if last > len(sums) {
		return nil
	}
	return sums[first:last:last]
}

func (sc *serverConn) handle(ctx context.Context, id uint64, body []byte, sums []uint32) {
	var resp *proto.Response
	if req, err := proto.DecodeRequest(body); err != nil {
		// The frame was intact, so the stream is in step: answer this
		// request and keep the connection.
		resp = &proto.Response{Status: proto.StatusInvalid, Message: err.Error()}
	} else {
		req.DataSums = blockSums(body, sums, req.Data)
		req.TxnSums = blockSums(body, sums, req.Txn)
		req.Frame = body
		if resp = sc.s.h.Serve(ctx, req); resp == nil {
			resp = &proto.Response{Status: proto.StatusIOError, Message: "rpc: handler returned no response"}
		}
		if req.Kept {
			body = nil // the handler's now
		}
	}
	if len(resp.Data) >= sendInPlaceMin {
		if f, err := inPlaceReply(id, resp, body); err == nil {
			sc.reply(f)
			return
		}
	}
	bp, b := beginFrame(len(resp.Data))
	b = proto.AppendResponse(b, resp)
	// The response is copied into its frame, and the handler is done with
	// the request (see Handler): both buffers can go back to the pool.
	resp.Release()
	if body != nil {
		bufpool.Put(body)
	}
	if err := sealFrame(bp, b, kindReply, id); err != nil {
		sc.s.opts.Logf("rpc: response to request %d: %v", id, err)
		bp, b = beginFrame(0)
		b = proto.AppendResponse(b, &proto.Response{Status: proto.StatusIOError, Message: err.Error()})
		sealFrame(bp, b, kindReply, id)
	}
	sc.reply(outFrame{buf: bp})
}

// reply sends a response frame. The handler's goroutine writes it itself
// when it answers the only request in flight and the socket is idle
// (inline.go): one wake-up less at one request in flight. Otherwise the
// writer sends it, with the replies of the other requests in one write
// (every handler writing its own reply measured slower under load).
func (sc *serverConn) reply(f outFrame) {
	last := sc.busy.Add(-1) == 0
	if last && len(sc.sendq) == 0 {
		if took, err := sc.in.send(f); took {
			if err != nil {
				sc.closeFn()
			}
			return
		}
	}
	select {
	case sc.sendq <- f:
	case <-sc.done:
		f.release()
	}
}
