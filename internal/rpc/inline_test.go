package rpc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/proto"
)

// TestInlineWrites: a small call on an idle connection is written by its
// caller. When the socket does not take a frame whole, the writer goroutine
// finishes it before any other frame, and every call, of any size, still
// arrives whole and gets its own answer.
func TestInlineWrites(t *testing.T) {
	release := make(chan struct{})
	var stall atomic.Bool
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		if stall.Load() {
			<-release
		}
		return echo(ctx, req)
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{MaxInFlightPerConn: 1})
	c := dial(t, addr)
	ctx := context.Background()
	for i := range 20 {
		resp, err := c.Call(ctx, &proto.Request{Op: proto.OpPing, Object: fmt.Sprint("ping", i)})
		if err != nil || resp.Message != fmt.Sprint("ping", i) {
			t.Fatalf("call %d: %v %v", i, resp, err)
		}
	}
	if n := c.in.frames.Load(); n != 20 {
		t.Fatalf("%d of 20 calls one after another were written by their callers", n)
	}

	// The server stops reading. Calls start one at a time, so the writer
	// goroutine is idle when each comes: the callers write, until one
	// finds the socket too full to take its frame whole.
	stall.Store(true)
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	var wg sync.WaitGroup
	for g := 0; g < 1000 && c.in.rests.Load() == 0; g++ {
		wg.Go(func() {
			data := big[:inlineMax-100-g%100]
			name := fmt.Sprint("call", g)
			resp, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Object: name, Data: data})
			if err != nil || resp.Message != name || !bytes.Equal(resp.Data, data) {
				t.Errorf("%s: err %v, answer for %q", name, err, resp.Message)
				return
			}
			resp.Release()
		})
		time.Sleep(200 * time.Microsecond)
	}
	// Frames queued behind the half-written one, of every size.
	for g := range 20 {
		wg.Go(func() {
			data := big[:g*len(big)/19]
			resp, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Object: "after", Data: data})
			if err != nil || !bytes.Equal(resp.Data, data) {
				t.Errorf("call after: %v", err)
			}
		})
	}
	close(release)
	wg.Wait()
	if c.in.rests.Load() == 0 {
		t.Fatal("no frame was left half written: the writer's part is not tested")
	}
	t.Logf("frames written inline %d, finished by the writer %d", c.in.frames.Load(), c.in.rests.Load())
}

func TestSkipBytes(t *testing.T) {
	parts := func() [][]byte { return [][]byte{[]byte("abc"), nil, []byte("de"), []byte("f")} }
	for n, want := range []string{"abcdef", "bcdef", "cdef", "def", "ef", "f", ""} {
		var got []byte
		for _, p := range skipBytes(parts(), n) {
			got = append(got, p...)
		}
		if string(got) != want {
			t.Errorf("skip %d: %q, want %q", n, got, want)
		}
	}
	if got := skipBytes(parts(), 6); len(got) != 0 {
		t.Errorf("skip all: %q left", got)
	}
}

// TestWriteNowLeavesParts: a partial write must not shorten the caller's
// parts, or the caller would count a half-written frame as whole.
func TestWriteNowLeavesParts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	defer peer.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<20) // more than the socket takes: the write stops short
	parts := [][]byte{big[:100], big[100:]}
	n, err := writeNow(raw, parts)
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("wrote %d of %d bytes (err %v); want a partial write", n, len(big), err)
	}
	if partsLen(parts) != len(big) || len(parts[0]) != 100 {
		t.Fatalf("the caller's parts changed: %d bytes in %d parts", partsLen(parts), len(parts))
	}
}
