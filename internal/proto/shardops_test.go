package proto

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

func sampleShardEntries() []ShardEntry {
	return []ShardEntry{
		{Object: "a", Ver: [2]uint64{3, 7}},
		{Object: "photos/2026/b.jpg", Ver: [2]uint64{4, 9}, To: [2]uint64{3, 7}},
		{Object: "vol.1.0000000000000003\x00c00000000000000a2", Ver: [2]uint64{4, 10}}, // a snapshot clone
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
		AppendShardEntries(nil, []ShardEntry{{Object: "\x00c0000000000000001"}}),
		AppendShardEntries(nil, []ShardEntry{{Object: "a\x00c000000000000001"}}),
		AppendShardEntries(nil, []ShardEntry{{Object: "a\x00c000000000000001G"}}),
		AppendShardEntries(nil, []ShardEntry{{Object: "a\x00r0000000000000001"}}),
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

func samplePGShardEntries() []PGShardEntries {
	return []PGShardEntries{
		{PG: clustermap.PGID{Pool: 4, Seed: 0x1f}, Entries: sampleShardEntries()},
		{PG: clustermap.PGID{Pool: 5, Seed: 0}, Entries: []ShardEntry{{Object: "c", Ver: [2]uint64{1, 2}}}},
		{PG: clustermap.PGID{Pool: 5, Seed: 1}, Entries: []ShardEntry{}},
	}
}

func TestPGShardEntries(t *testing.T) {
	for _, gs := range [][]PGShardEntries{{}, samplePGShardEntries()} {
		got, err := DecodePGShardEntries(AppendPGShardEntries(nil, gs))
		if err != nil || !reflect.DeepEqual(got, gs) {
			t.Fatalf("round trip of %+v: %+v, %v", gs, got, err)
		}
	}
	good := AppendPGShardEntries(nil, samplePGShardEntries())
	half := make([]ShardEntry, MaxShardEntries/2+1)
	for i := range half {
		half[i].Object = "o"
	}
	over := []PGShardEntries{{Entries: half}, {Entries: half}} // each within the bound, not both
	for _, bad := range [][]byte{
		nil, {2, 0}, good[:len(good)-1], append(good, 0),
		AppendPGShardEntries(nil, []PGShardEntries{{Entries: []ShardEntry{{Object: "a\x00b"}}}}),
		AppendPGShardEntries(nil, over),
		{ShardEntriesVersion, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0}, // a pool past 32 bits
	} {
		if _, err := DecodePGShardEntries(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodePGShardEntries(%.40x): %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzDecodePGShardEntries: a trim batch comes from the network; anything
// accepted is canonical.
func FuzzDecodePGShardEntries(f *testing.F) {
	f.Add(AppendPGShardEntries(nil, samplePGShardEntries()))
	f.Add(AppendPGShardEntries(nil, nil))
	f.Add([]byte{ShardEntriesVersion, 1, 0x80, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		gs, err := DecodePGShardEntries(b)
		if err != nil {
			return
		}
		if enc := AppendPGShardEntries(nil, gs); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
	})
}
