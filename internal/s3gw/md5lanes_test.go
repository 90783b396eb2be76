package s3gw

import (
	"bytes"
	"crypto/md5"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	md5simd "github.com/minio/md5-simd"
)

// A small body is hashed alone as its bytes come in; large bodies wait
// for their group, which runs once it fills the lanes or once any of its
// bodies' stripe is stored; a group of fewer than lanesMinGroup hashes
// alone. Every body's sum is its MD5 whichever way, bytes past a body's
// size are refused, and what is released twice is released once.
func TestMD5LanesGather(t *testing.T) {
	var l md5Lanes
	var laned, alone atomic.Int32
	l.counted = func(how string) {
		map[string]*atomic.Int32{"lanes": &laned, "alone": &alone}[how].Add(1)
	}
	if h, done := l.hash(lanesMinBody - 1); !isAlone(h) {
		t.Fatal("a small body waits for a group")
	} else {
		done()
	}

	full := gatherGroup(t, &l, md5simd.Lanes, false, nil)
	checkGroup(t, "a full group", full, true)
	if laned.Load() != md5simd.Lanes || alone.Load() != 0 {
		t.Fatalf("a full group: %d bodies on lanes and %d alone", laned.Load(), alone.Load())
	}

	laned.Store(0)
	five := gatherGroup(t, &l, 5, false, func(stored []chan struct{}) { close(stored[3]) })
	checkGroup(t, "a group of 5 whose fourth body's stripe is stored", five, true)

	two := gatherGroup(t, &l, 2, false, func(stored []chan struct{}) { close(stored[0]) })
	checkGroup(t, "a group of 2", two, false)

	one := gatherGroup(t, &l, 1, true, nil)
	checkGroup(t, "a body whose stripe is already stored", one, false)
	if laned.Load() != 5 || alone.Load() != 3 {
		t.Fatalf("groups of 5, 2 and 1: %d bodies on lanes and %d alone, want 5 and 3", laned.Load(), alone.Load())
	}
}

type gathered struct {
	body []byte
	h    hash.Hash
	done func()
}

// gatherGroup starts n bodies of different sizes, each gathering with a
// stored channel of its own (closed at once if storedFirst), and writes
// each in pieces once its group runs. With act, it waits until all n have
// joined the group and then calls act with their stored channels.
func gatherGroup(t *testing.T, l *md5Lanes, n int, storedFirst bool, act func([]chan struct{})) []gathered {
	t.Helper()
	gs, stored := make([]gathered, n), make([]chan struct{}, n)
	var wg sync.WaitGroup
	for i := range gs {
		gs[i].body = bytes.Repeat([]byte{byte(i), 7}, lanesMinBody/2+i*4097)
		gs[i].h, gs[i].done = l.hash(uint64(len(gs[i].body)))
		stored[i] = make(chan struct{})
		if storedFirst {
			close(stored[i])
		}
		wg.Add(1)
		go func(g *gathered, stored chan struct{}) {
			defer wg.Done()
			g.h.(gatherer).gather(stored)
			for p := g.body; len(p) > 0; p = p[min(len(p), 100_000):] {
				if _, err := g.h.Write(p[:min(len(p), 100_000)]); err != nil {
					t.Errorf("%v", err)
				}
			}
		}(&gs[i], stored[i])
	}
	if act != nil {
		waitJoined(t, l, n)
		act(stored)
	}
	wg.Wait()
	return gs
}

// waitJoined waits until the group bodies join holds n of them.
func waitJoined(t *testing.T, l *md5Lanes, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		joined := 0
		if l.next != nil {
			joined = l.next.size
		}
		l.mu.Unlock()
		if joined == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bodies joined the group, want %d", joined, n)
		}
	}
}

func checkGroup(t *testing.T, what string, gs []gathered, lanes bool) {
	t.Helper()
	for i, g := range gs {
		if want := md5.Sum(g.body); !bytes.Equal(g.h.Sum(nil), want[:]) {
			t.Errorf("%s: body %d: wrong MD5", what, i)
		}
		if isAlone(g.h) == lanes {
			t.Errorf("%s: body %d hashed on a lane: %v, want %v", what, i, !isAlone(g.h), lanes)
		}
		if _, err := g.h.Write([]byte{1}); err == nil {
			t.Errorf("%s: body %d: a byte past its size was taken", what, i)
		}
		g.done()
		g.done()
	}
}

// isAlone reports whether h is crypto/md5's (which can marshal its state).
func isAlone(h hash.Hash) bool {
	if s, ok := h.(*sizedMD5); ok {
		h = s.Hash
	}
	_, ok := h.(encoding.BinaryMarshaler)
	return ok
}

// Large PUTs at once, of one stripe and of several, each get the ETag of
// their own body whichever way their MD5s were gathered.
func TestConcurrentLargePutsETags(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bkt")
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := randBytes(lanesMinBody+i*(stripeSize/3)+i, uint64(i))
			key := fmt.Sprintf("k%d", i)
			out := env.put("bkt", key, data)
			sum := md5.Sum(data)
			if got := strings.Trim(*out.ETag, `"`); got != hex.EncodeToString(sum[:]) {
				t.Errorf("%s (%d bytes): ETag %s, want its MD5", key, len(data), got)
			}
			if got := env.get("bkt", key); !bytes.Equal(got, data) {
				t.Errorf("%s: GET differs", key)
			}
		}()
	}
	wg.Wait()
}
