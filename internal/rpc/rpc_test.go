package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/proto"
)

var testKey = []byte("cluster key of the test cluster")

// logBuf collects a server's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// waitFor waits until a line contains every one of subs.
func (l *logBuf) waitFor(t *testing.T, subs ...string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, line := range l.lines {
			ok := true
			for _, s := range subs {
				ok = ok && strings.Contains(line, s)
			}
			if ok {
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no log line contains %q; log:\n%s", subs, strings.Join(l.lines, "\n"))
}

// echo answers with the request's object as Message, Offset as Size and its
// Data, after sleeping Length microseconds.
func echo(ctx context.Context, req *proto.Request) *proto.Response {
	if req.Length > 0 {
		select {
		case <-time.After(time.Duration(req.Length) * time.Microsecond):
		case <-ctx.Done():
		}
	}
	return &proto.Response{Status: proto.StatusOK, Message: req.Object, Size: req.Offset, Data: req.Data}
}

// startServer serves h on a fresh loopback port of host ("127.0.0.1" or
// "::1") and closes it when the test ends.
func startServer(t testing.TB, host string, key []byte, h Handler, opts ServerOptions) (*Server, string, *logBuf) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	if opts.Logf == nil {
		opts.Logf = logs.logf
	}
	s := NewServer(key, h, opts)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String(), logs
}

func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, testKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hosts returns the loopback hosts to test on: IPv6 only if this machine has
// it.
func hosts(t *testing.T) []string {
	hs := []string{"127.0.0.1"}
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		ln.Close()
		hs = append(hs, "::1")
	} else {
		t.Logf("no IPv6 loopback (%v): skipping the [::1] subtest", err)
	}
	return hs
}

func TestConcurrentCalls(t *testing.T) {
	for _, host := range hosts(t) {
		t.Run(host, func(t *testing.T) {
			_, addr, _ := startServer(t, host, testKey, HandlerFunc(echo), ServerOptions{})
			c := dial(t, addr)
			if !strings.HasPrefix(c.Addr(), "[") && host == "::1" {
				t.Fatalf("Addr %q", c.Addr())
			}
			const calls = 200
			inParallel(t, 64, func(g int) error {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for i := range calls {
					data := make([]byte, rng.IntN(300))
					for j := range data {
						data[j] = byte(rng.Uint32())
					}
					req := &proto.Request{Op: proto.OpWrite, Object: fmt.Sprintf("obj-%d-%d", g, i),
						Offset: uint64(g*calls + i), Length: uint64(rng.IntN(300)), Data: data}
					resp, err := c.Call(context.Background(), req)
					if err != nil {
						return err
					}
					if resp.Message != req.Object || resp.Size != req.Offset || !bytes.Equal(resp.Data, data) {
						return fmt.Errorf("call %s got the response of %s", req.Object, resp.Message)
					}
				}
				return nil
			})
		})
	}
}

func TestWrongKeyOnClient(t *testing.T) {
	_, addr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	_, err := Dial(context.Background(), addr, []byte("some other cluster's key"))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial with the wrong key: %v, want ErrAuth", err)
	}
	if !strings.Contains(err.Error(), "the peer does not have this cluster's key") {
		t.Errorf("unclear error: %v", err)
	}
	t.Log(err)
	logs.waitFor(t, "refused connection from", "does not have this cluster's key")
}

func TestWrongKeyOnServer(t *testing.T) {
	_, addr, logs := startServer(t, "127.0.0.1", []byte("a stale key"), HandlerFunc(echo), ServerOptions{})
	_, err := Dial(context.Background(), addr, testKey)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial: %v, want ErrAuth", err)
	}
	logs.waitFor(t, "refused connection from", "does not have this cluster's key")
}

// A server that accepts any proof but cannot prove it holds the key is
// refused by the client.
func TestClientRefusesServerWithoutKey(t *testing.T) {
	// The impostor follows the protocol but, lacking the key, answers OK
	// with a made-up proof.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		hello := make([]byte, helloLen)
		binary.BigEndian.PutUint32(hello, helloMagic)
		hello[4] = protocolVersion
		nc.Write(hello)
		io.ReadFull(nc, make([]byte, proofLen))
		writeVerdict(nc, verdictOK, make([]byte, macLen))
		io.Copy(io.Discard, nc)
	}()
	_, err = Dial(context.Background(), ln.Addr().String(), testKey)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "server does not have this cluster's key") {
		t.Fatalf("Dial to an impostor: %v", err)
	}
}

