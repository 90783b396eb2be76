package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
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

// handshake runs the greeting and the option haggling; c.dev is set if
// the client chose an export.
func (c *conn) handshake() error {
	var b []byte
	b = binary.BigEndian.AppendUint64(b, magicInit)
	b = binary.BigEndian.AppendUint64(b, magicOpt)
	b = binary.BigEndian.AppendUint16(b, flagFixedNewstyle|flagNoZeroes)
	if err := c.send(b); err != nil {
		return err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.r, cf[:]); err != nil {
		return err
	}
	cflags := binary.BigEndian.Uint32(cf[:])
	if cflags&^(flagFixedNewstyle|flagNoZeroes) != 0 {
		return fmt.Errorf("%w: unknown client flags %#x", errMalformed, cflags)
	}
	noZeroes := cflags&flagNoZeroes != 0
	ctx := context.Background()
	for c.dev == nil {
		o, err := readOption(c.r)
		if err != nil {
			return err
		}
		if c.s.TLS != nil && !c.tls {
			switch o.code {
			case optStartTLS:
				if err := c.startTLS(o); err != nil {
					return err
				}
				continue
			case optAbort:
			case optExportName:
				return fmt.Errorf("NBD_OPT_EXPORT_NAME before TLS: this server requires TLS")
			default:
				if err := c.replyErr(o.code, repErrTLSReqd, "this server requires TLS: send NBD_OPT_STARTTLS first"); err != nil {
					return err
				}
				continue
			}
		}
		done, err := c.option(ctx, o, noZeroes)
		if err != nil || done {
			return err
		}
	}
	return nil
}

func (c *conn) send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(b); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *conn) reply(opt, typ uint32, data []byte) error {
	return c.send(appendOptReply(nil, opt, typ, data))
}

func (c *conn) replyErr(opt, typ uint32, format string, args ...any) error {
	return c.reply(opt, typ, []byte(fmt.Sprintf(format, args...)))
}

// transmissionFlags says what dev supports. Multi-conn is safe: a write is
// durable when answered and nothing is cached here, so every connection
// sees every answered write.
func transmissionFlags(dev Device) uint16 {
	f := uint16(tflagHasFlags | tflagFlush | tflagFUA | tflagTrim | tflagWriteZeroes | tflagCanMultiConn)
	if dev.ReadOnly() {
		f |= tflagReadOnly
	}
	return f
}

