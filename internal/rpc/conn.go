package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Conn is the client side of one authenticated connection to a daemon, over
// TCP or the daemon's local socket (local.go).
// Any number of goroutines may Call at once: requests are pipelined on the
// one connection and responses are matched by request id in any order.
type Conn struct {
	addr  string
	nc    net.Conn
	local bool          // over the local socket
	sendq chan outFrame // encoded frames for the writer
	in    *inlineWriter // callers' own writes when the writer is idle
	done  chan struct{} // closed when the connection is broken or closed
	wg    sync.WaitGroup
	ids   atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call // nil once broken
	err     error            // why the connection is broken; set once
}

type call struct {
	ch chan result // buffered 1: the reader never blocks on a slow caller
}

type result struct {
	resp *proto.Response
	err  error
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan result, 1)} }}

// Dial connects to addr ("host:port", IPv6 as "[::1]:6800") and
// authenticates with the cluster key. ctx bounds the connect and the
// handshake (at most HandshakeTimeout), not the connection's life. An error
// from a peer without this cluster's key matches ErrAuth.
func Dial(ctx context.Context, addr string, key []byte) (*Conn, error) {
	return DialWith(ctx, addr, key, DialOptions{})
}

// DialOptions say how a client connects.
type DialOptions struct {
	// Encrypt: TLS first, the handshake bound to it (tls.go). Every
	// daemon and client of a cluster must agree.
	Encrypt bool
	// Local: try the daemon's local socket (local.go) before TCP.
	Local bool
}

// DialWith is Dial with options.
func DialWith(ctx context.Context, addr string, key []byte, o DialOptions) (*Conn, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("rpc: dial %s: empty cluster key", addr)
	}
	if o.Local {
		if nc, err := dialLocal(ctx, addr); err == nil {
			c, err := open(ctx, nc, addr, key, o)
			if err == nil || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
				return c, err
			}
			// Refused: whatever holds the name is not this cluster's
			// daemon; the address itself may still be.
		}
	}
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	return open(ctx, tcp, addr, key, o)
}

// open runs the handshake on a fresh socket nc (TLS first when o.Encrypt)
// and starts the connection; it closes nc on failure.
func open(ctx context.Context, nc net.Conn, addr string, key []byte, o DialOptions) (*Conn, error) {
	sock := nc
	_, local := nc.(*net.UnixConn)
	deadline := time.Now().Add(HandshakeTimeout)
	ctxDeadline := false
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline, ctxDeadline = dl, true
	}
	sock.SetDeadline(deadline)
	// A cancelled ctx interrupts the handshake's blocking reads at once.
	stop := context.AfterFunc(ctx, func() { sock.SetDeadline(time.Unix(1, 0)) })
	var bind []byte
	var err error
	if o.Encrypt {
		var tc *tls.Conn
		if tc, bind, err = clientEncrypt(ctx, sock); err == nil {
			nc = tc
		}
	}
	if err == nil {
		err = clientHandshake(nc, key, bind)
	}
	stopped := stop()
	if !stopped || err != nil && (ctx.Err() != nil || ctxDeadline && isTimeout(err)) {
		// ctx ended (the socket deadline may fire a moment before ctx
		// reports it); a handshake that finished anyway is discarded, as
		// the AfterFunc may still be resetting the deadline.
		sock.Close()
		cerr := ctx.Err()
		if cerr == nil {
			cerr = context.DeadlineExceeded
		}
		return nil, fmt.Errorf("rpc: dial %s: handshake: %w", addr, cerr)
	}
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("rpc: dial %s: %w", addr, err)
	}
	nc.SetDeadline(time.Time{})
	c := &Conn{
		addr:    addr,
		nc:      nc,
		local:   local,
		sendq:   make(chan outFrame, 256),
		in:      newInlineWriter(nc),
		done:    make(chan struct{}),
		pending: make(map[uint64]*call),
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Local reports whether the connection runs over the daemon's local
// socket (local.go) rather than TCP.
func (c *Conn) Local() bool { return c.local }

// Addr returns the address the connection was dialed to.
func (c *Conn) Addr() string { return c.addr }

// Err returns nil while the connection is usable and, once it is broken or
// closed, an error matching ErrClosed that says why. Callers redial then.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection; pending Calls fail with ErrClosed. It waits
// for the connection's goroutines to exit.
func (c *Conn) Close() error {
	c.fail(fmt.Errorf("%w: %s: closed by this client", ErrClosed, c.addr))
	c.wg.Wait()
	return nil
}

// Call sends req and waits for its response. A transport failure matches
// ErrClosed and breaks the connection for every caller; a cancelled ctx
// returns ctx.Err() for this call only (its late response is dropped). A
// non-OK Status is a normal response, not an error. req may be reused once
// Call returns; its bytes have been copied by then.
func (c *Conn) Call(ctx context.Context, req *proto.Request) (*proto.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id := c.ids.Add(1)
	bp, b := beginFrame(len(req.Data) + len(req.Txn))
	b = proto.AppendRequest(b, req)
	if err := sealFrame(bp, b, kindRequest, id); err != nil {
		return nil, err
	}
	return c.roundTrip(ctx, id, outFrame{buf: bp})
}

// CallShared is Call for a request encoded once with Share, to be sent on
// several connections.
func (c *Conn) CallShared(ctx context.Context, s *Shared) (*proto.Response, error) {
	p := c.StartShared(ctx, s)
	return p.Wait(ctx)
}

// Pending is a call whose request is sent, or queued to be; Wait returns
// its response.
type Pending struct {
	c   *Conn
	id  uint64
	cl  *call
	err error
}

// StartShared sends the request s without waiting for its response, so a
// caller can send to several connections from one goroutine before it does
// other work. Every Pending must be waited for.
func (c *Conn) StartShared(ctx context.Context, s *Shared) Pending {
	if err := ctx.Err(); err != nil {
		return Pending{err: err}
	}
	s.ref()
	id := c.ids.Add(1)
	cl, err := c.start(ctx, id, sharedFrame(s, kindRequest, id))
	return Pending{c: c, id: id, cl: cl, err: err}
}

// Wait returns the response of a started call, as Call would.
func (p Pending) Wait(ctx context.Context) (*proto.Response, error) {
	if p.err != nil {
		return nil, p.err
	}
	return p.c.wait(ctx, p.id, p.cl)
}

// roundTrip sends f, request id, and waits for the response.
func (c *Conn) roundTrip(ctx context.Context, id uint64, f outFrame) (*proto.Response, error) {
	cl, err := c.start(ctx, id, f)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, id, cl)
}

