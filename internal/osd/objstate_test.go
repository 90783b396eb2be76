package osd

import (
	"bytes"
	"testing"
)

func TestObjStateRoundTrip(t *testing.T) {
	for _, o := range []objState{
		{},
		{Ver: eversion{7, 123}, Size: 4096, Meta: 0xdead, Data: 0xbeef, Deep: true},
		{Ver: eversion{1, 2}, Size: 1, Deep: true, Corrupt: true},
	} {
		got, err := decodeObjState(o.encode())
		if err != nil || got != o {
			t.Fatalf("round trip of %+v: got %+v, %v", o, got, err)
		}
	}
	if _, err := decodeObjState(append(objState{}.encode(), 0)); err == nil {
		t.Fatal("a state with a trailing byte decoded")
	}
}

// Copies compare equal only when everything measured on both agrees, and a
// copy that failed its checksums never equals anything.
func TestSameCopy(t *testing.T) {
	a := objState{Ver: eversion{2, 9}, Size: 10, Meta: 1}
	b := a
	if !sameCopy(a, b) {
		t.Fatal("identical light states differ")
	}
	b.Deep, b.Data = true, 5
	if !sameCopy(a, b) {
		t.Fatal("a light and a deep state of the same copy differ")
	}
	a.Deep, a.Data = true, 6
	if sameCopy(a, b) {
		t.Fatal("different data digests compare equal")
	}
	a.Data = 5
	a.Corrupt = true
	if sameCopy(a, b) || sameCopy(a, a) {
		t.Fatal("a corrupt copy compares equal")
	}
	if !(eversion{1, 9}).less(eversion{2, 1}) || (eversion{2, 1}).less(eversion{2, 1}) {
		t.Fatal("eversions order by epoch, then version")
	}
}

func FuzzDecodeObjState(f *testing.F) {
	f.Add(objState{Ver: eversion{3, 4}, Size: 5, Deep: true}.encode())
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := decodeObjState(b)
		if err != nil {
			return
		}
		if !bytes.Equal(o.encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", o.encode(), b)
		}
	})
}

func FuzzDecodeEversion(f *testing.F) {
	f.Add(eversion{9, 10}.encode())
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok := decodeEversion(b)
		if ok && !bytes.Equal(e.encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", e.encode(), b)
		}
	})
}