func TestDialNotCairn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		nc.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n.........."))
	}()
	_, err = Dial(context.Background(), ln.Addr().String(), testKey)
	if err == nil || !strings.Contains(err.Error(), "not a cairn daemon") {
		t.Fatalf("Dial to an HTTP server: %v", err)
	}
}

// A peer that connects and says nothing holds the Dial only until ctx ends,
// and the server only for its handshake timeout.
func TestHandshakeDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			defer nc.Close()
			io.Copy(io.Discard, nc)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Dial(ctx, ln.Addr().String(), testKey)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Dial to a silent peer: %v after %v", err, time.Since(start))
	}

	_, addr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{HandshakeTimeout: 100 * time.Millisecond})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("silent client was not disconnected: %v", err)
	}
	logs.waitFor(t, "refused connection from", "timeout")
}

// rawConn is an authenticated socket on which a test writes frames by hand.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if err := clientHandshake(nc, testKey, nil); err != nil {
		t.Fatal(err)
	}
	return nc
}

func frame(kind byte, id uint64, body []byte) []byte {
	h := make([]byte, headerLen, headerLen+len(body))
	binary.BigEndian.PutUint32(h[0:], frameMagic)
	h[4] = kind
	binary.BigEndian.PutUint64(h[8:], id)
	binary.BigEndian.PutUint32(h[16:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[20:], checksum(body))
	return append(h, body...)
}

// expectDisconnect reads until the server closes nc.
func expectDisconnect(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	// EOF, or a reset when the server closed with our bytes unread.
	if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("not disconnected: %v", err)
	}
}

func TestBadPeersLoseOnlyTheirConnection(t *testing.T) {
	_, addr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	good := dial(t, addr)
	check := func() {
		t.Helper()
		resp, err := good.Call(context.Background(), &proto.Request{Op: proto.OpPing, Object: "still here"})
		if err != nil || resp.Message != "still here" {
			t.Fatalf("good connection: %v %v", resp, err)
		}
	}
	check()
	ping := proto.AppendRequest(nil, &proto.Request{Op: proto.OpPing})

	cases := []struct {
		name  string
		bytes func() []byte
		log   string
	}{
		{"garbage", func() []byte { return bytes.Repeat([]byte("garbage!"), 10) }, "magic"},
		{"huge length", func() []byte {
			f := frame(kindRequest, 1, ping)
			binary.BigEndian.PutUint32(f[16:], proto.MaxFrameBytes+1)
			return f
		}, "exceeds limit"},
		{"bad crc", func() []byte {
			f := frame(kindRequest, 1, ping)
			f[len(f)-1] ^= 1
			return f
		}, "crc32c"},
		{"response kind", func() []byte { return frame(kindReply, 1, ping) }, "response frame"},
		{"unknown kind", func() []byte { return frame(7, 1, ping) }, "unknown kind 7"},
		{"vanishes mid-frame", func() []byte { return frame(kindRequest, 1, ping)[:headerLen+2] }, "unexpected EOF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc := rawConn(t, addr)
			if _, err := nc.Write(c.bytes()); err != nil {
				t.Fatal(err)
			}
			if c.name == "vanishes mid-frame" {
				nc.(*net.TCPConn).CloseWrite()
			}
			expectDisconnect(t, nc)
			logs.waitFor(t, "closed connection from "+nc.LocalAddr().String(), c.log)
			check()
		})
	}

	t.Run("garbage before handshake", func(t *testing.T) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(bytes.Repeat([]byte{0xff}, 200))
		expectDisconnect(t, nc)
		logs.waitFor(t, "refused connection from "+nc.LocalAddr().String(), "not a cairn client")
		check()
	})

	// An intact frame whose body is not a request is answered, and the
	// connection stays.
	t.Run("undecodable body", func(t *testing.T) {
		nc := rawConn(t, addr)
		nc.Write(frame(kindRequest, 9, []byte{proto.Version, 250}))
		nc.Write(frame(kindRequest, 10, ping))
		fr := frameReader{r: bufio.NewReader(nc)}
		nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		got := map[uint64]proto.Status{}
		for range 2 {
			kind, id, body, _, err := fr.next()
			if err != nil || kind != kindReply {
				t.Fatalf("kind %d: %v", kind, err)
			}
			resp, err := proto.DecodeResponse(body)
			if err != nil {
				t.Fatal(err)
			}
			got[id] = resp.Status
			if id == 9 && !strings.Contains(resp.Message, "unknown op 250") {
				t.Errorf("message %q", resp.Message)
			}
		}
		if got[9] != proto.StatusInvalid || got[10] != proto.StatusOK {
			t.Fatalf("statuses %v", got)
		}
	})
}

