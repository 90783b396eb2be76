package proto

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// sampleRequests are real messages of several ops: the fuzz seed corpus and
// the round-trip cases.
func sampleRequests() []*Request {
	return []*Request{
		{Op: OpPing},
		{Op: OpWrite, Epoch: 7, PG: clustermap.PGID{Pool: 1, Seed: 42}, Object: "rbd_data.1.0000000000000001", Offset: 4096, Data: bytes.Repeat([]byte{0xab}, 64)},
		{Op: OpRead, Epoch: 300, PG: clustermap.PGID{Pool: 2, Seed: 1023}, Object: "obj", Offset: 1 << 40, Length: 1 << 20, Flags: FlagBalanced},
		{Op: OpCreate, Flags: FlagExclusive, Object: "new"},
		{Op: OpSetXattr, Object: "o", Key: "user.mime", Data: []byte("text/plain")},
		{Op: OpOmapSet, Object: "bucket.index", KVs: []KV{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: nil}}},
		{Op: OpOmapGet, Object: "bucket.index", Keys: [][]byte{[]byte("a"), []byte("zz"), nil}},
		{Op: OpOmapList, Object: "bucket.index", Start: []byte("a"), End: []byte("m"), Limit: 1000},
		{Op: OpList, PG: clustermap.PGID{Pool: 3, Seed: 7}, Start: []byte("after"), Limit: 100},
		{Op: OpReplicate, Epoch: 9, PG: clustermap.PGID{Pool: 1, Seed: 5}, Object: "x", PGVersion: 123456789, Txn: []byte{1, 2, 3, 4, 5}},
		{Op: OpReplicate, Flags: FlagShardWrite, Epoch: 9, PG: clustermap.PGID{Pool: 4, Seed: 1}, Object: "x", PGVersion: 7, KVs: []KV{{Key: []byte("\x00ec"), Value: []byte{2, 0}}}, Txn: []byte{1}},
		{Op: OpShardTrim, Epoch: 9, PG: clustermap.PGID{Pool: 4, Seed: 1}, Data: AppendShardEntries(nil, sampleShardEntries())},
		{Op: OpWrite, Object: "vol.1.0000000000000003", Data: []byte{1}, SnapSeq: 1 << 33},
		{Op: OpRead, Object: "vol.1.0000000000000003", Length: 4096, Snap: 12},
		{Op: OpSnapTrim, Object: "vol.1.0000000000000003", Data: []byte{1, 12}, SnapSeq: 14},
	}
}

func sampleResponses() []*Response {
	return []*Response{
		{},
		{Status: StatusOK, Epoch: 7, Size: 4096, Version: 88},
		{Status: StatusOK, Epoch: 7, Size: 8192, Data: bytes.Repeat([]byte{0xcd}, 64)},
		{Status: StatusWrongEpoch, Epoch: 12, Message: "client epoch 7 < osd epoch 12"},
		{Status: StatusOK, KVs: []KV{{Key: []byte("k1"), Value: []byte("v1")}, {Key: []byte("k2")}}, More: true},
		{Status: StatusOK, Names: []string{"a", "b", "rbd_header.1"}, More: false},
		{Status: StatusNotFound, Message: "no such object"},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, r := range sampleRequests() {
		b := AppendRequest(nil, r)
		got, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("%v: %v", r.Op, err)
		}
		if !reflect.DeepEqual(normReq(r), got) {
			t.Errorf("%v: got %+v, want %+v", r.Op, got, r)
		}
		if b2 := AppendRequest([]byte("prefix"), got); !bytes.Equal(b2[6:], b) {
			t.Errorf("%v: re-encoding differs", r.Op)
		}
	}
	for _, r := range sampleResponses() {
		b := AppendResponse(nil, r)
		got, err := DecodeResponse(b)
		if err != nil {
			t.Fatalf("%v: %v", r.Status, err)
		}
		if !reflect.DeepEqual(normResp(r), got) {
			t.Errorf("%v: got %+v, want %+v", r.Status, got, r)
		}
	}
}

// normReq maps empty byte slices to nil, as the decoder does.
func normReq(r *Request) *Request {
	c := *r
	c.Start, c.End, c.Data, c.Txn = nz(c.Start), nz(c.End), nz(c.Data), nz(c.Txn)
	for i := range c.Keys {
		c.Keys[i] = nz(c.Keys[i])
	}
	c.KVs = normKVs(c.KVs)
	return &c
}

func normResp(r *Response) *Response {
	c := *r
	c.Data = nz(c.Data)
	c.KVs = normKVs(c.KVs)
	return &c
}

func normKVs(kvs []KV) []KV {
	for i := range kvs {
		kvs[i].Key, kvs[i].Value = nz(kvs[i].Key), nz(kvs[i].Value)
	}
	return kvs
}

