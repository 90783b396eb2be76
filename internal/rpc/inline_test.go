package rpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// TestInlinePartialWrite: frames are written inline until the socket takes
// one only in part. Then nothing more is written inline, and the writer's
// flushRest sends exactly what is left: the peer reads every frame, whole
// and in order, and every reference to the request is given back.
func TestInlinePartialWrite(t *testing.T) {
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
	peer := <-accepted
	defer peer.Close()

	w := newInlineWriter(c)
	data := make([]byte, 60<<10)
	for i := range data {
		data[i] = byte(i * 13)
	}
	sh, err := Share(&proto.Request{Op: proto.OpWrite, Object: "obj", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for id := uint64(1); !w.hasRest; id++ {
		if id > 10000 {
			t.Fatal("600 MB went into a socket nobody reads without filling it")
		}
		sh.ref()
		f := sharedFrame(sh, kindRequest, id)
		var a [8][]byte
		for _, p := range f.parts(a[:0]) {
			want = append(want, p...)
		}
		if took, err := w.send(f); !took || err != nil {
			t.Fatalf("frame %d on an idle socket: taken %v, err %v", id, took, err)
		}
	}
	sh.ref()
	extra := sharedFrame(sh, kindRequest, 0)
	if took, _ := w.send(extra); took {
		t.Fatal("a frame was written inline while another was half written")
	}
	extra.release()

	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	w.mu.Lock()
	err = w.flushRest(c)
	w.mu.Unlock()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, want the %d of %d whole frames", len(b), len(want), w.frames.Load())
	}
	sh.Release()
	if n := sh.refs.Load(); n != 0 {
		t.Fatalf("%d references to the request left", n)
	}
}