func TestServerCloseFailsPendingCalls(t *testing.T) {
	var inHandler atomic.Int32
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		if req.Op == proto.OpRead {
			inHandler.Add(1)
			<-ctx.Done() // stuck until the server closes
		}
		return echo(ctx, req)
	})
	s, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)

	const stuck, busy = 16, 8
	var wg sync.WaitGroup
	errs := make(chan error, stuck+busy)
	for range stuck {
		wg.Go(func() {
			_, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead})
			errs <- err
		})
	}
	for range busy {
		wg.Go(func() {
			for {
				_, err := c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Length: 50})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for inHandler.Load() < stuck {
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	s.Close()
	wg.Wait()
	if d := time.Since(start); d > time.Second {
		t.Errorf("pending calls took %v to fail", d)
	}
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("pending call: %v, want ErrClosed", err)
		}
	}
	if err := c.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err after server close: %v", err)
	}
	if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing}); !errors.Is(err, ErrClosed) {
		t.Errorf("Call on a broken conn: %v", err)
	}
}

func TestCancelOneCall(t *testing.T) {
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		switch req.Object {
		case "slow":
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		case "late":
			time.Sleep(100 * time.Millisecond)
		}
		return echo(ctx, req)
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, &proto.Request{Op: proto.OpRead, Object: "slow"})
		slow <- err
	}()
	late := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := c.Call(ctx, &proto.Request{Op: proto.OpRead, Object: "late"})
		late <- err
	}()
	for i := range 100 {
		obj := fmt.Sprint(i)
		resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Object: obj})
		if err != nil || resp.Message != obj {
			t.Fatalf("call %d: %v %v", i, resp, err)
		}
		if i == 10 {
			cancel()
			if err := <-slow; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: %v", err)
			}
		}
	}
	if err := <-late; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timed-out call: %v", err)
	}
	time.Sleep(150 * time.Millisecond) // the late response arrives and is dropped
	resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing, Object: "after"})
	if err != nil || resp.Message != "after" || c.Err() != nil {
		t.Fatalf("after cancellations: %v %v %v", resp, err, c.Err())
	}
}

func TestBackPressure(t *testing.T) {
	var cur, peak atomic.Int32
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		cur.Add(-1)
		return echo(ctx, req)
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{MaxInFlightPerConn: 4})
	c := dial(t, addr)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 5 {
				if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 4 || p < 2 {
		t.Fatalf("peak concurrent handlers %d, want 2..4", p)
	}
}

func TestLargeAndTooLarge(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	c := dial(t, addr)
	big := make([]byte, 5<<20) // past smallBody: read in growing chunks
	for i := range big {
		big[i] = byte(i * 7)
	}
	resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Data: big})
	if err != nil || !bytes.Equal(resp.Data, big) {
		t.Fatalf("5 MiB echo: %v", err)
	}
	_, err = c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Data: make([]byte, proto.MaxFrameBytes)})
	if err == nil || !strings.Contains(err.Error(), "exceeds frame limit") || c.Err() != nil {
		t.Fatalf("oversized call: %v (conn %v)", err, c.Err())
	}
	if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing}); err != nil {
		t.Fatal(err)
	}
}

func TestConnClose(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	c := dial(t, addr)
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	c.Close()
	if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close: %v", err)
	}
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatalf("Err after Close: %v", c.Err())
	}
	c.Close()
}

// benchCall measures 4 KiB writes (4 KiB request, small response) with
// `callers` goroutines sharing one connection.
// benchCall sends size-byte writes from callers goroutines; read makes the
// server answer with the same bytes instead (a read of that size).
func benchCall(b *testing.B, callers, size int, read bool) {
	benchCallWith(b, callers, size, read, DialOptions{})
}