func nz(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// The golden vectors freeze the wire format: if one of these tests fails,
// the encoding changed, and old and new peers can no longer talk. Change
// them only together with Version.
const (
	goldenRequestHex  = "0302010701020c726264646174612e30303031802000000000000463616665020101010501016b017600000302"
	goldenResponseHex = "0306ac02036f6c640509026869010161016201016e01"
)

func goldenRequest() *Request {
	return &Request{Op: OpWrite, Flags: FlagExclusive, Epoch: 7, PG: clustermap.PGID{Pool: 1, Seed: 2},
		Object: "rbddata.0001", Offset: 4096, Data: []byte("cafe"), Keys: [][]byte{{1}, {5}},
		KVs: []KV{{Key: []byte("k"), Value: []byte("v")}}, PGVersion: 0, Txn: []byte{}, SnapSeq: 3, Snap: 2}
}

func goldenResponse() *Response {
	return &Response{Status: StatusWrongEpoch, Epoch: 300, Message: "old", Size: 5, Version: 9,
		Data: []byte("hi"), KVs: []KV{{Key: []byte("a"), Value: []byte("b")}}, Names: []string{"n"}, More: true}
}

func TestGoldenRequest(t *testing.T) {
	b := AppendRequest(nil, goldenRequest())
	if got := hex.EncodeToString(b); got != goldenRequestHex {
		t.Fatalf("request encoding changed:\n got  %s\n want %s", got, goldenRequestHex)
	}
	want, _ := hex.DecodeString(goldenRequestHex)
	r, err := DecodeRequest(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, normReq(goldenRequest())) {
		t.Fatalf("decoded %+v", r)
	}
}

func TestGoldenResponse(t *testing.T) {
	b := AppendResponse(nil, goldenResponse())
	if got := hex.EncodeToString(b); got != goldenResponseHex {
		t.Fatalf("response encoding changed:\n got  %s\n want %s", got, goldenResponseHex)
	}
	want, _ := hex.DecodeString(goldenResponseHex)
	r, err := DecodeResponse(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, goldenResponse()) {
		t.Fatalf("decoded %+v", r)
	}
}

func TestDecodeErrors(t *testing.T) {
	// ping encodes as: version, op, then 17 zero bytes for the empty fields.
	ping := AppendRequest(nil, &Request{Op: OpPing})
	// upTo returns the encoding of an empty request of op up to (not
	// including) the field that has `after` fields behind it.
	upTo := func(op Op, after int) []byte {
		b := AppendRequest(nil, &Request{Op: op})
		return b[:len(b)-after]
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "proto: request: empty"},
		{"version", append([]byte{1}, ping[1:]...), "unsupported encoding version 1"},
		{"op zero", append([]byte{Version, 0}, ping[2:]...), "unknown op 0"},
		{"op unknown", append([]byte{Version, 200}, ping[2:]...), "unknown op 200"},
		{"trailing", append(append([]byte{}, ping...), 0, 0, 0), "3 trailing bytes"},
		{"truncated", ping[:len(ping)-1], "truncated in snapshot"},
		{"key count", append(upTo(OpOmapGet, 6), 0x88, 0x27), "proto: request: omap key count 5000 exceeds limit 4096"},
		{"key count vs bytes", append(upTo(OpOmapGet, 6), 100, 1, 'a'), "omap key count 100 exceeds the 2 bytes remaining"},
		{"kv count vs bytes", append(upTo(OpOmapSet, 5), 2, 0, 0, 0), "key/value count 2 exceeds the 3 bytes remaining"},
		{"data limit", append(upTo(OpWrite, 7), 0x80, 0x80, 0x80, 0x80, 0x01), "data length 268435456 exceeds limit 67108864"},
		{"data remaining", append(upTo(OpWrite, 7), 100, 1, 2, 3), "data length 100 exceeds the 3 bytes remaining"},
		{"object name limit", append(upTo(OpStat, 14), 0x81, 0x10), "object name length 2049 exceeds limit 1024"},
		{"non-minimal", append([]byte{Version, 1, 0x80, 0x00}, ping[3:]...), "flags is not minimally encoded"},
		{"flags 33 bits", append([]byte{Version, 1, 0x80, 0x80, 0x80, 0x80, 0x10}, ping[3:]...), "flags 4294967296 exceeds 32 bits"},
		{"overflow", append([]byte{Version, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ping[4:]...), "epoch overflows 64 bits"},
	}
	for _, c := range cases {
		_, err := DecodeRequest(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v does not match ErrMalformed", c.name, err)
		}
	}

	resp := AppendResponse(nil, &Response{})
	rcases := []struct {
		name string
		b    []byte
		want string
	}{
		{"status", append([]byte{Version, 99}, resp[2:]...), "proto: response: unknown status 99"},
		{"more", append(append([]byte{}, resp[:len(resp)-1]...), 2), "more flag 2 is not 0 or 1"},
		{"no more", resp[:len(resp)-1], "truncated before more flag"},
		{"message", append([]byte{Version, 0, 0, 0x81, 0x40}, resp[4:]...), "message length 8193 exceeds limit 4096"},
	}
	for _, c := range rcases {
		_, err := DecodeResponse(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// Every strict prefix of a valid message is an error, never a panic.
func TestTruncations(t *testing.T) {
	for _, r := range sampleRequests() {
		b := AppendRequest(nil, r)
		for i := range b {
			if _, err := DecodeRequest(b[:i]); err == nil {
				t.Fatalf("%v: prefix %d of %d decoded", r.Op, i, len(b))
			}
		}
	}
	for _, r := range sampleResponses() {
		b := AppendResponse(nil, r)
		for i := range b {
			if _, err := DecodeResponse(b[:i]); err == nil {
				t.Fatalf("%v: prefix %d of %d decoded", r.Status, i, len(b))
			}
		}
	}
}

// Data aliases the input: the documented contract that saves a copy of
// every large payload.
func TestDataAliasesInput(t *testing.T) {
	b := AppendRequest(nil, &Request{Op: OpWrite, Data: []byte("payload")})
	r, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("payload"))
	b[i] = 'P'
	if string(r.Data) != "Payload" {
		t.Fatalf("Data does not alias the input: %q", r.Data)
	}
	if cap(r.Data) != len(r.Data) {
		t.Fatalf("Data's capacity reaches past its field: cap %d", cap(r.Data))
	}
}

// write4KiB is a typical data-path request.
func write4KiB() *Request {
	r := sampleRequests()[1]
	r.Data = bytes.Repeat([]byte{0xab}, 4096)
	return r
}

func TestDecodeAllocs(t *testing.T) {
	b := AppendRequest(nil, write4KiB())
	n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeRequest(b); err != nil {
			t.Fatal(err)
		}
	})
	// The Request and the object name; the 4 KiB data is aliased.
	if n > 2 {
		t.Fatalf("DecodeRequest of a write: %v allocs, want ≤ 2", n)
	}
}

func BenchmarkDecodeRequest4KiB(b *testing.B) {
	buf := AppendRequest(nil, write4KiB())
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := DecodeRequest(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendRequest4KiB(b *testing.B) {
	r := write4KiB()
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendRequest(buf[:0], r)
	}
}

// Large bulk payloads land at aligned offsets of the message wherever the
// message starts in the sender's buffer; small ones carry no padding.
func TestBulkPayloadAligned(t *testing.T) {
	data := bytes.Repeat([]byte{0xab}, AlignMin)
	txn := bytes.Repeat([]byte{0xcd}, AlignMin+5)
	for _, lead := range []int{0, 24, 4095} {
		req := &Request{Op: OpReplicate, Object: "obj", Data: data, Txn: txn, PGVersion: 9}
		b := AppendRequest(make([]byte, lead), req)[lead:]
		msg := make([]byte, len(b)+Align)
		msg = msg[PadTo(int(uintptr(unsafe.Pointer(&msg[0])))):][:len(b)]
		copy(msg, b)
		r, err := DecodeRequest(msg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{r.Data, r.Txn} {
			if off := int(uintptr(unsafe.Pointer(&p[0])) - uintptr(unsafe.Pointer(&msg[0]))); off%Align != 0 {
				t.Fatalf("lead %d: payload at offset %d of the message", lead, off)
			}
		}
		if !bytes.Equal(r.Data, data) || !bytes.Equal(r.Txn, txn) {
			t.Fatalf("lead %d: payload changed", lead)
		}
		if !bytes.Equal(AppendRequest(nil, r), b) {
			t.Fatalf("lead %d: re-encoding differs", lead)
		}
	}

	// Encoded around its Data (sent from where it lies), a message is
	// the same bytes, its Txn aligned where AppendRequest aligns it.
	for _, n := range []int{0, 7, AlignMin, 3*Align + 5} {
		req := &Request{Op: OpStage, Object: "obj", Key: "t", Data: bytes.Repeat([]byte{0xab}, n), Txn: txn, Keys: [][]byte{[]byte("k")}, SnapSeq: 3}
		for _, lead := range []int{0, 24} {
			head := AppendRequestUpToData(make([]byte, lead), req, n)
			got := AppendRequestAfterData(append(head, req.Data...), req, len(head)-lead+n)
			if want := AppendRequest(make([]byte, lead), req); !bytes.Equal(got, want) {
				t.Fatalf("data of %d bytes, lead %d: encoded around the data, the message differs", n, lead)
			}
			tail := AppendRequestAfterData(nil, req, len(head)-lead+n)
			if !bytes.Equal(tail, got[len(head)+n:]) {
				t.Fatalf("data of %d bytes, lead %d: the bytes after the data, encoded apart, differ", n, lead)
			}
		}
	}

	b := AppendRequest(nil, &Request{Op: OpPut, Object: "obj", Data: data})
	pad := bytes.Index(b, data) - 1
	for pad >= 0 && b[pad] == 0 {
		pad--
	}
	bad := slices.Clone(b)
	bad[pad+1] = 1 // a padding byte
	if _, err := DecodeRequest(bad); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "padding") {
		t.Fatalf("nonzero padding: %v", err)
	}
	if _, err := DecodeRequest(b[:len(b)-len(data)+10]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated payload: %v", err)
	}

	small := &Request{Op: OpPut, Object: "obj", Data: data[:AlignMin-1]}
	if n, want := len(AppendRequest(nil, small)), len(AppendRequest(nil, &Request{Op: OpPut, Object: "obj"}))+AlignMin-1+2; n != want {
		t.Fatalf("payload under AlignMin: %d bytes encoded, want %d (no padding)", n, want)
	}
}
