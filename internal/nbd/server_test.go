package nbd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memDevice is an in-memory device whose never-written 4 KiB blocks read as
// holes.
type memDevice struct {
	mu      sync.Mutex
	data    []byte
	written map[uint64]bool
	flushes int
	// Data chunks handed out by Read, and those the server released.
	handedOut, released atomic.Int64
}

func newMem(size int) *memDevice {
	return &memDevice{data: make([]byte, size), written: map[uint64]bool{}}
}

func (m *memDevice) Size() uint64   { return uint64(len(m.data)) }
func (m *memDevice) ReadOnly() bool { return false }
func (m *memDevice) Close() error   { return nil }
func (m *memDevice) Flush(context.Context) error {
	m.mu.Lock()
	m.flushes++
	m.mu.Unlock()
	return nil
}

func (m *memDevice) Read(_ context.Context, off uint64, n uint32) ([]Chunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Chunk
	for pos := off; pos < off+uint64(n); {
		blk := pos / 4096
		end := min((blk+1)*4096, off+uint64(n))
		if m.written[blk] {
			m.handedOut.Add(1)
			out = append(out, Chunk{Data: append([]byte(nil), m.data[pos:end]...), Release: func() { m.released.Add(1) }})
		} else {
			out = append(out, Chunk{Hole: uint32(end - pos)})
		}
		pos = end
	}
	return out, nil
}

func (m *memDevice) Write(_ context.Context, off uint64, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.data[off:], b)
	for blk := off / 4096; blk*4096 < off+uint64(len(b)); blk++ {
		m.written[blk] = true
	}
	return nil
}

func (m *memDevice) Zero(ctx context.Context, off uint64, n uint32, _ bool) error {
	return m.Write(ctx, off, make([]byte, n))
}

func (m *memDevice) Trim(context.Context, uint64, uint32) error { return nil }

type memExports struct{ devs map[string]*memDevice }

func (e memExports) Open(_ context.Context, name string) (Device, error) {
	d, ok := e.devs[name]
	if !ok {
		return nil, ErrUnknownExport
	}
	return d, nil
}

func (e memExports) List(context.Context) ([]string, error) { return []string{"a", "b"}, nil }

func startServer(t *testing.T) (string, *memDevice) {
	t.Helper()
	dev := newMem(1 << 20)
	srv := &Server{Exports: memExports{map[string]*memDevice{"a": dev, "b": newMem(4096)}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), dev
}

// client is a minimal NBD client for protocol tests.
type client struct {
	t *testing.T
	c net.Conn
}

func dialClient(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	cl := &client{t: t, c: c}
	var hello [18]byte
	cl.read(hello[:])
	if binary.BigEndian.Uint64(hello[:]) != magicInit || binary.BigEndian.Uint64(hello[8:]) != magicOpt ||
		binary.BigEndian.Uint16(hello[16:]) != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("server greeting %x", hello)
	}
	cl.write(binary.BigEndian.AppendUint32(nil, flagFixedNewstyle|flagNoZeroes))
	return cl
}

func (c *client) read(b []byte) {
	c.t.Helper()
	if _, err := io.ReadFull(c.c, b); err != nil {
		c.t.Fatalf("read: %v", err)
	}
}

func (c *client) write(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) option(code uint32, data []byte) {
	b := binary.BigEndian.AppendUint64(nil, magicOpt)
	b = binary.BigEndian.AppendUint32(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	c.write(append(b, data...))
}

// optReply reads one option reply.
func (c *client) optReply() (typ uint32, data []byte) {
	c.t.Helper()
	var h [20]byte
	c.read(h[:])
	if binary.BigEndian.Uint64(h[:]) != magicOptReply {
		c.t.Fatalf("option reply magic %x", h[:8])
	}
	data = make([]byte, binary.BigEndian.Uint32(h[16:]))
	c.read(data)
	return binary.BigEndian.Uint32(h[12:]), data
}

// goExport runs NBD_OPT_GO and returns the size and flags from NBD_INFO_EXPORT.
func (c *client) goExport(name string) (size uint64, flags uint16, typ uint32) {
	d := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	d = append(d, name...)
	d = binary.BigEndian.AppendUint16(d, 1)
	d = binary.BigEndian.AppendUint16(d, infoBlockSize)
	c.option(optGo, d)
	for {
		typ, data := c.optReply()
		switch typ {
		case repInfo:
			if binary.BigEndian.Uint16(data) == infoExport {
				size, flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
			}
		default:
			return size, flags, typ
		}
	}
}

func (c *client) request(typ, flags uint16, handle, off uint64, length uint32, data []byte) {
	b := binary.BigEndian.AppendUint32(nil, magicRequest)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, handle)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, length)
	c.write(append(b, data...))
}