// option handles one option; done means the connection ends (abort).
func (c *conn) option(ctx context.Context, o option, noZeroes bool) (done bool, err error) {
	switch o.code {
	case optExportName:
		// No way to report an error: the connection just closes.
		dev, err := c.s.Exports.Open(ctx, string(o.data))
		if err != nil {
			return true, fmt.Errorf("export %q: %v", o.data, err)
		}
		c.dev, c.name = dev, string(o.data)
		var b []byte
		b = binary.BigEndian.AppendUint64(b, dev.Size())
		b = binary.BigEndian.AppendUint16(b, transmissionFlags(dev))
		if !noZeroes {
			b = append(b, make([]byte, 124)...)
		}
		return false, c.send(b)
	case optAbort:
		c.reply(o.code, repAck, nil)
		return true, nil
	case optList:
		if len(o.data) != 0 {
			return false, c.replyErr(o.code, repErrInvalid, "NBD_OPT_LIST takes no data")
		}
		names, err := c.s.Exports.List(ctx)
		if err != nil {
			return false, c.replyErr(o.code, repErrPolicy, "listing exports: %v", err)
		}
		for _, n := range names {
			d := binary.BigEndian.AppendUint32(nil, uint32(len(n)))
			if err := c.reply(o.code, repServer, append(d, n...)); err != nil {
				return false, err
			}
		}
		return false, c.reply(o.code, repAck, nil)
	case optInfo, optGo:
		req, err := decodeInfoRequest(o.data)
		if err != nil {
			return false, c.replyErr(o.code, repErrInvalid, "%v", err)
		}
		dev, err := c.open(ctx, o.code, req.name)
		if dev == nil {
			return false, err
		}
		keep := false
		defer func() {
			if !keep {
				dev.Close()
			}
		}()
		info := binary.BigEndian.AppendUint16(nil, infoExport)
		info = binary.BigEndian.AppendUint64(info, dev.Size())
		info = binary.BigEndian.AppendUint16(info, transmissionFlags(dev))
		if err := c.reply(o.code, repInfo, info); err != nil {
			return false, err
		}
		bs := binary.BigEndian.AppendUint16(nil, infoBlockSize)
		bs = binary.BigEndian.AppendUint32(bs, 1)
		bs = binary.BigEndian.AppendUint32(bs, PreferredBlock)
		bs = binary.BigEndian.AppendUint32(bs, MaxPayload)
		if err := c.reply(o.code, repInfo, bs); err != nil {
			return false, err
		}
		for _, t := range req.infos {
			if t == infoName {
				d := binary.BigEndian.AppendUint16(nil, infoName)
				if err := c.reply(o.code, repInfo, append(d, req.name...)); err != nil {
					return false, err
				}
			}
		}
		if err := c.reply(o.code, repAck, nil); err != nil {
			return false, err
		}
		if o.code == optGo {
			c.dev, c.name, keep = dev, req.name, true
		}
		return false, nil
	case optStructuredReply:
		if len(o.data) != 0 {
			return false, c.replyErr(o.code, repErrInvalid, "NBD_OPT_STRUCTURED_REPLY takes no data")
		}
		c.structured = true
		return false, c.reply(o.code, repAck, nil)
	case optListMetaContext, optSetMetaContext:
		if !c.structured {
			return false, c.replyErr(o.code, repErrInvalid, "meta contexts need structured replies first")
		}
		req, err := decodeMetaRequest(o.data)
		if err != nil {
			return false, c.replyErr(o.code, repErrInvalid, "%v", err)
		}
		dev, err := c.open(ctx, o.code, req.export)
		if dev == nil {
			return false, err
		}
		_, mapper := dev.(Mapper)
		dev.Close()
		want := mapper && (o.code == optListMetaContext && len(req.queries) == 0)
		for _, q := range req.queries {
			want = want || mapper && (q == metaBaseAllocation || o.code == optListMetaContext && q == "base:")
		}
		if o.code == optSetMetaContext {
			c.allocation = want
		}
		if want {
			d := binary.BigEndian.AppendUint32(nil, metaContextID)
			if err := c.reply(o.code, repMetaContext, append(d, metaBaseAllocation...)); err != nil {
				return false, err
			}
		}
		return false, c.reply(o.code, repAck, nil)
	case optStartTLS:
		if c.tls {
			return false, c.replyErr(o.code, repErrInvalid, "the connection already uses TLS")
		}
		return false, c.replyErr(o.code, repErrPolicy, "TLS is not offered by this server")
	}
	return false, c.replyErr(o.code, repErrUnsup, "option %d is not supported", o.code)
}

// startTLS acknowledges NBD_OPT_STARTTLS and continues the handshake over
// TLS; a failed TLS handshake ends the connection.
func (c *conn) startTLS(o option) error {
	if len(o.data) != 0 {
		return c.replyErr(o.code, repErrInvalid, "NBD_OPT_STARTTLS takes no data")
	}
	if c.r.Buffered() != 0 {
		return fmt.Errorf("%w: data after NBD_OPT_STARTTLS before the TLS handshake", errMalformed)
	}
	if err := c.reply(o.code, repAck, nil); err != nil {
		return err
	}
	tc := tls.Server(c.c, c.s.TLS)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	c.c, c.tls = tc, true
	c.r, c.w = bufio.NewReaderSize(tc, 64<<10), bufio.NewWriterSize(tc, 64<<10)
	return nil
}

// open opens an export during option haggling; if it fails, the error is
// sent as the option's reply (unknown export, or refused) and dev is nil,
// with err the result of sending it.
func (c *conn) open(ctx context.Context, opt uint32, name string) (dev Device, err error) {
	dev, err = c.s.Exports.Open(ctx, name)
	switch {
	case err == nil:
		return dev, nil
	case errors.Is(err, ErrUnknownExport):
		return nil, c.replyErr(opt, repErrUnknown, "export %q: %v", name, err)
	}
	return nil, c.replyErr(opt, repErrPolicy, "export %q: %v", name, err)
}

