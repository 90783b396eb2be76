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

// dialStalling connects to an echo server that runs one request at a time
// and, once stall is set, holds each until release is closed.
func dialStalling(t *testing.T) (c *Conn, stall *atomic.Bool, release chan struct{}) {
	release, stall = make(chan struct{}), new(atomic.Bool)
	h := HandlerFunc(func(ctx context.Context, req *proto.Request) *proto.Response {
		if stall.Load() {
			<-release
		}
		return echo(ctx, req)
	})
	_, addr, _ := startServer(t, "127.0.0.1", testKey, h, ServerOptions{MaxInFlightPerConn: 1})
	return dial(t, addr), stall, release
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// TestInlineWrites: a small call alone on an idle connection is written by
// its caller; calls started while another is in flight go to the writer
// goroutine, which sends them together.
func TestInlineWrites(t *testing.T) {
	c, stall, release := dialStalling(t)
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

	// The server holds the first call; the others start while it is in
	// flight.
	stall.Store(true)
	var wg sync.WaitGroup
	call := func(name string) {
		resp, err := c.Call(ctx, &proto.Request{Op: proto.OpPing, Object: name})
		if err != nil || resp.Message != name {
			t.Errorf("%s: %v %v", name, resp, err)
		}
	}
	wg.Go(func() { call("held") })
	waitFor(t, "the held call written by its caller", func() bool { return c.in.frames.Load() == 21 })
	for i := range 10 {
		wg.Go(func() { call(fmt.Sprint("behind", i)) })
	}
	time.Sleep(10 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := c.in.frames.Load(); n != 21 {
		t.Fatalf("%d calls started behind one in flight were written by their callers, want 0", n-21)
	}
}

// TestInlineRest: a caller whose frame the socket takes only in part leaves
// the rest to the writer goroutine, which finishes it before any other
// frame; every call, of any size, still arrives whole and gets its own
// answer.
func TestInlineRest(t *testing.T) {
	c, stall, release := dialStalling(t)
	// A send buffer far smaller than a frame: a write seldom fits whole.
	if err := c.nc.(*net.TCPConn).SetWriteBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	call := func(name string, data []byte) {
		resp, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Object: name, Data: data})
		if err != nil {
			t.Errorf("%s (%d bytes): %v", name, len(data), err)
			return
		}
		if resp.Message != name || !bytes.Equal(resp.Data, data) {
			t.Errorf("%s: answer for %q with %d bytes, want its own %d", name, resp.Message, len(resp.Data), len(data))
			return
		}
		resp.Release()
	}
	for g := 0; c.in.rests.Load() == 0; g++ {
		if g == 1000 {
			t.Fatal("1000 frames of 60 KiB each went whole into a 4 KiB send buffer: the writer's part is not tested")
		}
		call(fmt.Sprint("call", g), big[:inlineMax-100-g%100])
	}

	// Again with the server holding the call, and frames of every size
	// queued behind it while the writer finishes it. The last call's
	// answer can come back before the writer, done with its rest, has let
	// go of the socket; until it has, the held call would be queued to it
	// instead of written by its caller.
	stall.Store(true)
	waitFor(t, "the writer to let go of the socket", func() bool {
		if !c.in.mu.TryLock() {
			return false
		}
		defer c.in.mu.Unlock()
		return !c.in.hasRest
	})
	rests := c.in.rests.Load()
	var wg sync.WaitGroup
	frames := c.in.frames.Load()
	wg.Go(func() { call("held", big[:inlineMax-100]) })
	waitFor(t, "the held call written by its caller", func() bool { return c.in.frames.Load() > frames })
	for g := range 20 {
		wg.Go(func() { call(fmt.Sprint("after", g), big[:g*len(big)/19]) })
	}
	time.Sleep(10 * time.Millisecond)
	// Megabytes through a 4 KiB buffer would take seconds.
	if err := c.nc.(*net.TCPConn).SetWriteBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	t.Logf("frames written inline %d, finished by the writer %d (%d with calls behind)", c.in.frames.Load(), c.in.rests.Load(), c.in.rests.Load()-rests)
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