// benchCallWith is benchCall with the server and client options o asks:
// encrypted, or over the local socket.
func benchCallWith(b *testing.B, callers, size int, read bool, o DialOptions) {
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		r := &proto.Response{Status: proto.StatusOK, Size: uint64(len(req.Data)), Version: req.Offset}
		if read {
			r.Data = req.Data
		}
		return r
	})
	srv, addr, _ := startServer(b, "127.0.0.1", testKey, h, ServerOptions{Encrypt: o.Encrypt})
	if o.Local {
		serveLocal(b, srv, addr)
	}
	c, err := DialWith(context.Background(), addr, testKey, o)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if c.Local() != o.Local {
		b.Fatalf("connection local %v, want %v", c.Local(), o.Local)
	}
	data := make([]byte, size)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	cpu0 := cpuTime()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			req := &proto.Request{Op: proto.OpWrite, Object: "rbd_data.1.0000000000000001", Data: data}
			for next.Add(1) <= int64(b.N) {
				resp, err := c.Call(context.Background(), req)
				if err != nil || resp.Size != uint64(size) || read && len(resp.Data) != size {
					b.Error(err)
					return
				}
				resp.Release()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// CPU per op (client and server together, both in this process) is
	// what bounds a 2-core machine, and it is less noisy than wall time.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	el := b.Elapsed()
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "µs/op")
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
}

func BenchmarkCall4KiB(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", n), func(b *testing.B) { benchCall(b, n, 4096, false) })
	}
}

// BenchmarkCall1MiB moves 1 MiB each way: the frames of both ends come from
// bufpool, so B/op stays far below the bytes moved.
func BenchmarkCall1MiB(b *testing.B) {
	for _, dir := range []string{"write", "read"} {
		b.Run(dir, func(b *testing.B) { benchCall(b, 4, 1<<20, dir == "read") })
	}
}

// BenchmarkCallEncrypted is BenchmarkCall4KiB and BenchmarkCall1MiB with
// encryption on and off side by side, so its cost is a ratio of one run.
func BenchmarkCallEncrypted(b *testing.B) {
	for _, enc := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "tls"}[enc]
		o := DialOptions{Encrypt: enc}
		b.Run("4KiB/callers=1/"+name, func(b *testing.B) { benchCallWith(b, 1, 4096, false, o) })
		b.Run("4KiB/callers=16/"+name, func(b *testing.B) { benchCallWith(b, 16, 4096, false, o) })
		b.Run("1MiB/write/"+name, func(b *testing.B) { benchCallWith(b, 4, 1<<20, false, o) })
		b.Run("1MiB/read/"+name, func(b *testing.B) { benchCallWith(b, 4, 1<<20, true, o) })
	}
}

// cpuTime returns the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// One encoded request goes out on several connections (a write to every
// replica); each server gets the whole request, and the buffer goes back
// to the pool only after the last frame using it is written.
func TestSharedRequest(t *testing.T) {
	var conns []*Conn
	for range 3 {
		_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
		conns = append(conns, dial(t, addr))
	}
	data := make([]byte, 1<<20+3)
	for i := range data {
		data[i] = byte(i * 13)
	}
	sh, err := Share(&proto.Request{Op: proto.OpWrite, Object: "obj", Offset: 42, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := conns[i%len(conns)].CallShared(context.Background(), sh)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.Message != "obj" || resp.Size != 42 || !bytes.Equal(resp.Data, data) {
				t.Errorf("call %d: the server got another request (object %q, offset %d, %d bytes)", i, resp.Message, resp.Size, len(resp.Data))
			}
			resp.Release()
		}()
	}
	wg.Wait()
	if sh.refs.Load() < 1 {
		t.Fatal("the buffer went back while the creator still held it")
	}
	sh.Release()
	// Each writer drops its reference just after writing, maybe after the
	// response came back.
	for deadline := time.Now().Add(3 * time.Second); sh.refs.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d references left after every call returned and the creator released", sh.refs.Load())
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a call with a released Shared request did not panic")
		}
	}()
	conns[0].CallShared(context.Background(), sh)
}