// simpleReply reads a simple reply (and n bytes of data if it succeeded).
func (c *client) simpleReply(n int) (errno uint32, handle uint64, data []byte) {
	c.t.Helper()
	var h [16]byte
	c.read(h[:])
	if binary.BigEndian.Uint32(h[:]) != magicSimple {
		c.t.Fatalf("reply magic %x", h[:4])
	}
	errno, handle = binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint64(h[8:])
	if errno == 0 && n > 0 {
		data = make([]byte, n)
		c.read(data)
	}
	return errno, handle, data
}

func TestHandshakeAndIO(t *testing.T) {
	addr, dev := startServer(t)
	c := dialClient(t, addr)
	c.option(optList, nil)
	var names []string
	for {
		typ, data := c.optReply()
		if typ == repAck {
			break
		}
		if typ != repServer {
			t.Fatalf("list reply type %d", typ)
		}
		names = append(names, string(data[4:4+binary.BigEndian.Uint32(data)]))
	}
	if len(names) != 2 || names[0] != "a" {
		t.Fatalf("exports listed: %v", names)
	}
	if _, _, typ := c.goExport("nope"); typ != repErrUnknown {
		t.Fatalf("unknown export: reply %#x, want NBD_REP_ERR_UNKNOWN", typ)
	}
	size, flags, typ := c.goExport("a")
	if typ != repAck || size != 1<<20 {
		t.Fatalf("go: reply %#x size %d", typ, size)
	}
	for _, f := range []uint16{tflagFlush, tflagFUA, tflagTrim, tflagWriteZeroes, tflagCanMultiConn} {
		if flags&f == 0 {
			t.Errorf("transmission flags %#x lack %#x", flags, f)
		}
	}
	payload := bytes.Repeat([]byte("cairn!"), 1000)
	c.request(cmdWrite, cmdFlagFUA, 1, 12345, uint32(len(payload)), payload)
	if errno, h, _ := c.simpleReply(0); errno != 0 || h != 1 {
		t.Fatalf("write: errno %d handle %d", errno, h)
	}
	if dev.flushes != 1 {
		t.Fatalf("a FUA write flushed %d times, want 1", dev.flushes)
	}
	c.request(cmdRead, 0, 2, 12345, uint32(len(payload)), nil)
	if errno, _, data := c.simpleReply(len(payload)); errno != 0 || !bytes.Equal(data, payload) {
		t.Fatalf("read back: errno %d, equal %v", errno, bytes.Equal(data, payload))
	}
	waitReleased(t, dev)
	// Past the end: writes ENOSPC, reads EINVAL; the connection goes on.
	c.request(cmdWrite, 0, 3, 1<<20-1, 2, []byte("xy"))
	if errno, _, _ := c.simpleReply(0); errno != errNoSpace {
		t.Fatalf("write past the end: errno %d, want ENOSPC", errno)
	}
	c.request(cmdRead, 0, 4, 1<<20, 1, nil)
	if errno, _, _ := c.simpleReply(1); errno != errInval {
		t.Fatalf("read past the end: errno %d, want EINVAL", errno)
	}
	c.request(cmdRead, 0, 5, 0, MaxPayload+1, nil)
	if errno, _, _ := c.simpleReply(0); errno != errOverflow {
		t.Fatalf("read over the size limit: errno %d, want EOVERFLOW", errno)
	}
	c.request(99, 0, 6, 0, 1, nil)
	if errno, _, _ := c.simpleReply(0); errno != errInval {
		t.Fatalf("unknown command: errno %d, want EINVAL", errno)
	}
	c.request(cmdBlockStatus, 0, 10, 0, 4096, nil)
	if errno, _, _ := c.simpleReply(0); errno != errInval {
		t.Fatalf("block status without a meta context: errno %d, want EINVAL", errno)
	}
	c.request(cmdFlush, 0, 7, 0, 0, nil)
	if errno, _, _ := c.simpleReply(0); errno != 0 {
		t.Fatalf("flush: errno %d", errno)
	}
	c.request(cmdDisc, 0, 8, 0, 0, nil)
	if _, err := c.c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after NBD_CMD_DISC the server should close: %v", err)
	}
}

