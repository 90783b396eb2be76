package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/proto"
)

// recorder relays TCP connections from its own address to target and
// keeps every byte that crossed it, both ways: what a packet capture of
// the network would show.
type recorder struct {
	addr string
	mu   sync.Mutex
	seen bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen.Write(p)
}

func record(t *testing.T, target string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &recorder{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(io.MultiWriter(s, r), c); s.Close() }()
			go func() { io.Copy(io.MultiWriter(c, r), s); c.Close() }()
		}
	}()
	return r
}

// TestEncryptedTrafficIsUnreadable: with encryption on, a request and its
// reply cross the network as TLS records; neither the payload nor the
// object name is readable by whoever captures the traffic. The same
// capture of a plaintext connection shows both, so the check can fail.
func TestEncryptedTrafficIsUnreadable(t *testing.T) {
	secret := bytes.Repeat([]byte("the-tenant's-secret-data "), 200)
	for _, encrypt := range []bool{false, true} {
		_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: encrypt})
		rec := record(t, addr)
		c, err := DialWith(context.Background(), rec.addr, testKey, DialOptions{Encrypt: encrypt})
		if err != nil {
			t.Fatalf("encrypt=%v: %v", encrypt, err)
		}
		for _, size := range []int{len(secret), 100} { // the large frame and the inline-sized one
			resp, err := c.Call(context.Background(), &proto.Request{Op: proto.OpWrite, Object: "volume-of-alice", Data: secret[:size]})
			if err != nil || !bytes.Equal(resp.Data, secret[:size]) || resp.Message != "volume-of-alice" {
				t.Fatalf("encrypt=%v: call: %v", encrypt, err)
			}
		}
		c.Close()
		rec.mu.Lock()
		readable := bytes.Contains(rec.seen.Bytes(), []byte("tenant's-secret")) || bytes.Contains(rec.seen.Bytes(), []byte("volume-of-alice"))
		n := rec.seen.Len()
		rec.mu.Unlock()
		if readable == encrypt {
			t.Fatalf("encrypt=%v: payload readable on the wire: %v (%d bytes captured)", encrypt, readable, n)
		}
	}
}

// TestEncryptSettingsMustMatch: a plaintext client and an encrypting
// server (and the other way round) refuse each other, saying why.
func TestEncryptSettingsMustMatch(t *testing.T) {
	_, tlsAddr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: true, HandshakeTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := Dial(ctx, tlsAddr, testKey); err == nil {
		c.Close()
		t.Fatal("a plaintext client reached an encrypting server")
	}
	logs.waitFor(t, "refused connection", "tls handshake")

	_, plainAddr, plainLogs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
	_, err := DialWith(context.Background(), plainAddr, testKey, DialOptions{Encrypt: true})
	if err == nil || !strings.Contains(err.Error(), "does not encrypt") {
		t.Fatalf("encrypting client to a plaintext server: %v", err)
	}
	_ = plainLogs
}

// TestEncryptedWrongKey: TLS does not stand in for the cluster key.
func TestEncryptedWrongKey(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: true})
	_, err := DialWith(context.Background(), addr, []byte("some other cluster's key!!"), DialOptions{Encrypt: true})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong key over TLS: %v, want ErrAuth", err)
	}
}

// TestRelayCannotReadTraffic: a machine in the middle that terminates TLS
// on both sides and relays the handshake between two holders of the key
// is found out: the proofs cover each TLS session's keying material, which
// differ on its two sessions.
func TestRelayCannotReadTraffic(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: true})
	cfg, err := serverTLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := tls.Dial("tcp", addr, clientTLS)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	_, err = DialWith(context.Background(), ln.Addr().String(), testKey, DialOptions{Encrypt: true})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("through a TLS-terminating relay: %v, want ErrAuth", err)
	}
}

// TestEncryptedProbeIsNotLogged: on an encrypting server too, a connection
// closed before it sent a byte (a port probe, an OSD checking an address
// answers) is not logged; a client with the wrong key still is.
func TestEncryptedProbeIsNotLogged(t *testing.T) {
	_, addr, logs := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{Encrypt: true})
	probesNotLogged(t, addr, logs, DialOptions{Encrypt: true})
}
