package rpc

import (
	"context"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

// serveLocal serves s on the local socket of addr too, as an OSD does.
func serveLocal(t testing.TB, s *Server, addr string) {
	t.Helper()
	ln, err := ListenLocal(addr)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
}

func dialLocalOpt(t *testing.T, addr string, o DialOptions) *Conn {
	t.Helper()
	c, err := DialWith(context.Background(), addr, testKey, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpRead, Object: "o", Offset: 7})
	if err != nil || resp.Message != "o" || resp.Size != 7 {
		t.Fatalf("call: %v %+v", err, resp)
	}
	return c
}

// A client with Local set reaches a daemon of its host over the local
// socket, plain or encrypted; without it, or where the daemon has none, it
// takes TCP.
func TestLocalSocket(t *testing.T) {
	for _, enc := range []bool{false, true} {
		srv, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: enc})
		serveLocal(t, srv, addr)
		if c := dialLocalOpt(t, addr, DialOptions{Encrypt: enc, Local: true}); !c.Local() {
			t.Errorf("encrypt %v: Local dial went over TCP", enc)
		}
		if c := dialLocalOpt(t, addr, DialOptions{Encrypt: enc}); c.Local() {
			t.Errorf("encrypt %v: dial without Local used the local socket", enc)
		}
		if tcp, local := srv.Conns(); tcp != 1 || local != 1 {
			t.Errorf("encrypt %v: server counts %d TCP and %d local connections, want 1 and 1", enc, tcp, local)
		}
	}
	_, tcpOnly, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	if c := dialLocalOpt(t, tcpOnly, DialOptions{Local: true}); c.Local() {
		t.Error("a daemon without a local socket was reached over one")
	}
}

// A local socket held by something without the cluster key (another
// cluster's daemon, a squatter) is refused by the handshake, and the
// client goes on to the address over TCP; the holder logs the refusal.
func TestLocalSocketRefusedFallsBack(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	other, _, logs := startServer(t, "127.0.0.1", []byte("the key of another cluster"), HandlerFunc(echo), ServerOptions{})
	serveLocal(t, other, addr)
	if c := dialLocalOpt(t, addr, DialOptions{Local: true}); c.Local() {
		t.Fatal("the connection stayed on a local socket whose holder lacks the key")
	}
	logs.waitFor(t, "refused connection from a local process")
}

// BenchmarkCallLocal is BenchmarkCall4KiB and BenchmarkCall1MiB over TCP
// and over the local socket side by side, so what the local socket saves
// is a ratio of one run (cpu-µs/op counts both ends).
func BenchmarkCallLocal(b *testing.B) {
	for _, local := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "local"}[local]
		o := DialOptions{Local: local}
		b.Run("4KiB/callers=1/"+name, func(b *testing.B) { benchCallWith(b, 1, 4096, false, o) })
		b.Run("4KiB/callers=16/"+name, func(b *testing.B) { benchCallWith(b, 16, 4096, false, o) })
		b.Run("1MiB/write/"+name, func(b *testing.B) { benchCallWith(b, 4, 1<<20, false, o) })
		b.Run("1MiB/read/"+name, func(b *testing.B) { benchCallWith(b, 4, 1<<20, true, o) })
	}
}
