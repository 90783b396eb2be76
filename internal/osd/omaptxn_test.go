package osd

import (
	"bytes"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

// TestTxnTokens: the object keeps its newest txnTokensKept tokens, drops
// the oldest, and never changes the slice it was given (it may alias the
// store's value).
func TestTxnTokens(t *testing.T) {
	var tokens []byte
	for tok := uint64(1); tok <= 300; tok++ {
		before := bytes.Clone(tokens)
		next := appendToken(tokens, tok)
		if !bytes.Equal(tokens, before) {
			t.Fatal("appendToken changed its input")
		}
		tokens = next
	}
	if len(tokens) != 8*txnTokensKept {
		t.Fatalf("%d bytes of tokens kept", len(tokens))
	}
	for tok := uint64(1); tok <= 300; tok++ {
		if want := tok > 300-txnTokensKept; hasToken(tokens, tok) != want {
			t.Fatalf("token %d kept: %v, want %v", tok, !want, want)
		}
	}
	// A damaged value (not a multiple of 8 bytes) is cut, not trusted.
	if got := appendToken([]byte{1, 2, 3}, 9); len(got) != 8 || !hasToken(got, 9) {
		t.Fatalf("%x", got)
	}
}

func TestOmapTxnFreesSpace(t *testing.T) {
	req := func(tx proto.OmapTxn) *proto.Request {
		return &proto.Request{Op: proto.OpOmapTxn, Data: proto.AppendOmapTxn(nil, &tx)}
	}
	for _, c := range []struct {
		req  *proto.Request
		want bool
	}{
		{req(proto.OmapTxn{Rm: [][]byte{[]byte("k")}, Guards: []proto.OmapGuard{{Key: []byte("k"), Value: []byte("v")}}}), true},
		{req(proto.OmapTxn{HasRange: true, RmTo: []byte("z")}), true},
		{req(proto.OmapTxn{Set: []proto.KV{{Key: []byte("k")}}}), false},
		{req(proto.OmapTxn{Create: true}), false},
		{&proto.Request{Op: proto.OpOmapTxn, Data: []byte{9}}, false},
		{&proto.Request{Op: proto.OpOmapSet}, false},
	} {
		if got := omapTxnFreesSpace(c.req); got != c.want {
			t.Errorf("%+v: %v", c.req, got)
		}
	}
}
