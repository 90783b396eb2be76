package rpc

import (
	"context"
	"errors"
	"net"
	"runtime"
)

// A daemon on the same host as its peer is reached over a Unix socket as
// well as TCP: a byte through a Unix socket costs each end less CPU than a
// byte through loopback TCP (BenchmarkCallLocal; the baseline's
// stream_local), and on one host every hop of the data path (gateway →
// primary → other copies or shards) is such a byte. The
// socket is Linux's abstract namespace, named after the daemon's TCP
// address (LocalName): nothing to clean up after a crash, and it belongs to
// the network namespace as the address does, so a peer sees it exactly when
// the address is its own host's. The handshake is the same on both, so a
// process that took the name first without the cluster key is refused as
// it would be on TCP, and the dialer falls back to TCP.

// LocalName is the abstract Unix socket name of the daemon whose TCP
// address is addr.
func LocalName(addr string) string { return "@cairn-rpc:" + addr }

// errNoLocal: this platform has no abstract Unix sockets.
var errNoLocal = errors.New("rpc: local sockets need Linux")

// ListenLocal listens on the local socket of the daemon at TCP address
// addr. A Server serves it next to the TCP listener (Serve on each).
func ListenLocal(addr string) (net.Listener, error) {
	if runtime.GOOS != "linux" {
		return nil, errNoLocal
	}
	return net.Listen("unix", LocalName(addr))
}

// Conns counts the connections open to s, by transport: TCP and local
// sockets.
func (s *Server) Conns() (tcp, local int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nc := range s.conns {
		if _, ok := nc.(*net.UnixConn); ok {
			local++
		} else {
			tcp++
		}
	}
	return tcp, local
}

// dialLocal connects to the local socket of addr, if a daemon on this host
// listens on one; an error means none does and TCP is the way.
func dialLocal(ctx context.Context, addr string) (net.Conn, error) {
	if runtime.GOOS != "linux" {
		return nil, errNoLocal
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", LocalName(addr))
}