// A large reply is sent from where its data lies (not copied into the
// frame); every field around the data must still arrive, and the data must
// not go back to the pool before it is written (make test poisons buffers
// handed back, which would show here as wrong bytes).
func TestInPlaceReply(t *testing.T) {
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		n := int(req.Length)
		buf := bufpool.Get(n)
		for i := range n {
			buf[i] = byte(i*31) ^ byte(req.Offset)
		}
		return &proto.Response{Status: proto.StatusOK, Size: req.Offset, Message: "m", Data: buf[:n], Pooled: buf,
			KVs: []proto.KV{{Key: []byte("k"), Value: []byte("v")}}, Names: []string{"a", "b"}, More: true}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)
	inParallel(t, 8, func(g int) error {
		for i := range 20 {
			n := []int{sendInPlaceMin - 1, sendInPlaceMin, 1 << 20, 4<<20 + 5}[i%4]
			off := uint64(g*100 + i)
			resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Offset: off, Length: uint64(n)})
			if err != nil {
				return err
			}
			ok := len(resp.Data) == n && resp.Size == off && resp.Message == "m" && resp.More &&
				len(resp.KVs) == 1 && string(resp.KVs[0].Value) == "v" && strings.Join(resp.Names, ",") == "a,b"
			for j := 0; ok && j < n; j++ {
				ok = resp.Data[j] == byte(j*31)^byte(off)
			}
			resp.Release()
			if !ok {
				return fmt.Errorf("reply of %d bytes to call %d differs from what the handler sent", n, off)
			}
		}
		return nil
	})
}

// inParallel runs fn(0) .. fn(n-1) at once and reports every error.
func inParallel(t *testing.T, n int, fn func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			if err := fn(g); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// BenchmarkChecksum is why frame bodies are summed piece by piece as they
// arrive: crc32c over bytes that have left the CPU cache (4 MiB buffers
// cycling through 256 MiB) against bytes just read (a 128 KiB piece).
func BenchmarkChecksum(b *testing.B) {
	// 4 MiB buffers cycling through 256 MiB: each has left the CPU cache.
	cold := func() [][]byte {
		bufs := make([][]byte, 64)
		for i := range bufs {
			bufs[i] = bytes.Repeat([]byte{byte(i)}, 4<<20)
		}
		return bufs
	}
	b.Run("cold-4MiB", func(b *testing.B) {
		bufs := cold()
		b.SetBytes(4 << 20)
		for i := 0; b.Loop(); i++ {
			crc32.Checksum(bufs[i%len(bufs)], castagnoli)
		}
	})
	b.Run("cold-4MiB-blocks", func(b *testing.B) {
		bufs := cold()
		b.SetBytes(4 << 20)
		for i := 0; b.Loop(); i++ {
			checksum(bufs[i%len(bufs)])
		}
	})
	b.Run("hot-128KiB", func(b *testing.B) {
		buf := bytes.Repeat([]byte{7}, sumPiece)
		b.SetBytes(sumPiece)
		for b.Loop() {
			crc32.Checksum(buf, castagnoli)
		}
	})
	// The body sum as the reader takes it: per 4 KiB block, plus the sum
	// of the blocks' checksums.
	b.Run("hot-128KiB-blocks", func(b *testing.B) {
		buf := bytes.Repeat([]byte{7}, sumPiece)
		b.SetBytes(sumPiece)
		s := bodySum{keep: true, sums: make([]uint32, 0, sumPiece/sumBlock)}
		for b.Loop() {
			s.sums = s.sums[:0]
			s.write(buf)
		}
	})
}

// TestStalledPeerHoldsNoCaller: while a server stops reading (its one
// handler is stuck), the client's socket fills up. Callers must still
// return at their deadline rather than wait in a write, and once the server
// reads again every frame must arrive intact and in the order sent.
func TestStalledPeerHoldsNoCaller(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []uint64
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		<-release
		mu.Lock()
		seen = append(seen, req.Offset)
		mu.Unlock()
		return &proto.Response{Status: proto.StatusOK, Size: uint64(len(req.Data))}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{MaxInFlightPerConn: 1})
	c := dial(t, addr)
	data := make([]byte, 1<<20)
	const n = 48 // far more than the socket buffers hold
	calls := make(chan error, 1)
	go func() {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			_, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Offset: uint64(i), Data: data})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				calls <- fmt.Errorf("call %d to a stalled server: %v, want its deadline", i, err)
				return
			}
		}
		calls <- nil
	}()
	select {
	case err := <-calls:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(n*20*time.Millisecond + 5*time.Second):
		close(release) // so the test's cleanup can end
		t.Fatalf("%d calls of 20 ms each did not end in time: a caller waits on the socket", n)
	}
	close(release)
	resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Offset: n, Data: data})
	if err != nil || resp.Size != uint64(len(data)) {
		t.Fatalf("call after the server resumed: %v %v", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	// A call whose deadline passes before its frame is queued is not sent
	// (on a loaded machine encoding 1 MiB can outlast a short deadline); every frame
	// queued must arrive, once and in order, and the queue must hold them
	// all, so nearly all arrive.
	if len(seen) < n/2 || seen[len(seen)-1] != n {
		t.Fatalf("server saw %d requests, the last sent as %d; want most of %d, ending with %d", len(seen), seen[len(seen)-1], n+1, n)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("requests arrived out of order or twice: %v", seen)
		}
	}
	t.Logf("%d of %d requests sent", len(seen), n+1)
}