// With structured replies, unwritten blocks come back as holes.
func TestStructuredReadSendsHoles(t *testing.T) {
	addr, dev := startServer(t)
	c := dialClient(t, addr)
	c.option(optStructuredReply, nil)
	if typ, _ := c.optReply(); typ != repAck {
		t.Fatalf("structured reply: %#x", typ)
	}
	if _, _, typ := c.goExport("a"); typ != repAck {
		t.Fatalf("go: %#x", typ)
	}
	c.request(cmdWrite, 0, 1, 4096, 4096, bytes.Repeat([]byte{7}, 4096))
	if errno, _, _ := c.simpleReply(0); errno != 0 {
		t.Fatal(errno)
	}
	c.request(cmdRead, 0, 2, 0, 3*4096, nil)
	var kinds []uint16
	covered := uint32(0)
	for done := false; !done; {
		var h [20]byte
		c.read(h[:])
		if binary.BigEndian.Uint32(h[:]) != magicStructured {
			t.Fatalf("chunk magic %x", h[:4])
		}
		flags, typ, n := binary.BigEndian.Uint16(h[4:]), binary.BigEndian.Uint16(h[6:]), binary.BigEndian.Uint32(h[16:])
		body := make([]byte, n)
		c.read(body)
		kinds = append(kinds, typ)
		switch typ {
		case replyOffsetData:
			covered += n - 8
			if !bytes.Equal(body[8:], bytes.Repeat([]byte{7}, 4096)) {
				t.Fatal("data chunk content")
			}
		case replyOffsetHole:
			covered += binary.BigEndian.Uint32(body[8:])
		}
		done = flags&replyFlagDone != 0
	}
	if covered != 3*4096 || len(kinds) != 3 || kinds[0] != replyOffsetHole || kinds[1] != replyOffsetData || kinds[2] != replyOffsetHole {
		t.Fatalf("chunks %v covering %d bytes; want hole, data, hole over 12288", kinds, covered)
	}
	waitReleased(t, dev)
}

// waitReleased waits until the server has released every data chunk the
// device handed out, each once: the device may then reuse its buffers.
func waitReleased(t *testing.T, dev *memDevice) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); dev.released.Load() != dev.handedOut.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d data chunks released after their replies were sent", dev.released.Load(), dev.handedOut.Load())
		}
	}
	if dev.handedOut.Load() == 0 {
		t.Fatal("no data chunk was read")
	}
}

// Garbage on one connection closes that connection only.
func TestGarbageClosesOnlyThatConnection(t *testing.T) {
	addr, _ := startServer(t)
	good := dialClient(t, addr)
	if _, _, typ := good.goExport("a"); typ != repAck {
		t.Fatal(typ)
	}
	bad := dialClient(t, addr)
	if _, _, typ := bad.goExport("a"); typ != repAck {
		t.Fatal(typ)
	}
	bad.write(bytes.Repeat([]byte{0xee}, 28))
	if _, err := bad.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a request with a bad magic should close the connection")
	}
	// A client that vanishes in the middle of a write payload.
	gone := dialClient(t, addr)
	gone.goExport("a")
	gone.request(cmdWrite, 0, 1, 0, 4096, []byte("only part"))
	gone.c.Close()

	good.request(cmdRead, 0, 9, 0, 16, nil)
	if errno, h, _ := good.simpleReply(16); errno != 0 || h != 9 {
		t.Fatalf("the other connection stopped working: errno %d handle %d", errno, h)
	}
}

