package osd

import (
	"bytes"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

func TestLogEntryRoundTrip(t *testing.T) {
	e := logEntry{Op: proto.OpWrite, Epoch: 77, Object: "vol/0001"}
	got, err := decodeLogEntry(e.encode())
	if err != nil || got != e {
		t.Fatalf("round trip: got %+v, %v; want %+v", got, err, e)
	}
	if bytes.Compare(logKey(255), logKey(256)) >= 0 {
		t.Fatal("log keys do not sort by version")
	}
}

func FuzzDecodeLogEntry(f *testing.F) {
	f.Add((&logEntry{Op: proto.OpPut, Epoch: 3, Object: "a"}).encode())
	f.Add([]byte{1, 2, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeLogEntry(b)
		if err != nil {
			return
		}
		if !bytes.Equal(e.encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", e.encode(), b)
		}
	})
}