// transmit serves requests until the client disconnects. A fixed set of
// workers runs the requests (no goroutine, and no stack growth, per
// request), and one flusher writes out the replies they queue, so replies
// finishing together share a system call.
func (c *conn) transmit(ctx context.Context) error {
	max := c.s.MaxInFlight
	if max <= 0 {
		max = 64
	}
	type job struct {
		req  request
		data []byte
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c.do(ctx, j.req, j.data)
			}
		}()
	}
	c.flushReq = make(chan struct{}, 1)
	flusherDone := make(chan struct{})
	go c.flusher(flusherDone)
	defer func() {
		close(jobs)
		wg.Wait()
		close(c.flushReq)
		<-flusherDone
	}()
	var h [requestLen]byte
	for {
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return err
		}
		req, err := decodeRequest(h[:])
		if err != nil {
			return err
		}
		var data []byte
		if req.typ == cmdWrite {
			if req.length > MaxPayload {
				// The payload cannot be skipped safely: give up on this client.
				return fmt.Errorf("%w: write of %d bytes (limit %d)", errMalformed, req.length, MaxPayload)
			}
			data = bufpool.Get(int(req.length)) // handed back by do
			if _, err := io.ReadFull(c.r, data); err != nil {
				return err
			}
		}
		if req.typ == cmdDisc {
			return nil // the deferred close waits for the requests in flight
		}
		c.busy.Add(1)
		if c.s.Load != nil {
			c.s.Load.Begin()
		}
		jobs <- job{req, data}
	}
}

// queue adds a reply, in parts written in order under one lock, to the
// write buffer and sends it: at once if it answers the only request in
// flight (handing it to the flusher would cost a wake-up of an idle thread,
// tens of µs of a QD1 request), else through the flusher, which sends the
// replies of requests finishing together in one write.
func (c *conn) queue(parts ...[]byte) {
	c.wmu.Lock()
	var err error
	for _, b := range parts {
		if _, err = c.w.Write(b); err != nil {
			break
		}
	}
	if c.s.Load != nil {
		c.s.Load.End()
	}
	if c.busy.Add(-1) == 0 && err == nil {
		if err := c.w.Flush(); err != nil {
			c.c.Close()
		}
		c.wmu.Unlock()
		return
	}
	c.wmu.Unlock()
	if err != nil {
		return // the connection is gone; the reader sees it too
	}
	select {
	case c.flushReq <- struct{}{}:
	default: // a flush is already due and will carry this reply
	}
}

// flusher writes queued replies out until flushReq is closed.
func (c *conn) flusher(done chan<- struct{}) {
	defer close(done)
	for range c.flushReq {
		// Let the workers that are finishing queue their replies too: one
		// write then carries several (a system call per reply was a large
		// part of the gateway's CPU on 4 KiB reads).
		runtime.Gosched()
		c.wmu.Lock()
		err := c.w.Flush()
		c.wmu.Unlock()
		if err != nil {
			c.c.Close()
		}
	}
}

// do runs one request and sends its reply. data, a write's payload, goes
// back to bufpool when it returns: Device.Write must not keep it.
func (c *conn) do(ctx context.Context, req request, data []byte) {
	defer bufpool.Put(data)
	size := c.dev.Size()
	end := req.offset + uint64(req.length)
	inRange := end >= req.offset && end <= size
	fail := func(errno uint32, msg string) {
		if c.structured && req.typ == cmdRead {
			p := binary.BigEndian.AppendUint32(nil, errno)
			p = binary.BigEndian.AppendUint16(p, uint16(len(msg)))
			p = append(p, msg...)
			c.queue(append(appendChunkHeader(nil, replyFlagDone, replyError, req.handle, uint32(len(p))), p...))
			return
		}
		c.queue(appendSimpleReply(nil, errno, req.handle))
	}
	ok := func() { c.queue(appendSimpleReply(nil, 0, req.handle)) }
	var err error
	switch req.typ {
	case cmdRead:
		if req.length > MaxPayload {
			fail(errOverflow, fmt.Sprintf("read of %d bytes exceeds the %d-byte limit", req.length, MaxPayload))
			return
		}
		if !inRange {
			fail(errInval, fmt.Sprintf("read of %d bytes at %d goes past the end (%d)", req.length, req.offset, size))
			return
		}
		chunks, err := c.dev.Read(ctx, req.offset, req.length)
		if err != nil {
			fail(errnoOf(err), err.Error())
			return
		}
		c.sendRead(req, chunks)
		return
	case cmdWrite, cmdTrim, cmdWriteZeroes:
		switch {
		case c.dev.ReadOnly():
			fail(errPerm, "read-only export")
			return
		case !inRange && req.typ == cmdTrim:
			fail(errInval, "trim past the end")
			return
		case !inRange:
			fail(errNoSpace, "write past the end")
			return
		}
		switch req.typ {
		case cmdWrite:
			err = c.dev.Write(ctx, req.offset, data)
		case cmdTrim:
			err = c.dev.Trim(ctx, req.offset, req.length)
		default:
			err = c.dev.Zero(ctx, req.offset, req.length, req.flags&cmdFlagNoHole == 0)
		}
		if err == nil && req.flags&cmdFlagFUA != 0 {
			err = c.dev.Flush(ctx)
		}
	case cmdFlush:
		err = c.dev.Flush(ctx)
	case cmdBlockStatus:
		m, ok := c.dev.(Mapper)
		switch {
		case !c.allocation || !ok:
			fail(errInval, "no meta context was negotiated")
			return
		case !inRange || req.length == 0:
			fail(errInval, "block status past the end")
			return
		}
		ext, err := m.Extents(ctx, req.offset, req.length)
		if err != nil {
			fail(errnoOf(err), err.Error())
			return
		}
		c.sendBlockStatus(req, ext)
		return
	default:
		fail(errInval, fmt.Sprintf("command %d is not supported", req.typ))
		return
	}
	if err != nil {
		c.s.logf("nbd: %s: %s: command %d at %d+%d: %v", c.c.RemoteAddr(), c.name, req.typ, req.offset, req.length, err)
		fail(errnoOf(err), err.Error())
		return
	}
	ok()
}

