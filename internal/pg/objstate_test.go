package pg

import (
	"bytes"
	"testing"
)

func TestObjStateRoundTrip(t *testing.T) {
	for _, o := range []ObjState{
		{},
		{Ver: EVersion{7, 123}, Size: 4096, Meta: 0xdead, Data: 0xbeef, Deep: true},
		{Ver: EVersion{1, 2}, Size: 1, Deep: true, Corrupt: true},
		{Ver: EVersion{3, 5}, Size: 7, Prev: EVersion{3, 4}, CanRollBack: true},
		{Ver: EVersion{3, 5}, CanRollBack: true},
		{Ver: EVersion{3, 6}, Prev: EVersion{3, 5}, CanRollBack: true, Tombstone: true},
		{Ver: EVersion{3, 7}, Tombstone: true},
		{Ver: EVersion{3, 8}, Size: 3, Deep: true, Data: 4, Held: []PosVer{{1, EVersion{3, 5}}}},
		{Ver: EVersion{3, 9}, Prev: EVersion{3, 8}, CanRollBack: true, Held: []PosVer{{0, EVersion{3, 8}}}, PrevHeld: []PosVer{{1, EVersion{3, 5}}}},
	} {
		got, err := DecodeObjState(o.Encode())
		if err != nil || !got.Equal(o) {
			t.Fatalf("round trip of %+v: got %+v, %v", o, got, err)
		}
	}
	if _, err := DecodeObjState(append(ObjState{}.Encode(), 0)); err == nil {
		t.Fatal("a state with a trailing byte decoded")
	}
	// Format 2 without its flags is not canonical: format 1 says it.
	b := ObjState{CanRollBack: true}.Encode()
	b[41] = 0
	if _, err := DecodeObjState(b); err == nil {
		t.Fatal("format 2 without the rollback and tombstone flags decoded")
	}
	b = ObjState{Tombstone: true}.Encode()
	b[50] = 1 // a previous version without rollback
	if _, err := DecodeObjState(b); err == nil {
		t.Fatal("a previous version without rollback decoded")
	}
	b = ObjState{Ver: EVersion{3, 8}, Held: []PosVer{{1, EVersion{3, 5}}}}.Encode()
	if _, err := DecodeObjState(append(b[:len(b)-1], appendHeld(nil, []PosVer{{0, EVersion{3, 1}}})...)); err == nil {
		t.Fatal("positions held before a version without rollback decoded")
	}
	if _, err := DecodeObjState(append(b[:objStateLen2], 0, 0)); err == nil {
		t.Fatal("format 3 naming no position decoded")
	}
}

// Copies compare equal only when everything measured on both agrees, and a
// copy that failed its checksums never equals anything.
func TestSameCopy(t *testing.T) {
	a := ObjState{Ver: EVersion{2, 9}, Size: 10, Meta: 1}
	b := a
	if !SameCopy(a, b) {
		t.Fatal("identical light states differ")
	}
	b.Deep, b.Data = true, 5
	if !SameCopy(a, b) {
		t.Fatal("a light and a deep state of the same copy differ")
	}
	a.Deep, a.Data = true, 6
	if SameCopy(a, b) {
		t.Fatal("different data digests compare equal")
	}
	a.Data = 5
	a.Corrupt = true
	if SameCopy(a, b) || SameCopy(a, a) {
		t.Fatal("a corrupt copy compares equal")
	}
	if !(EVersion{1, 9}).Less(EVersion{2, 1}) || (EVersion{2, 1}).Less(EVersion{2, 1}) {
		t.Fatal("eversions order by epoch, then version")
	}
}

func FuzzDecodeObjState(f *testing.F) {
	f.Add(ObjState{Ver: EVersion{3, 4}, Size: 5, Deep: true}.Encode())
	f.Add(ObjState{Ver: EVersion{3, 4}, Prev: EVersion{3, 2}, CanRollBack: true}.Encode())
	f.Add([]byte{1, 2, 3})
	f.Add(ObjState{Ver: EVersion{3, 9}, Prev: EVersion{3, 8}, CanRollBack: true, Held: []PosVer{{0, EVersion{3, 8}}}, PrevHeld: []PosVer{{1, EVersion{3, 5}}}}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeObjState(b)
		if err != nil {
			return
		}
		if !bytes.Equal(o.Encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", o.Encode(), b)
		}
	})
}

func FuzzDecodeEversion(f *testing.F) {
	f.Add(EVersion{9, 10}.Encode())
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok := DecodeEVersion(b)
		if ok && !bytes.Equal(e.Encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", e.Encode(), b)
		}
	})
}
