package proto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func sampleOmapTxns() []*OmapTxn {
	return []*OmapTxn{
		{},
		{Token: 1, Create: true},
		{Token: 0xfedcba9876543210, Guards: []OmapGuard{{Key: []byte("k"), Absent: true}}, Set: []KV{{Key: []byte("k"), Value: []byte("v")}}},
		{
			Guards:   []OmapGuard{{Key: []byte("b"), Value: []byte("1")}, {Key: []byte("a")}, {Key: []byte("\x00meta"), Absent: true}},
			Set:      []KV{{Key: nil, Value: []byte("empty key")}, {Key: []byte("a")}, {Key: []byte("b/é"), Value: bytes.Repeat([]byte{7}, 300)}},
			Rm:       [][]byte{[]byte("x"), []byte("y")},
			HasRange: true, RmFrom: []byte("p/"), RmTo: []byte("p0"),
		},
		{HasRange: true, RmTo: []byte("\xff")},
	}
}

func TestOmapTxnRoundTrip(t *testing.T) {
	for i, tx := range sampleOmapTxns() {
		b := AppendOmapTxn(nil, tx)
		got, err := DecodeOmapTxn(b)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, normOmapTxn(tx)) {
			t.Fatalf("%d: round trip differs:\n %+v\n %+v", i, got, tx)
		}
		if again := AppendOmapTxn(nil, got); !bytes.Equal(again, b) {
			t.Fatalf("%d: re-encoding differs", i)
		}
	}
}

// normOmapTxn is tx as the decoder returns it: empty byte strings are nil.
func normOmapTxn(tx *OmapTxn) *OmapTxn {
	n := *tx
	nilIfEmpty := func(b []byte) []byte {
		if len(b) == 0 {
			return nil
		}
		return b
	}
	n.Guards = nil
	for _, g := range tx.Guards {
		n.Guards = append(n.Guards, OmapGuard{Key: nilIfEmpty(g.Key), Value: nilIfEmpty(g.Value), Absent: g.Absent})
	}
	n.Set = nil
	for _, kv := range tx.Set {
		n.Set = append(n.Set, KV{Key: nilIfEmpty(kv.Key), Value: nilIfEmpty(kv.Value)})
	}
	n.RmFrom, n.RmTo = nilIfEmpty(tx.RmFrom), nilIfEmpty(tx.RmTo)
	return &n
}

// The golden vector freezes the encoding (see TestGoldenRequest).
const goldenOmapTxnHex = "0103efcdab89674523010201016b00016101760101620001017801630164"

func TestGoldenOmapTxn(t *testing.T) {
	tx := &OmapTxn{
		Token: 0x0123456789abcdef, Create: true,
		Guards:   []OmapGuard{{Key: []byte("k"), Absent: true}, {Key: []byte("a"), Value: []byte("v")}},
		Set:      []KV{{Key: []byte("b")}},
		Rm:       [][]byte{[]byte("x")},
		HasRange: true, RmFrom: []byte("c"), RmTo: []byte("d"),
	}
	b := AppendOmapTxn(nil, tx)
	if got := hex.EncodeToString(b); got != goldenOmapTxnHex {
		t.Fatalf("omap transaction encoding changed:\n got  %s\n want %s", got, goldenOmapTxnHex)
	}
	got, err := DecodeOmapTxn(b)
	if err != nil || !reflect.DeepEqual(got, tx) {
		t.Fatalf("golden decode: %v\n %+v", err, got)
	}
}