// TestRequestBlockSums: a handler gets the crc32c of each whole block of a
// large Data or Txn, taken as the frame arrived; small payloads get none.
// checkBlockSums says what is wrong with the block checksums the rpc
// layer gave a received field b: none below proto.AlignMin, else one per
// whole block, each right.
func checkBlockSums(field string, b []byte, sums []uint32) string {
	if len(b) < proto.AlignMin {
		if sums != nil {
			return fmt.Sprintf("%s of %d bytes got %d block sums", field, len(b), len(sums))
		}
		return ""
	}
	if len(sums) != len(b)/sumBlock {
		return fmt.Sprintf("%s of %d bytes got %d block sums", field, len(b), len(sums))
	}
	for i, s := range sums {
		if want := crc32.Checksum(b[i*sumBlock:(i+1)*sumBlock], castagnoli); s != want {
			return fmt.Sprintf("%s block %d: sum %#x, want %#x", field, i, s, want)
		}
	}
	return ""
}

// TestReplyBlockSums: a client gets the block checksums of a large reply's
// data, taken as the bytes arrived, so a primary can forward what its peers
// sent without reading it again.
func TestReplyBlockSums(t *testing.T) {
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		data := make([]byte, req.Length)
		for i := range data {
			data[i] = byte(i*7 + i>>12)
		}
		return &proto.Response{Status: proto.StatusOK, Data: data}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)
	defer c.Close()
	for _, n := range []uint64{4 << 20, proto.AlignMin + 100, proto.AlignMin - 1, 0} {
		resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Object: "o", Length: n})
		if err != nil {
			t.Fatal(err)
		}
		if msg := checkBlockSums("reply data", resp.Data, resp.DataSums); msg != "" {
			t.Error(msg)
		}
		resp.Release()
	}
}

func TestRequestBlockSums(t *testing.T) {
	check := checkBlockSums
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		msg := check("data", req.Data, req.DataSums) + check("txn", req.Txn, req.TxnSums)
		if msg != "" {
			return &proto.Response{Status: proto.StatusInvalid, Message: msg}
		}
		return &proto.Response{Status: proto.StatusOK}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)
	defer c.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	payload := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	for _, req := range []*proto.Request{
		{Op: proto.OpPut, Object: "big", Data: payload(4 << 20)},
		{Op: proto.OpWrite, Object: "odd", Data: payload(proto.AlignMin + 100)},
		{Op: proto.OpWrite, Object: "small", Data: payload(proto.AlignMin - 1)},
		{Op: proto.OpReplicate, Object: "r", Data: payload(5000), Txn: payload(1 << 20)},
	} {
		resp, err := c.Call(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != proto.StatusOK {
			t.Errorf("%s: %s", req.Object, resp.Message)
		}
	}
}