// start registers request id and sends f: written by this goroutine when
// it is the only call in flight and the socket is idle (inline.go), else
// handed to the writer, which sends it with the frames of calls started
// meanwhile. f is released either way.
func (c *Conn) start(ctx context.Context, id uint64, f outFrame) (*call, error) {
	cl := callPool.Get().(*call)
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		callPool.Put(cl)
		f.release()
		return nil, err
	}
	c.pending[id] = cl
	alone := len(c.pending) == 1
	c.mu.Unlock()

	if alone && len(c.sendq) == 0 {
		if took, err := c.in.send(f); took {
			if err != nil {
				// Every pending call, this one too, is answered with it.
				c.fail(fmt.Errorf("%w: %s: %w", ErrClosed, c.addr, err))
			}
			return cl, nil
		}
	}
	select {
	case c.sendq <- f:
	case <-c.done:
		// fail has answered (or will answer) every pending call; take it.
		f.release()
	case <-ctx.Done():
		f.release()
		return nil, c.abandon(id, cl, ctx.Err())
	}
	return cl, nil
}

// wait returns the response to request id.
func (c *Conn) wait(ctx context.Context, id uint64, cl *call) (*proto.Response, error) {
	select {
	case r := <-cl.ch:
		callPool.Put(cl)
		return r.resp, r.err
	case <-ctx.Done():
		return nil, c.abandon(id, cl, ctx.Err())
	}
}

// abandon forgets a cancelled call. If the reader or fail already took it
// out of the table, a result is in flight to cl.ch and cl must not be reused.
func (c *Conn) abandon(id uint64, cl *call, err error) error {
	c.mu.Lock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		callPool.Put(cl)
	}
	return err
}

// fail breaks the connection once: it records why, wakes the writer, closes
// the socket (which ends the reader) and answers every pending call.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	close(c.done)
	c.nc.Close()
	for _, cl := range pending {
		cl.ch <- result{err: err}
	}
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	fr := frameReader{r: bufio.NewReaderSize(c.nc, 64<<10), keepSums: true}
	for {
		kind, id, body, sums, err := fr.next()
		if err != nil {
			c.fail(fmt.Errorf("%w: %s: %w", ErrClosed, c.addr, err))
			return
		}
		if kind != kindReply {
			c.fail(fmt.Errorf("%w: %s: server sent a request frame", ErrClosed, c.addr))
			return
		}
		c.mu.Lock()
		cl := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if cl == nil {
			continue // its caller gave up
		}
		resp, err := proto.DecodeResponse(body)
		if err != nil {
			// The frame was intact, so only this response is bad; the
			// stream itself is still in step.
			err = fmt.Errorf("rpc: %s: %w", c.addr, err)
			bufpool.Put(body)
		} else {
			resp.DataSums = blockSums(body, sums, resp.Data)
			if len(body) >= bufpool.MinSize {
				resp.Pooled = body // the caller may Release it
			}
		}
		cl.ch <- result{resp: resp, err: err}
	}
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	if err := writeLoop(c.nc, c.sendq, c.done, c.in); err != nil {
		c.fail(fmt.Errorf("%w: %s: %w", ErrClosed, c.addr, err))
	}
}
