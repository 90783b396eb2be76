package proto

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleShardEntries() []ShardEntry {
	return []ShardEntry{
		{Object: "a", Ver: [2]uint64{3, 7}},
		{Object: "photos/2026/b.jpg", Ver: [2]uint64{4, 9}, To: [2]uint64{3, 7}},
	}
}

func TestShardEntries(t *testing.T) {
	for _, es := range [][]ShardEntry{{}, sampleShardEntries()} {
		got, err := DecodeShardEntries(AppendShardEntries(nil, es))
		if err != nil || !reflect.DeepEqual(got, es) {
			t.Fatalf("round trip of %+v: %+v, %v", es, got, err)
		}
	}
	good := AppendShardEntries(nil, sampleShardEntries())
	many := make([]ShardEntry, MaxShardEntries+1)
	for i := range many {
		many[i].Object = "o"
	}
	for _, bad := range [][]byte{
		nil, {2, 0}, good[:len(good)-1], append(good, 0),
		AppendShardEntries(nil, []ShardEntry{{Object: ""}}),
		AppendShardEntries(nil, []ShardEntry{{Object: "a\x00b"}}),
		AppendShardEntries(nil, []ShardEntry{{Object: strings.Repeat("x", MaxObjectNameLen+1)}}),
		AppendShardEntries(nil, many),
	} {
		if _, err := DecodeShardEntries(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeShardEntries(%.40x): %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzDecodeShardEntries: the entries come from the network; anything
// accepted is canonical.
func FuzzDecodeShardEntries(f *testing.F) {
	f.Add(AppendShardEntries(nil, sampleShardEntries()))
	f.Add(AppendShardEntries(nil, nil))
	f.Add([]byte{ShardEntriesVersion, 0x80, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := DecodeShardEntries(b)
		if err != nil {
			return
		}
		if enc := AppendShardEntries(nil, es); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
	})
}
