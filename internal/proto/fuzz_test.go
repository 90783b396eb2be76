package proto

import (
	"bytes"
	"reflect"
	"testing"
)

// The decoders take network input. Each fuzz target checks that decoding
// never panics and that anything accepted is in canonical form: it
// re-encodes to the same bytes and decodes to an equal message.

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range sampleRequests() {
		f.Add(AppendRequest(nil, r))
	}
	f.Add([]byte{})
	f.Add([]byte{Version, byte(OpOmapGet)})
	f.Add(AppendRequest(nil, &Request{Op: OpReplicate, Object: "o", Txn: make([]byte, AlignMin)})) // aligned
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		enc := AppendRequest(nil, r)
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
		r2, err := DecodeRequest(enc)
		if err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip differs:\n %+v\n %+v", r, r2)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	for _, r := range sampleResponses() {
		f.Add(AppendResponse(nil, r))
	}
	f.Add([]byte{})
	f.Add([]byte{Version, byte(StatusOK)})
	f.Add(AppendResponse(nil, &Response{Data: make([]byte, AlignMin)})) // aligned
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		enc := AppendResponse(nil, r)
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, enc)
		}
		r2, err := DecodeResponse(enc)
		if err != nil {
			t.Fatalf("re-encoded response does not decode: %v", err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip differs:\n %+v\n %+v", r, r2)
		}
	})
}