// sendRead answers a successful read: structured (holes cost nothing) when
// negotiated, else one simple reply with the data.
func (c *conn) sendRead(req request, chunks []Chunk) {
	// Once queue has copied or sent the data. The deletion of empty chunks
	// below only moves the others to the front of this same slice.
	defer releaseChunks(chunks)
	// Headers and data go to the connection's buffer as separate parts:
	// large data is written through without being copied into one reply.
	var parts [][]byte
	if !c.structured {
		parts = append(parts, appendSimpleReply(make([]byte, 0, 16), 0, req.handle))
		for _, ch := range chunks {
			if ch.Data != nil {
				parts = append(parts, ch.Data)
			} else {
				parts = append(parts, make([]byte, ch.Hole))
			}
		}
		c.queue(parts...)
		return
	}
	chunks = slices.DeleteFunc(chunks, func(ch Chunk) bool { return ch.len() == 0 })
	if len(chunks) == 0 {
		c.queue(appendChunkHeader(nil, replyFlagDone, replyNone, req.handle, 0))
		return
	}
	off := req.offset
	for i, ch := range chunks {
		flags := uint16(0)
		if i == len(chunks)-1 {
			flags = replyFlagDone
		}
		var h []byte
		if ch.Data != nil {
			h = appendChunkHeader(make([]byte, 0, 28), flags, replyOffsetData, req.handle, 8+uint32(len(ch.Data)))
			h = binary.BigEndian.AppendUint64(h, off)
			parts = append(parts, h, ch.Data)
		} else {
			h = appendChunkHeader(make([]byte, 0, 32), flags, replyOffsetHole, req.handle, 12)
			h = binary.BigEndian.AppendUint64(h, off)
			parts = append(parts, binary.BigEndian.AppendUint32(h, ch.Hole))
		}
		off += uint64(ch.len())
	}
	c.queue(parts...)
}

func releaseChunks(chunks []Chunk) {
	for _, ch := range chunks {
		if ch.Release != nil {
			ch.Release()
		}
	}
}

// sendBlockStatus answers NBD_CMD_BLOCK_STATUS with one chunk of
// descriptors, never past the requested length.
func (c *conn) sendBlockStatus(req request, ext []Extent) {
	p := binary.BigEndian.AppendUint32(nil, metaContextID)
	left := req.length
	for _, e := range ext {
		if left == 0 || e.Length == 0 {
			continue
		}
		n := min(e.Length, left)
		flags := uint32(0)
		if e.Hole {
			flags = stateHole | stateZero
		}
		p = binary.BigEndian.AppendUint32(p, n)
		p = binary.BigEndian.AppendUint32(p, flags)
		left -= n
		if req.flags&cmdFlagReqOne != 0 {
			break
		}
	}
	if len(p) == 4 { // the device described nothing: call it data
		p = binary.BigEndian.AppendUint32(p, req.length)
		p = binary.BigEndian.AppendUint32(p, 0)
	}
	c.queue(append(appendChunkHeader(nil, replyFlagDone, replyBlockStatus, req.handle, uint32(len(p))), p...))
}

func errnoOf(err error) uint32 {
	if errors.Is(err, ErrNoSpace) {
		return errNoSpace
	}
	return errIO
}