func TestOmapTxnDecodeErrors(t *testing.T) {
	enc := func(tx *OmapTxn) []byte { return AppendOmapTxn(nil, tx) }
	big := func(n int) []byte { return bytes.Repeat([]byte{'k'}, n) }
	manyGuards := &OmapTxn{}
	for i := 0; i <= MaxOmapTxnGuards; i++ {
		manyGuards.Guards = append(manyGuards.Guards, OmapGuard{Key: []byte{byte(i)}, Absent: true})
	}
	tooMany := &OmapTxn{}
	for i := 0; i <= MaxKeys; i++ {
		tooMany.Rm = append(tooMany.Rm, []byte{byte(i >> 8), byte(i)})
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"version", []byte{2}, "unsupported version"},
		{"flags", []byte{1, 4}, "unknown flags"},
		{"token", []byte{1, 0, 1, 2}, "truncated in token"},
		{"guard kind", append(enc(&OmapTxn{})[:10], 1, 7, 0, 0, 0), "unknown guard kind"},
		{"guards", enc(manyGuards), "guard count"},
		{"key length", enc(&OmapTxn{Rm: [][]byte{big(MaxKeyLen + 1)}}), "exceeds limit"},
		{"value length", enc(&OmapTxn{Set: []KV{{Key: []byte("k"), Value: big(MaxOmapValueLen + 1)}}}), "exceeds limit"},
		{"set order", enc(&OmapTxn{Set: []KV{{Key: []byte("b")}, {Key: []byte("a")}}}), "not strictly increasing"},
		{"set twice", enc(&OmapTxn{Set: []KV{{Key: []byte("a")}, {Key: []byte("a")}}}), "not strictly increasing"},
		{"rm order", enc(&OmapTxn{Rm: [][]byte{[]byte("b"), []byte("a")}}), "not strictly increasing"},
		{"too many keys", enc(tooMany), "exceeds limit"},
		{"range reversed", enc(&OmapTxn{HasRange: true, RmFrom: []byte("b"), RmTo: []byte("a")}), "reversed"},
		{"range no end", enc(&OmapTxn{HasRange: true, RmFrom: []byte("b")}), "no end"},
		{"trailing", append(enc(&OmapTxn{}), 0), "trailing"},
		{"truncated", enc(sampleOmapTxns()[3])[:40], "remaining"},
	}
	for _, c := range cases {
		_, err := DecodeOmapTxn(c.b)
		if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an ErrMalformed saying %q", c.name, err, c.want)
		}
	}
	// Every truncation of a valid encoding fails cleanly.
	for _, tx := range sampleOmapTxns() {
		b := enc(tx)
		for i := 0; i < len(b); i++ {
			if _, err := DecodeOmapTxn(b[:i]); err == nil {
				t.Fatalf("truncation to %d of %d bytes decoded", i, len(b))
			}
		}
	}
}

func TestListPrefixes(t *testing.T) {
	for _, ps := range [][][]byte{nil, {[]byte("a/")}, {[]byte("\x00x/"), []byte("a//"), []byte("é/")}} {
		b := AppendListPrefixes(nil, ps)
		got, err := DecodeListPrefixes(b)
		if err != nil || !reflect.DeepEqual(got, ps) {
			t.Fatalf("%q: %q %v", ps, got, err)
		}
	}
	for name, b := range map[string][]byte{
		"version":   {2, 1, 1, 'a'},
		"none":      {1, 0},
		"empty":     {1, 1, 0},
		"order":     {1, 2, 1, 'b', 1, 'a'},
		"twice":     {1, 2, 1, 'a', 1, 'a'},
		"truncated": {1, 2, 1, 'a'},
		"trailing":  {1, 1, 1, 'a', 0},
	} {
		if _, err := DecodeListPrefixes(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

func FuzzDecodeOmapTxn(f *testing.F) {
	for _, tx := range sampleOmapTxns() {
		f.Add(AppendOmapTxn(nil, tx))
	}
	f.Add([]byte{})
	f.Add([]byte{OmapTxnVersion, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := DecodeOmapTxn(b)
		if err != nil {
			return
		}
		enc := AppendOmapTxn(nil, tx)
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
		tx2, err := DecodeOmapTxn(enc)
		if err != nil || !reflect.DeepEqual(tx, tx2) {
			t.Fatalf("round trip differs: %v\n %+v\n %+v", err, tx, tx2)
		}
	})
}

func FuzzDecodeListPrefixes(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendListPrefixes(nil, [][]byte{[]byte("a/"), []byte("b/")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := DecodeListPrefixes(b)
		if err != nil {
			return
		}
		if enc := AppendListPrefixes(nil, ps); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
	})
}