// TestShareParts: a replicated transaction goes out in parts from where
// they lie, with the checksums the sender already has for its data in the
// frame sum. Replicas get the bytes and their block checksums intact; what
// the parts point into is given back once, after the last frame; a sender
// whose known checksums do not match its bytes is refused by the receiver
// (the frame sum does not match), never taken.
func TestShareParts(t *testing.T) {
	got := make(chan *proto.Request, 4)
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		r := *req
		r.Txn = bytes.Clone(req.Txn)
		got <- &r
		return &proto.Response{Status: proto.StatusOK}
	})
	_, addr, logs := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	// A head of one block, 200 blocks of summed data, an unsummed tail of
	// three blocks and 5 bytes: the shape of a transaction with a write.
	txn := func() ([]byte, []Part) {
		b := bufpool.Get(1<<20 + 3*sumBlock)
		for i := range b {
			b[i] = byte(i * 7)
		}
		sums := make([]uint32, 200)
		for i := range sums {
			off := sumBlock + i*sumBlock
			sums[i] = crc32.Checksum(b[off:off+sumBlock], castagnoli)
		}
		data := b[sumBlock : sumBlock+200*sumBlock]
		return b, []Part{{Bytes: b[:sumBlock]}, {Bytes: data, Sums: sums}, {Bytes: b[sumBlock+len(data) : 204*sumBlock+5]}}
	}

	b, parts := txn()
	want := bytes.Clone(b[:204*sumBlock+5])
	var released atomic.Int32
	sh, err := ShareParts(&proto.Request{Op: proto.OpReplicate, Object: "obj", PGVersion: 7}, parts, func() {
		released.Add(1)
		bufpool.Put(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c := dial(t, addr)
		if resp, err := c.CallShared(context.Background(), sh); err != nil || resp.Status != proto.StatusOK {
			t.Fatalf("CallShared: %v %v", resp, err)
		}
		r := <-got
		if r.Object != "obj" || r.PGVersion != 7 || !bytes.Equal(r.Txn, want) {
			t.Fatalf("replica got another request: %q, version %d, txn equal %v", r.Object, r.PGVersion, bytes.Equal(r.Txn, want))
		}
		if len(r.TxnSums) != len(want)/sumBlock {
			t.Fatalf("replica got %d block checksums for %d bytes", len(r.TxnSums), len(want))
		}
		c.Close()
	}
	if n := released.Load(); n != 0 {
		t.Fatalf("parts given back %d times before Release", n)
	}
	sh.Release()
	if n := released.Load(); n != 1 {
		t.Fatalf("parts given back %d times after the last reference, want once", n)
	}

	b, parts = txn()
	parts[1].Sums[5] ^= 1 // the sender's bytes differ from what it was told
	sh, err = ShareParts(&proto.Request{Op: proto.OpReplicate, Object: "obj"}, parts, func() { bufpool.Put(b) })
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Release()
	c := dial(t, addr)
	defer c.Close()
	if _, err := c.CallShared(context.Background(), sh); !errors.Is(err, ErrClosed) {
		t.Fatalf("a frame whose data does not match its known checksums: %v, want the connection closed", err)
	}
	logs.waitFor(t, "closed connection from", "body sum")
}

// TestShareData: a request's Data goes out in pieces from where they lie
// (a stage of a shard made of chunks of an object), its other fields
// around it, Txn included: the receiver gets the pieces joined, aligned,
// with their block checksums, and the pieces are given back after the
// last frame.
func TestShareData(t *testing.T) {
	got := make(chan *proto.Request, 1)
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		r := *req
		r.Data, r.Txn = bytes.Clone(req.Data), bytes.Clone(req.Txn)
		got <- &r
		return &proto.Response{Status: proto.StatusOK}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	obj := make([]byte, 96*sumBlock)
	for i := range obj {
		obj[i] = byte(i * 13)
	}
	// Over proto.AlignMin in all, so the data lands aligned and summed.
	parts := []Part{{Bytes: obj[:20*sumBlock]}, {Bytes: obj[40*sumBlock : 60*sumBlock]}, {Bytes: obj[80*sumBlock : 80*sumBlock+77]}}
	var want []byte
	for _, p := range parts {
		want = append(want, p.Bytes...)
	}
	var released atomic.Int32
	req := &proto.Request{Op: proto.OpStage, Object: "obj", Key: "token", Limit: 2, Txn: []byte("txn"), SnapSeq: 4}
	sh, err := ShareData(req, parts, func() { released.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	defer c.Close()
	if resp, err := c.CallShared(context.Background(), sh); err != nil || resp.Status != proto.StatusOK {
		t.Fatalf("CallShared: %v %v", resp, err)
	}
	r := <-got
	if r.Op != proto.OpStage || r.Key != "token" || r.Limit != 2 || string(r.Txn) != "txn" || r.SnapSeq != 4 || !bytes.Equal(r.Data, want) {
		t.Fatalf("receiver got another request: %v %q %d %q %d, data equal %v", r.Op, r.Key, r.Limit, r.Txn, r.SnapSeq, bytes.Equal(r.Data, want))
	}
	if len(r.DataSums) != len(want)/sumBlock {
		t.Fatalf("receiver got %d block checksums for %d bytes of data", len(r.DataSums), len(want))
	}
	sh.Release()
	if n := released.Load(); n != 1 {
		t.Fatalf("pieces given back %d times, want once", n)
	}
}

// TestKeptRequestFrame: a handler that keeps its request's frame has it to
// itself after returning; one that does not gets it reused.
func TestKeptRequestFrame(t *testing.T) {
	kept := make(chan *proto.Request, 1)
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		if !bufpool.Contains(req.Frame, req.Data) {
			return &proto.Response{Status: proto.StatusInvalid, Message: "data outside the frame"}
		}
		if req.Object == "keep" {
			req.Kept = true
			kept <- req
		}
		return &proto.Response{Status: proto.StatusOK}
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)
	defer c.Close()
	data := bytes.Repeat([]byte{0x5a}, 1<<20)
	other := bytes.Repeat([]byte{0xa5}, 1<<20)
	for i, name := range []string{"keep", "other", "other"} {
		d := data
		if i > 0 {
			d = other
		}
		resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Object: name, Data: d})
		if err != nil || resp.Status != proto.StatusOK {
			t.Fatalf("%s: %v %v", name, resp, err)
		}
	}
	// Later requests of the same size reused pooled frames, not this one.
	r := <-kept
	if !bytes.Equal(r.Data, data) {
		t.Fatal("a kept request's data changed after its handler returned")
	}
	bufpool.Put(r.Frame)
}