func FuzzReadOption(f *testing.F) {
	b := binary.BigEndian.AppendUint64(nil, magicOpt)
	b = binary.BigEndian.AppendUint32(b, optGo)
	b = binary.BigEndian.AppendUint32(b, 9)
	f.Add(append(b, 0, 0, 0, 1, 'a', 0, 1, 0, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := readOption(bytes.NewReader(b))
		if err != nil {
			return
		}
		if req, err := decodeInfoRequest(o.data); err == nil && len(req.name) > len(o.data) {
			t.Fatalf("name of %d bytes from %d", len(req.name), len(o.data))
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	h := binary.BigEndian.AppendUint32(nil, magicRequest)
	h = append(h, make([]byte, 24)...)
	f.Add(h)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		var back []byte
		back = binary.BigEndian.AppendUint32(back, magicRequest)
		back = binary.BigEndian.AppendUint16(back, r.flags)
		back = binary.BigEndian.AppendUint16(back, r.typ)
		back = binary.BigEndian.AppendUint64(back, r.handle)
		back = binary.BigEndian.AppendUint64(back, r.offset)
		back = binary.BigEndian.AppendUint32(back, r.length)
		if !bytes.Equal(back, b) {
			t.Fatalf("decode/encode not stable: %x vs %x", back, b)
		}
	})
}

func (m *memDevice) Extents(_ context.Context, off uint64, n uint32) ([]Extent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Extent
	for pos := off; pos < off+uint64(n); {
		blk := pos / 4096
		end := min((blk+1)*4096, off+uint64(n))
		hole := !m.written[blk]
		if k := len(out); k > 0 && out[k-1].Hole == hole {
			out[k-1].Length += uint32(end - pos)
		} else {
			out = append(out, Extent{Length: uint32(end - pos), Hole: hole})
		}
		pos = end
	}
	return out, nil
}

// metaOption sends LIST or SET_META_CONTEXT for export with queries and
// returns the contexts the server named.
func (c *client) metaOption(code uint32, export string, queries ...string) (map[uint32]string, uint32) {
	d := binary.BigEndian.AppendUint32(nil, uint32(len(export)))
	d = append(d, export...)
	d = binary.BigEndian.AppendUint32(d, uint32(len(queries)))
	for _, q := range queries {
		d = binary.BigEndian.AppendUint32(d, uint32(len(q)))
		d = append(d, q...)
	}
	c.option(code, d)
	got := map[uint32]string{}
	for {
		typ, data := c.optReply()
		if typ != repMetaContext {
			return got, typ
		}
		got[binary.BigEndian.Uint32(data)] = string(data[4:])
	}
}

// Block status reports written and unwritten ranges once base:allocation
// was negotiated, and is refused before.
func TestBlockStatus(t *testing.T) {
	addr, _ := startServer(t)
	c := dialClient(t, addr)
	if _, typ := c.metaOption(optSetMetaContext, "a", metaBaseAllocation); typ != repErrInvalid {
		t.Fatalf("meta context before structured replies: %#x, want NBD_REP_ERR_INVALID", typ)
	}
	c.option(optStructuredReply, nil)
	c.optReply()
	if got, typ := c.metaOption(optListMetaContext, "a"); typ != repAck || got[metaContextID] != metaBaseAllocation {
		t.Fatalf("list meta contexts: %v %#x", got, typ)
	}
	if got, typ := c.metaOption(optSetMetaContext, "a", "qemu:dirty-bitmap:x", metaBaseAllocation); typ != repAck || len(got) != 1 || got[metaContextID] != metaBaseAllocation {
		t.Fatalf("set meta context: %v %#x", got, typ)
	}
	if _, _, typ := c.goExport("a"); typ != repAck {
		t.Fatal(typ)
	}
	c.request(cmdWrite, 0, 1, 8192, 4096, bytes.Repeat([]byte{1}, 4096))
	if errno, _, _ := c.simpleReply(0); errno != 0 {
		t.Fatal(errno)
	}
	c.request(cmdBlockStatus, 0, 2, 4096, 3*4096, nil)
	var h [20]byte
	c.read(h[:])
	if binary.BigEndian.Uint32(h[:]) != magicStructured || binary.BigEndian.Uint16(h[6:]) != replyBlockStatus || binary.BigEndian.Uint16(h[4:])&replyFlagDone == 0 {
		t.Fatalf("block status chunk header %x", h)
	}
	body := make([]byte, binary.BigEndian.Uint32(h[16:]))
	c.read(body)
	type desc struct{ n, flags uint32 }
	var got []desc
	for p := body[4:]; len(p) >= 8; p = p[8:] {
		got = append(got, desc{binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])})
	}
	want := []desc{{4096, stateHole | stateZero}, {4096, 0}, {4096, stateHole | stateZero}}
	if binary.BigEndian.Uint32(body) != metaContextID || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("descriptors %v, want %v", got, want)
	}
}

