package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNBDHandshakeTimeoutAndConnectionLimit runs `cairn nbd` with a short
// handshake timeout and a limit of two connections: a client that never
// finishes the handshake is disconnected after the timeout; a third
// connection is refused at once with a log line saying why; a client past
// the handshake stays connected while idle.
func TestNBDHandshakeTimeoutAndConnectionLimit(t *testing.T) {
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	if out, err := c.cli(nil, "volume", "create", "default/v", "--size", "16M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1))
	logPath := filepath.Join(t.TempDir(), "nbd.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	srv := exec.Command(cairnBin, "--conf", c.conf, "nbd", "--listen", addr,
		"--handshake-timeout", "2s", "--max-connections", "2")
	srv.Stdout, srv.Stderr = lf, lf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	c.extra = append(c.extra, srv)
	logs := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	var first net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if first, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cairn nbd does not listen on %s: %v\n%s", addr, err, logs())
		}
	}
	defer first.Close()
	greeting := func(conn net.Conn) error {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 18)
		if _, err := io.ReadFull(conn, b); err != nil {
			return err
		}
		if !bytes.HasPrefix(b, []byte("NBDMAGIC")) {
			return fmt.Errorf("greeting %q", b)
		}
		return nil
	}
	if err := greeting(first); err != nil {
		t.Fatalf("first connection: %v\n%s", err, logs())
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := greeting(second); err != nil {
		t.Fatalf("second connection: %v", err)
	}

	// A third is over the limit: closed without a greeting, and logged.
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := greeting(third); err == nil {
		t.Errorf("a third connection was greeted with --max-connections 2")
	}
	time.Sleep(200 * time.Millisecond)
	if l := logs(); !strings.Contains(l, "refusing") || !strings.Contains(l, "--max-connections") {
		t.Errorf("the refusal is not logged with what to change:\n%s", l)
	}

	// The first two never go on with the handshake: both are closed after
	// the timeout (2 s), well before the 5 s read deadline.
	t0 := time.Now()
	first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := first.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection idle in the handshake: read %d bytes, %v after %v; want EOF after about 2 s", n, err, time.Since(t0))
	}
	if d := time.Since(t0); d > 4*time.Second {
		t.Errorf("the stalled handshake was closed after %v; want about 2 s", d)
	}
	if l := logs(); !strings.Contains(l, "handshake") {
		t.Errorf("the timed-out handshake is not logged:\n%s", l)
	}

	// Their slots are free again, and a client past the handshake may
	// stay idle for longer than the handshake timeout.
	if _, err := exec.LookPath("qemu-io"); err == nil {
		out, err := exec.Command("qemu-io", "-f", "raw", "-c", "sleep 3000", "-c", "read 0 4096",
			fmt.Sprintf("nbd://%s/default/v", addr)).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "read 4096/4096 bytes") {
			t.Errorf("a client idle for 3 s after its handshake: %v\n%s\n%s", err, out, logs())
		}
	}
}