// TestInPlaceReplyKnownSums: a large reply whose data's block checksums
// the handler knows (a read checked them) is summed from them, not from
// the data; a checksum that does not match its data is caught by the
// client, never taken.
func TestInPlaceReplyKnownSums(t *testing.T) {
	data := make([]byte, 1<<20+100)
	for i := range data {
		data[i] = byte(i * 31)
	}
	sums := make([]uint32, len(data)/sumBlock)
	for i := range sums {
		sums[i] = crc32.Checksum(data[i*sumBlock:(i+1)*sumBlock], castagnoli)
	}
	bad := slices.Clone(sums)
	bad[17] ^= 1
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		r := &proto.Response{Status: proto.StatusOK, Data: data, DataSums: sums}
		if req.Object == "bad" {
			r.DataSums = bad
		}
		return r
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{})
	c := dial(t, addr)
	defer c.Close()
	resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Object: "good"})
	if err != nil || !bytes.Equal(resp.Data, data) {
		t.Fatalf("read with known checksums: %v", err)
	}
	resp.Release()
	if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Object: "bad"}); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "body sum") {
		t.Fatalf("a reply whose known checksums do not match its data: %v, want the connection closed", err)
	}
}

func TestCRCAppend32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		crc, v := r.Uint32(), r.Uint32()
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		if got, want := crcAppend32(crc, v), crc32.Update(crc, castagnoli, b[:]); got != want {
			t.Fatalf("crcAppend32(%#x, %#x) = %#x, want %#x", crc, v, got, want)
		}
	}
}

// A connection closed before it sent a byte (a port probe: an OSD checking
// that a peer it suspects is gone) is not logged as refused; a client with
// the wrong key still is.
func TestProbeIsNotLogged(t *testing.T) {
	_, addr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	probesNotLogged(t, addr, logs, DialOptions{})
}

// probesNotLogged probes addr three times (connections closed before a
// byte), then makes a call with the right key and a dial with a wrong one:
// logs must show the wrong key and no probe.
func probesNotLogged(t *testing.T, addr string, logs *logBuf, o DialOptions) {
	t.Helper()
	for range 3 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	c, err := DialWith(context.Background(), addr, testKey, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(context.Background(), &proto.Request{Op: proto.OpPing, Object: "x"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := DialWith(context.Background(), addr, []byte("some other cluster's key!!"), o); !errors.Is(err, ErrAuth) {
		t.Fatalf("Dial with the wrong key: %v", err)
	}
	logs.waitFor(t, "refused connection from", "does not have this cluster's key")
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, line := range logs.lines {
		if strings.Contains(line, "EOF") {
			t.Fatalf("a probe was logged: %s", line)
		}
	}
}
