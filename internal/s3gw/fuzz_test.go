package s3gw

import (
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

// Every decoder of bytes from the network or the index has a fuzz test:
// it must not panic, and what it accepts must make sense.

func sampleEntry() *Entry {
	return &Entry{Size: 10, ETag: "abc-2", MTime: time.Unix(1700000000, 5).UTC(),
		Headers: StdHeaders{ContentType: "text/plain", Expires: "x"}, Meta: []MetaKV{{"a", "b"}},
		Checksum: Checksum{Alg: checksum.CRC32, Sum: []byte{1, 2, 3, 4}, Parts: 2}, UploadID: "u", Stripe: stripeSize,
		Parts: []Part{{DataID: "d1", Size: 4, MD5: make([]byte, 16)}, {DataID: "d2", Size: 6, Checksum: []byte{9, 9, 9, 9}}}}
}

func TestEntryRoundTrip(t *testing.T) {
	e := sampleEntry()
	got, err := decodeEntry(e.encode())
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, e)
	}
	b := e.encode()
	for i := range b { // every truncation is an error, never a panic
		if _, err := decodeEntry(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(sampleEntry().encode())
	f.Add((&Entry{}).encode())
	f.Add((&Entry{Size: 3, ETag: "e", Inline: "0123456789abcdef"}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		if again, err := decodeEntry(e.encode()); err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("re-encoding an accepted entry: %v", err)
		}
		pieces("b", e, 0, e.Size) // never panics on an accepted entry
	})
}

func FuzzDecodeGC(f *testing.F) {
	f.Add(gcOf(sampleEntry()).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeGC(b)
		if err != nil {
			return
		}
		if again, err := decodeGC(r.encode()); err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("accepted %x but does not round-trip: %v", b, err)
		}
		decodeIntent(b)
	})
}

// FuzzDecodeDead: a dead bucket's record, read from the cluster, never
// panics, and what it accepts round-trips.
func FuzzDecodeDead(f *testing.F) {
	at := time.Unix(0, 1234567890)
	f.Add(deadRec{at: at, shards: []int{0, 3, 7}}.encode())
	f.Add(deadRec{at: at, shards: []int{0}, pool: "ec21"}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeDead(b)
		if err != nil {
			return
		}
		again, err := decodeDead(r.encode())
		if err != nil || !again.at.Equal(r.at) || !slices.Equal(again.shards, r.shards) || again.pool != r.pool {
			t.Fatalf("accepted %x as %+v, which comes back as %+v, %v", b, r, again, err)
		}
	})
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=-5", "bytes=5-", "bytes=1-0", "bytes=0-1,2-3", "bytes=99999999999999999999-"} {
		f.Add(s, uint64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size uint64) {
		r, ok, err := parseRange(h, size)
		if ok && (err != nil || r.Length == 0 || r.Start+r.Length > size || r.Start+r.Length < r.Start) {
			t.Fatalf("parseRange(%q, %d) = %+v, %v", h, size, r, err)
		}
	})
}

func FuzzConditions(f *testing.F) {
	f.Add(`"abc", W/"def"`, "*", "Mon, 02 Jan 2006 15:04:05 GMT", "garbage")
	f.Fuzz(func(t *testing.T, im, inm, ims, ius string) {
		h := http.Header{"If-Match": {im}, "If-None-Match": {inm}, "If-Modified-Since": {ims}, "If-Unmodified-Since": {ius}}
		c, err := parseConditions(h, "")
		if err != nil {
			return
		}
		e := &Entry{ETag: "abc", MTime: time.Unix(1e9, 0)}
		c.evalRead(e)
		c.evalWrite(e)
		c.evalWrite(nil)
	})
}

func FuzzCopySource(f *testing.F) {
	for _, s := range []string{"bkt/key", "/bkt/a%20b", "bkt/k?versionId=null", "bkt/k?versionId=1", "%zz", "bkt/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, k, err := parseCopySource(s)
		if err == nil && (b == "" || k == "" || keyProblem(k) != nil) {
			t.Fatalf("parseCopySource(%q) accepted bucket %q key %q", s, b, k)
		}
	})
}

func FuzzDeleteXML(f *testing.F) {
	f.Add([]byte("<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>"))
	f.Add([]byte("<Delete><Object><Key>a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := parseDelete(b)
		if err == nil && (len(req.Objects) == 0 || len(req.Objects) > maxDeleteKeys) {
			t.Fatalf("accepted %d keys", len(req.Objects))
		}
	})
}

func FuzzListParams(f *testing.F) {
	f.Add("a/", "/", "10", encodeToken("a/\xff"), "x", "url")
	f.Fuzz(func(t *testing.T, prefix, delim, mk, token, start, encoding string) {
		q := url.Values{"prefix": {prefix}, "delimiter": {delim}, "max-keys": {mk}, "continuation-token": {token},
			"start-after": {start}, "encoding-type": {encoding}}
		p, err := parseList(q, true)
		if err == nil && (p.maxKeys < 0 || p.maxKeys > maxListKeys) {
			t.Fatalf("max-keys %d accepted", p.maxKeys)
		}
		s3URLEncode(prefix)
	})
}

func FuzzCopyRange(f *testing.F) {
	f.Add("bytes=0-9", uint64(10))
	f.Add("bytes=5-99999999999", uint64(10))
	f.Fuzz(func(t *testing.T, h string, size uint64) {
		r, err := parseCopyRange(h, size)
		if err == nil && (r.Start+r.Length > size || r.Start+r.Length < r.Start || h != "" && r.Length == 0) {
			t.Fatalf("parseCopyRange(%q, %d) = %+v", h, size, r)
		}
	})
}

// FuzzShardState decodes open-key values, which come from the store: a
// value that decodes encodes back to itself.
func FuzzShardState(f *testing.F) {
	for _, s := range []string{"1", "o3", "s2\x00k10", "t0\x00", "x", "o", "s\x00a", "o-1", "t9\x00\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		st := parseState(v, true)
		if st.kind == 0 {
			return
		}
		if back := parseState(st.encode(), true); back != st {
			t.Fatalf("%q decodes to %+v, which encodes to %q, which decodes to %+v", v, st, st.encode(), back)
		}
	})
}

// FuzzDecodeBucket decodes registry records: none makes a gateway panic,
// and one that decodes has a shard list rangeOf can use.
func FuzzDecodeBucket(f *testing.F) {
	f.Add([]byte(`{"id":"ab","owner":"u","shards":[{"from":"","n":0},{"from":"k","n":7,"gen":1}]}`))
	f.Add([]byte(`{"id":"ab","shards":[{"from":"k","n":0}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := decodeBucket("b", raw)
		if err != nil {
			return
		}
		for _, k := range []string{"", "a", "k", "zz"} {
			if r := b.rangeOf(k); r.From > k {
				t.Fatalf("key %q placed in the range from %q", k, r.From)
			}
		}
	})
}
