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
// flight, then on the lanes; every body's sum is its MD5 either way, and
// the count of bodies in flight goes back to zero.
func TestMD5Lanes(t *testing.T) {
	var l md5Lanes
	if h, done := l.hash(lanesMinBody - 1); !alone(h) || l.inFlight.Load() != 0 {
		t.Fatal("a small body shares the lanes or counts as in flight")
	} else {
		done()
	}
	const n = 2 * lanesMinInFlight
	hs, laned := make([]hashDone, n), 0
	for i := range hs {
		hs[i].h, hs[i].done = l.hash(4 << 20)
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
			body := bytes.Repeat([]byte{byte(i), 7}, 1<<20+i*4097)
			for p := body; len(p) > 0; p = p[min(len(p), 100_000):] {
				hs[i].h.Write(p[:min(len(p), 100_000)])
			}
			if want := md5.Sum(body); !bytes.Equal(hs[i].h.Sum(nil), want[:]) {
				t.Errorf("body %d: wrong MD5 (alone: %v)", i, alone(hs[i].h))
			}
			hs[i].done()
		}()
	}
	wg.Wait()
	if l.inFlight.Load() != 0 {
		t.Fatalf("%d bodies still counted in flight", l.inFlight.Load())
	}
}

type hashDone struct {
	h    hash.Hash
	done func()
}

// alone reports whether h is crypto/md5's (which can marshal its state).
func alone(h any) bool { _, ok := h.(encoding.BinaryMarshaler); return ok }
