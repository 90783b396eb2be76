package rpc

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

// TestInlineWrites: a call on an idle connection is written by its caller;
// a frame larger than the socket takes at once is finished by the writer
// goroutine before any other frame, and concurrent calls of every size
// still arrive whole and get their own answers.
func TestInlineWrites(t *testing.T) {
	_, addr, _ := startServer(t, "127.0.0.1", testKey, HandlerFunc(echo), ServerOptions{})
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

	big := make([]byte, 8<<20) // more than a loopback socket takes at once
	for i := range big {
		big[i] = byte(i * 7)
	}
	resp, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Object: "big", Data: big})
	if err != nil || !bytes.Equal(resp.Data, big) {
		t.Fatalf("8 MiB call: err %v, data intact %v", err, err == nil && bytes.Equal(resp.Data, big))
	}
	resp.Release()
	if c.in.rests.Load() == 0 {
		t.Fatal("an 8 MiB frame was written whole without blocking: the writer's part is not tested")
	}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				data := big[:(g*10+i)*4099%len(big)]
				name := fmt.Sprint("g", g, "i", i)
				resp, err := c.Call(ctx, &proto.Request{Op: proto.OpWrite, Object: name, Data: data})
				if err != nil || resp.Message != name || !bytes.Equal(resp.Data, data) {
					t.Errorf("%s: err %v, answer for %q", name, err, resp.Message)
					return
				}
				resp.Release()
			}
		})
	}
	wg.Wait()
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
