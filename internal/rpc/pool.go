package rpc

import (
	"context"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/proto"
)

// DialTimeout bounds connection setup (TCP + handshake) in a Pool.
const DialTimeout = 3 * time.Second

// Pool keeps one persistent connection per address and redials a broken
// one on the next call. Clients and OSDs share this: every request to a peer
// is pipelined on that one connection.
type Pool struct {
	key  []byte
	dial DialOptions

	mu     sync.Mutex
	conns  map[string]*poolEntry
	closed bool
}

type poolEntry struct {
	ready chan struct{} // closed when the dial finished; then the fields are fixed
	conn  *Conn
	err   error
	at    time.Time
}

func (e *poolEntry) done() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// NewPool returns an empty pool whose connections authenticate with key.
func NewPool(key []byte) *Pool {
	return NewPoolWith(key, DialOptions{})
}

// NewPoolWith returns an empty pool whose connections dial with o.
func NewPoolWith(key []byte, o DialOptions) *Pool {
	return &Pool{key: key, dial: o, conns: map[string]*poolEntry{}}
}

// get returns a live connection to addr, dialling at most once at a time
// per address; a failed dial is remembered for a short while so that a dead
// peer does not cost a dial per request.
func (p *Pool) get(ctx context.Context, addr string) (*Conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	e := p.conns[addr]
	if e != nil && e.done() {
		if e.conn != nil && e.conn.Err() != nil || e.err != nil && time.Since(e.at) > 200*time.Millisecond {
			if e.conn != nil {
				e.conn.Close()
			}
			e = nil
		}
	}
	dial := e == nil
	if dial {
		e = &poolEntry{ready: make(chan struct{})}
		p.conns[addr] = e
	}
	p.mu.Unlock()
	if dial {
		dctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
		e.conn, e.err = DialWith(dctx, addr, p.key, p.dial)
		cancel()
		e.at = time.Now()
		close(e.ready)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.conn, e.err
}

// Call sends req to addr on the pooled connection.
func (p *Pool) Call(ctx context.Context, addr string, req *proto.Request) (*proto.Response, error) {
	c, err := p.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, req)
}

// CallShared is Call for a request encoded once with Share.
func (p *Pool) CallShared(ctx context.Context, addr string, sh *Shared) (*proto.Response, error) {
	c, err := p.get(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c.CallShared(ctx, sh)
}

// StartShared is Conn.StartShared on the pooled connection to addr.
func (p *Pool) StartShared(ctx context.Context, addr string, sh *Shared) Pending {
	c, err := p.get(ctx, addr)
	if err != nil {
		return Pending{err: err}
	}
	return c.StartShared(ctx, sh)
}

// Drop closes the connection to addr, if any: every call pending on it
// fails at once with an error matching ErrClosed, and the next call dials
// again. For a peer that stopped answering without closing its socket (a
// frozen process), which only the caller's knowledge (a new cluster map
// that marks it down) can tell from a slow one.
func (p *Pool) Drop(addr string) {
	p.mu.Lock()
	e := p.conns[addr]
	if e != nil && e.done() {
		delete(p.conns, addr)
	}
	p.mu.Unlock()
	if e != nil && e.done() && e.conn != nil {
		e.conn.Close()
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, e := range p.conns {
		if e.done() && e.conn != nil {
			e.conn.Close()
		}
	}
	p.conns = map[string]*poolEntry{}
}
