package osd

import (
	"encoding/binary"
	"testing"

	"github.com/cairn-storage/cairn/internal/proto"
)

// TestTxnTokens: an object keeps the tokens of its newest txnTokensKept
// transactions, whatever their number, among other xattrs.
func TestTxnTokens(t *testing.T) {
	xs := map[string][]byte{"user": binary.LittleEndian.AppendUint64(nil, 5), versionXattr: binary.LittleEndian.AppendUint64(nil, 6)}
	const n = 3000
	for count := uint64(0); count < n; count++ {
		xs[tokenSlot(count)] = binary.LittleEndian.AppendUint64(nil, 1000+count)
	}
	if len(xs) != 2+txnTokensKept {
		t.Fatalf("%d xattrs", len(xs))
	}
	for count := uint64(0); count < n; count++ {
		if want := count >= n-txnTokensKept; tokenIn(xs, 1000+count) != want {
			t.Fatalf("token of transaction %d kept: %v, want %v", count, !want, want)
		}
	}
	if tokenIn(xs, 5) || tokenIn(xs, 6) {
		t.Fatal("a token found in another xattr")
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
		// An S3 DELETE: the entry goes, a GC record of its data comes.
		{req(proto.OmapTxn{Rm: [][]byte{[]byte("k")}, Set: []proto.KV{{Key: []byte("\x00g\x00gc"), Value: make([]byte, 200)}}}), true},
		// An overwrite: two keys set for one removed.
		{req(proto.OmapTxn{Rm: [][]byte{[]byte("\x00p\x00i")}, Set: []proto.KV{{Key: []byte("k")}, {Key: []byte("\x00g\x00gc")}}}), false},
		{req(proto.OmapTxn{Rm: [][]byte{[]byte("k")}, Set: []proto.KV{{Key: []byte("big"), Value: make([]byte, 5000)}}}), false},
		{req(proto.OmapTxn{Create: true}), false},
		{&proto.Request{Op: proto.OpOmapTxn, Data: []byte{9}}, false},
		{&proto.Request{Op: proto.OpOmapSet}, false},
	} {
		if got := omapTxnFreesSpace(c.req); got != c.want {
			t.Errorf("%+v: %v", c.req, got)
		}
	}
}
