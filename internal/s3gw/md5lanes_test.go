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

// A small body is hashed alone as its bytes come in. Large bodies wait
// for their group, which runs once it fills the lanes, once any of its
// bodies' stripe is stored, or once it holds every large body in flight;
// a group of fewer than lanesMinGroup hashes alone. Every body's sum is
// its MD5 whichever way, bytes past a body's size are refused, and what
// is released twice is released once.
func TestMD5LanesGather(t *testing.T) {
	var l md5Lanes
	var laned, alone atomic.Int32
	l.counted = func(how string) {
		map[string]*atomic.Int32{"lanes": &laned, "alone": &alone}[how].Add(1)
	}
	counts := func(what string, wantLaned, wantAlone int32) {
		t.Helper()
		if laned.Load() != wantLaned || alone.Load() != wantAlone {
			t.Fatalf("%s: %d bodies on lanes and %d alone, want %d and %d", what, laned.Load(), alone.Load(), wantLaned, wantAlone)
		}
		laned.Store(0)
		alone.Store(0)
	}
	if h, done := l.hash(lanesMinBody - 1); !isAlone(h) {
		t.Fatal("a small body waits for a group")
	} else {
		done()
	}
	// A body still being read keeps the others' group waiting.
	_, outsiderDone := l.hash(lanesMinBody)

	checkGroup(t, "a full group", gatherGroup(t, &l, md5simd.Lanes, false, nil), true)
	counts("a full group", md5simd.Lanes, 0)

	five := gatherGroup(t, &l, 5, false, func(stored []chan struct{}) { close(stored[3]) })
	checkGroup(t, "a group of 5 whose fourth body's stripe is stored", five, true)
	counts("a group of 5", 5, 0)

	two := gatherGroup(t, &l, 2, false, func(stored []chan struct{}) { close(stored[0]) })
	checkGroup(t, "a group of 2", two, false)
	counts("a group of 2", 0, 2)

	three := gatherGroup(t, &l, 3, false, func([]chan struct{}) { outsiderDone(); outsiderDone() })
	checkGroup(t, "a group of 3 once the body outside it ended", three, true)
	counts("a group of 3", 3, 0)

	checkGroup(t, "4 bodies, every one in flight", gatherGroup(t, &l, 4, false, nil), true)
	counts("4 bodies, every one in flight", 4, 0)
	checkGroup(t, "a lone body", gatherGroup(t, &l, 1, false, nil), false)
	checkGroup(t, "a body whose stripe is already stored", gatherGroup(t, &l, 1, true, nil), false)
	counts("lone bodies", 0, 2)
	if l.inFlight != 0 || l.next != nil {
		t.Fatalf("%d large bodies in flight and a group of %v left once all ended", l.inFlight, l.next)
	}
	// 28 bodies on lanes, one group at a time: each group reused the
	// lanes of the one before (md5-simd never forgets a lane it opened).
	if l.opened != md5simd.Lanes || len(l.free) != l.opened {
		t.Fatalf("%d lanes opened, %d free; want %d, all free", l.opened, len(l.free), md5simd.Lanes)
	}
	var taken []md5simd.Hasher
	for h := l.lane(); h != nil; h = l.lane() {
		taken = append(taken, h)
	}
	if len(taken) != lanesMax {
		t.Fatalf("%d lanes could be taken, want %d", len(taken), lanesMax)
	}
	checkGroup(t, "bodies while every lane is in use", gatherGroup(t, &l, 4, false, nil), false)
	counts("bodies while every lane is in use", 0, 4)
	for _, h := range taken {
		l.freeLane(h)
	}
}

type gathered struct {
	body []byte
	h    hash.Hash
	done func()
}

// gatherGroup starts n bodies of different sizes (all in flight before
// any gathers), each gathering with a stored channel of its own (closed
// at once if storedFirst), and writes
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
	}
	for i := range gs {
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
