package volume

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func testStream(t testing.TB) []byte {
	var buf bytes.Buffer
	sw, err := newStreamWriter(&buf, StreamHeader{Size: 64 << 20, ObjectSize: 4 << 20, ToSnap: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, off := range []uint64{0, 4096, 5 << 20, 63 << 20} {
		data := make([]byte, 1+r.IntN(9000))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		if err := sw.data(off, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.record(recZero, 8<<20, nil, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := sw.end(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll checks a whole stream, as import does before it reports success.
func readAll(b []byte) (int, error) {
	sr, err := newStreamReader(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	for n := 0; ; n++ {
		rec, err := sr.next()
		if err != nil {
			return n, err
		}
		if rec.typ == recEnd {
			return n, nil
		}
	}
}

func TestStreamRoundTrip(t *testing.T) {
	b := testStream(t)
	n, err := readAll(b)
	if err != nil || n != 5 {
		t.Fatalf("read back %d records: %v", n, err)
	}
	sr, _ := newStreamReader(bytes.NewReader(b))
	if sr.Header.Size != 64<<20 || sr.Header.ObjectSize != 4<<20 || sr.Header.ToSnap != "s1" || sr.Header.FromSnap != "" {
		t.Fatalf("header %+v", sr.Header)
	}
}

// A flipped byte anywhere (sampled densely) and every truncation is refused.
func TestStreamDamageIsRefused(t *testing.T) {
	b := testStream(t)
	for i := 0; i < len(b); i += 1 + i%7 {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		if _, err := readAll(c); err == nil {
			t.Fatalf("a flipped byte at %d of %d went unnoticed", i, len(b))
		}
	}
	for _, n := range []int{0, 7, 40, len(b) / 2, len(b) - 1} {
		if _, err := readAll(b[:n]); !errors.Is(err, ErrBadStream) {
			t.Fatalf("a stream cut to %d of %d bytes: %v", n, len(b), err)
		}
	}
}

func FuzzStreamReader(f *testing.F) {
	f.Add(testStream(f))
	f.Add([]byte("CAIRNVOL"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := newStreamReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			rec, err := sr.next()
			if err != nil || rec.typ == recEnd {
				return
			}
			if rec.offset+uint64(rec.length) > sr.Header.Size {
				t.Fatalf("record past the end accepted: %d+%d > %d", rec.offset, rec.length, sr.Header.Size)
			}
		}
	})
}
