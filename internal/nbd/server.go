package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Chunk is a piece of a read: data, or a hole of Hole bytes that reads as
// zeros (never written, so it costs nothing to send).
type Chunk struct {
	Data []byte
	Hole uint32
	// Release, when not nil, is called once Data has been sent: the
	// device may then reuse its buffer.
	Release func()
}

func (c Chunk) len() uint32 {
	if c.Data != nil {
		return uint32(len(c.Data))
	}
	return c.Hole
}

// Device is one exported block device. Every method may be called
// concurrently. A write returns only when it is durable.
type Device interface {
	Size() uint64
	ReadOnly() bool
	// Read returns length bytes at off as data and holes, in order.
	Read(ctx context.Context, off uint64, length uint32) ([]Chunk, error)
	// Write must not keep data after it returns: the buffer is reused.
	Write(ctx context.Context, off uint64, data []byte) error
	// Zero makes the range read as zeros; punch allows freeing the space.
	Zero(ctx context.Context, off uint64, length uint32, punch bool) error
	// Trim says the range is no longer needed (it may then read as anything).
	Trim(ctx context.Context, off uint64, length uint32) error
	Flush(ctx context.Context) error
	Close() error
}

// Extent is one run of a device's allocation map.
type Extent struct {
	Length uint32
	Hole   bool // never written: reads as zeros, costs nothing
}

// Mapper is implemented by devices that know which ranges are allocated;
// they then answer NBD_CMD_BLOCK_STATUS for the base:allocation context,
// which lets clients (qemu-img, nbdcopy) skip holes.
type Mapper interface {
	// Extents describes [off, off+length) from off on; it may stop short.
	Extents(ctx context.Context, off uint64, length uint32) ([]Extent, error)
}

// Exports resolves export names to devices.
type Exports interface {
	Open(ctx context.Context, name string) (Device, error)
	List(ctx context.Context) ([]string, error)
}

// ErrUnknownExport is returned by Exports.Open for a name that does not exist.
var ErrUnknownExport = errors.New("no such export")

// ErrNoSpace from a Device is sent to the client as ENOSPC.
var ErrNoSpace = errors.New("no space left")

// Defaults of the Server's bounds.
const (
	// DefaultHandshakeTimeout is ample for a client on a slow link (a
	// handshake is a few round trips, and opening a volume a few more).
	DefaultHandshakeTimeout = 30 * time.Second
	// DefaultMaxConns: each connection in transmission keeps its workers
	// (MaxInFlight) and 128 KiB of buffers.
	DefaultMaxConns = 256
)

// Server serves NBD connections.
type Server struct {
	Exports Exports
	// Logf reports connection-level events (nil: silent).
	Logf func(string, ...any)
	// MaxInFlight bounds the requests one connection runs at once (0: 64).
	MaxInFlight int
	// HandshakeTimeout closes a connection that has not finished its
	// handshake (chosen an export) within it (0: DefaultHandshakeTimeout).
	// A connection past its handshake may stay idle for ever.
	HandshakeTimeout time.Duration
	// MaxConns bounds the connections served at once (0:
	// DefaultMaxConns); a connection over it is closed at once, before the
	// greeting, and logged.
	MaxConns int
	// TLS, if set, is required: a client must upgrade the connection with
	// NBD_OPT_STARTTLS before any other option (the spec's forced TLS
	// mode), so no export name or data ever crosses in the clear.
	TLS *tls.Config
	// Load, if set, is told when each request is read (Begin) and when
	// its reply is queued (End): the gateway sizes its runtime to it.
	Load interface {
		Begin()
		End()
	}

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	refused refusals
}

// refusals keeps the log of refused connections to one line per
// refusalLogEvery, however fast they come.
type refusals struct {
	last   time.Time
	unsaid int // refused since the last line
}

const refusalLogEvery = 10 * time.Second

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.ln = ln
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		if !s.admit(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.serveConn(c); err != nil && !errors.Is(err, io.EOF) {
				s.logf("nbd: %s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// admit registers a new connection, unless MaxConns are open: then it
// logs the refusal (at most once per refusalLogEvery) and says no.
func (s *Server) admit(c net.Conn) bool {
	limit := s.MaxConns
	if limit <= 0 {
		limit = DefaultMaxConns
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) < limit {
		s.conns[c] = struct{}{}
		return true
	}
	r := &s.refused
	r.unsaid++
	if now := time.Now(); now.Sub(r.last) >= refusalLogEvery {
		s.logf("nbd: refusing connection from %s: all %d connections this server takes are open (%d refused since the last such line); raise the limit with cairn nbd --max-connections",
			c.RemoteAddr(), len(s.conns), r.unsaid)
		r.last, r.unsaid = now, 0
	}
	return false
}

// Close stops accepting, closes every connection and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// conn is one client connection.
type conn struct {
	s          *Server
	c          net.Conn
	r          *bufio.Reader
	wmu        sync.Mutex // one reply at a time
	w          *bufio.Writer
	structured bool
	dev        Device
	name       string
	flushReq   chan struct{} // transmission: replies are waiting in w
	busy       atomic.Int32  // transmission: requests read and not yet answered
	allocation bool          // base:allocation was selected
	tls        bool          // the connection was upgraded by NBD_OPT_STARTTLS
}

func (s *Server) serveConn(nc net.Conn) error {
	timeout := s.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	nc.SetDeadline(time.Now().Add(timeout))
	c := &conn{s: s, c: nc, r: bufio.NewReaderSize(nc, 64<<10), w: bufio.NewWriterSize(nc, 64<<10)}
	err := c.handshake()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("no export chosen within the handshake timeout (%v): closing the connection", timeout)
	}
	if err != nil || c.dev == nil {
		return err
	}
	defer c.dev.Close()
	// Past the handshake a client may be idle as long as it likes.
	if err := c.c.SetDeadline(time.Time{}); err != nil {
		return err
	}
	return c.transmit(context.Background())
}