func FuzzDecodeMetaRequest(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 'a', 0, 0, 0, 1, 0, 0, 0, 2, 'x', 'y'})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeMetaRequest(b)
		if err != nil {
			return
		}
		n := 4 + len(req.export) + 4
		for _, q := range req.queries {
			n += 4 + len(q)
		}
		if n != len(b) {
			t.Fatalf("decoded %d bytes' worth from %d", n, len(b))
		}
	})
}

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nbd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestTLSRequired: with TLS configured, every option but STARTTLS (and
// abort) is refused with NBD_REP_ERR_TLS_REQD; after STARTTLS the handshake
// and IO run over TLS.
func TestTLSRequired(t *testing.T) {
	cert, pool := selfSigned(t)
	dev := newMem(1 << 20)
	srv := &Server{Exports: memExports{map[string]*memDevice{"a": dev}},
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := dialClient(t, ln.Addr().String())
	c.option(optList, nil)
	if typ, data := c.optReply(); typ != repErrTLSReqd {
		t.Fatalf("NBD_OPT_LIST before TLS: reply %#x %q, want NBD_REP_ERR_TLS_REQD", typ, data)
	}
	c.option(optStartTLS, nil)
	if typ, _ := c.optReply(); typ != repAck {
		t.Fatalf("NBD_OPT_STARTTLS: reply %#x", typ)
	}
	tc := tls.Client(c.c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	c.c = tc
	c.option(optStartTLS, nil)
	if typ, _ := c.optReply(); typ != repErrInvalid {
		t.Fatalf("a second NBD_OPT_STARTTLS: reply %#x, want NBD_REP_ERR_INVALID", typ)
	}
	if size, _, typ := c.goExport("a"); typ != repAck || size != 1<<20 {
		t.Fatalf("NBD_OPT_GO over TLS: size %d, reply %#x", size, typ)
	}
	data := bytes.Repeat([]byte("tls!"), 1024)
	c.request(cmdWrite, 0, 1, 8192, uint32(len(data)), data)
	if errno, _, _ := c.simpleReply(0); errno != 0 {
		t.Fatalf("write over TLS: errno %d", errno)
	}
	c.request(cmdRead, 0, 2, 8192, uint32(len(data)), nil)
	if errno, _, got := c.simpleReply(len(data)); errno != 0 || !bytes.Equal(got, data) {
		t.Fatalf("read over TLS: errno %d, data differs: %v", errno, !bytes.Equal(got, data))
	}

	// A client that skips TLS cannot pick an export in the old style either.
	c2 := dialClient(t, ln.Addr().String())
	c2.option(optExportName, []byte("a"))
	var b [1]byte
	if _, err := c2.c.Read(b[:]); err == nil {
		t.Fatal("NBD_OPT_EXPORT_NAME without TLS was answered")
	}
}

// countingLoad records what a Server tells its Load.
type countingLoad struct {
	begins, ends, now, most atomic.Int64
}

func (l *countingLoad) Begin() {
	l.begins.Add(1)
	n := l.now.Add(1)
	for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
	}
}

func (l *countingLoad) End() { l.ends.Add(1); l.now.Add(-1) }

// Every request is counted in once and out once, whatever its outcome, and
// out only when its reply is on its way: a count left behind would keep the
// gateway's runtime sized for load it does not have.
func TestLoadCountsEveryRequest(t *testing.T) {
	dev := newMem(1 << 20)
	load := &countingLoad{}
	srv := &Server{Exports: memExports{map[string]*memDevice{"a": dev}}, Load: load}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c := dialClient(t, ln.Addr().String())
	if _, _, typ := c.goExport("a"); typ != repAck {
		t.Fatalf("go: reply %#x", typ)
	}
	payload := bytes.Repeat([]byte{7}, 4096)
	one := func(typ uint16, handle, off uint64, length uint32, data []byte, replyData int, wantErrno uint32) {
		t.Helper()
		c.request(typ, 0, handle, off, length, data)
		errno, h, _ := c.simpleReply(replyData)
		if errno != wantErrno || h != handle {
			t.Fatalf("request %d: errno %d handle %d, want errno %d", handle, errno, h, wantErrno)
		}
		// The reply has arrived, so its request was counted out.
		if n := load.now.Load(); n != 0 {
			t.Fatalf("after request %d's reply %d requests are counted in", handle, n)
		}
	}
	one(cmdWrite, 1, 0, 4096, payload, 0, 0)
	one(cmdRead, 2, 0, 4096, nil, 4096, 0)
	one(cmdWrite, 3, 1<<20, 4096, payload, 0, errNoSpace)
	one(cmdRead, 4, 1<<20, 1, nil, 1, errInval)
	one(99, 5, 0, 1, nil, 0, errInval)
	one(cmdBlockStatus, 6, 0, 4096, nil, 0, errInval)
	one(cmdFlush, 7, 0, 0, nil, 0, 0)
	if m := load.most.Load(); m != 1 {
		t.Fatalf("requests sent one at a time were counted %d at once", m)
	}
	// Pipelined: all sent before any reply is read.
	const n = 32
	for i := range uint64(n) {
		c.request(cmdWrite, 0, 100+i, i*4096, 4096, payload)
	}
	for range n {
		if errno, _, _ := c.simpleReply(0); errno != 0 {
			t.Fatalf("pipelined write: errno %d", errno)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for load.ends.Load() != 7+n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b, e, now := load.begins.Load(), load.ends.Load(), load.now.Load(); b != 7+n || e != 7+n || now != 0 {
		t.Fatalf("%d requests: counted in %d, out %d, %d left in", 7+n, b, e, now)
	}
}

// TestHandshakeTimeoutAndConnectionLimit: a connection that does not
// choose an export within HandshakeTimeout is closed and logged; one over
// MaxConns is closed before the greeting and logged; a connection past
// its handshake may stay idle longer than the timeout.
func TestHandshakeTimeoutAndConnectionLimit(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	srv := &Server{
		Exports:          memExports{map[string]*memDevice{"a": newMem(1 << 20)}},
		HandshakeTimeout: 300 * time.Millisecond,
		MaxConns:         2,
		Logf: func(format string, args ...any) {
			mu.Lock()
			logged = append(logged, fmt.Sprintf(format, args...))
			mu.Unlock()
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	logs := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(logged, "\n")
	}

	served := dialClient(t, addr)
	if _, _, typ := served.goExport("a"); typ != repAck {
		t.Fatalf("NBD_OPT_GO: reply %d", typ)
	}
	stalled := dialClient(t, addr) // greeted, then says nothing more
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := over.Read(make([]byte, 18)); err != io.EOF {
		t.Errorf("a third connection with MaxConns 2: read %d bytes, %v; want it closed", n, err)
	}
	if l := logs(); !strings.Contains(l, "refusing connection") || !strings.Contains(l, "--max-connections") {
		t.Errorf("the refusal is not logged with what to change:\n%s", l)
	}

	t0 := time.Now()
	if n, err := stalled.c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a stalled handshake: read %d bytes, %v; want it closed", n, err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("a stalled handshake was closed after %v; want about 300 ms", d)
	}
	time.Sleep(50 * time.Millisecond) // the log line follows the close
	if l := logs(); !strings.Contains(l, "handshake timeout") {
		t.Errorf("the timed-out handshake is not logged:\n%s", l)
	}

	// The served connection outlives the handshake timeout, and the slot
	// the stalled one held is free again.
	time.Sleep(500 * time.Millisecond)
	served.request(cmdRead, 0, 7, 0, 512, nil)
	if errno, handle, _ := served.simpleReply(512); errno != 0 || handle != 7 {
		t.Errorf("a read after idling past the handshake timeout: errno %d, handle %d", errno, handle)
	}
	again := dialClient(t, addr)
	again.option(optAbort, nil)
}
