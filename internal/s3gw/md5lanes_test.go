package s3gw

import (
	"bytes"
	"crypto/md5"
	"encoding"
	"hash"
	"sync"
	"testing"
)

// md5Lanes hashes alone until lanesMinInFlight large bodies are in
// flight, then on the lanes; every body's sum is its MD5 either way, a
// body stops counting as in flight with its last byte (before its request
// ends), and what is released twice is released once.
func TestMD5Lanes(t *testing.T) {
	var l md5Lanes
	if h, done := l.hash(lanesMinBody - 1); !alone(h) || l.inFlight.Load() != 0 {
		t.Fatal("a small body shares the lanes or counts as in flight")
	} else {
		done()
	}
	const n = 2 * lanesMinInFlight
	hs, laned := make([]hashDone, n), 0
	bodies := make([][]byte, n)
	for i := range hs {
		bodies[i] = bytes.Repeat([]byte{byte(i), 7}, 1<<19+i*4097)
		hs[i].h, hs[i].done = l.hash(uint64(len(bodies[i])))
		if !alone(hs[i].h) {
			laned++
		}
	}
	if want := n - lanesMinInFlight + 1; laned != want {
		t.Fatalf("%d of %d bodies in flight at once took a lane, want %d", laned, n, want)
	}
	var wg sync.WaitGroup
	for i := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bodies[i]
			for p := body; len(p) > 0; p = p[min(len(p), 100_000):] {
				if _, err := hs[i].h.Write(p[:min(len(p), 100_000)]); err != nil {
					t.Errorf("body %d: %v", i, err)
				}
			}
			if want := md5.Sum(body); !bytes.Equal(hs[i].h.Sum(nil), want[:]) {
				t.Errorf("body %d: wrong MD5 (alone: %v)", i, alone(hs[i].h))
			}
			if _, err := hs[i].h.Write([]byte{1}); err == nil {
				t.Errorf("body %d: a byte past its size was taken", i)
			}
		}()
	}
	wg.Wait()
	if l.inFlight.Load() != 0 {
		t.Fatalf("%d bodies still counted in flight once all their bytes are in", l.inFlight.Load())
	}
	for i := range hs {
		hs[i].done()
		hs[i].done()
	}
	if l.inFlight.Load() != 0 {
		t.Fatalf("%d bodies counted in flight after their requests ended", l.inFlight.Load())
	}
	short, done := l.hash(lanesMinBody) // a body cut short
	short.Write(make([]byte, 10))
	if l.inFlight.Load() != 1 {
		t.Fatal("a body not yet read whole is not counted in flight")
	}
	done()
	if l.inFlight.Load() != 0 {
		t.Fatal("a body cut short still counts in flight once its request ended")
	}
}

type hashDone struct {
	h    hash.Hash
	done func()
}

// alone reports whether h is crypto/md5's (which can marshal its state).
func alone(h hash.Hash) bool {
	if s, ok := h.(*sizedMD5); ok {
		h = s.Hash
	}
	_, ok := h.(encoding.BinaryMarshaler)
	return ok
}
