package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// FuzzAuthorization: the Authorization header parser never panics, and
// what it accepts is well-formed and parses again the same once written
// back.
func FuzzAuthorization(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
	f.Add("AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("a", 64))
	f.Add("AWS4-HMAC-SHA256 Credential=AK/20130524/r/s3/aws4_request,Credential=AK/20130524/r/s3/aws4_request")
	f.Add("AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=")
	f.Add("AWS4-HMAC-SHA256 Credential=/////,SignedHeaders=;;,Signature=")
	f.Fuzz(func(t *testing.T, h string) {
		s, err := parseAuthorization(h)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("error %v is not a 400 *Error", err)
			}
			return
		}
		if len(s.headers) == 0 || len(s.headers) > MaxSignedHeaders || s.scope.accessKey == "" || len(s.scope.date) != 8 {
			t.Fatalf("accepted %q as %+v", h, s)
		}
		for _, name := range s.headers {
			if !isToken(name) || strings.ToLower(name) != name {
				t.Fatalf("accepted signed header %q", name)
			}
		}
		again := "AWS4-HMAC-SHA256 Credential=" + s.scope.accessKey + "/" + s.scope.String() +
			",SignedHeaders=" + strings.Join(s.headers, ";") + ",Signature=" + hexString(s.signature[:])
		s2, err := parseAuthorization(again)
		if err != nil || s2.scope != s.scope || strings.Join(s2.headers, ";") != strings.Join(s.headers, ";") || s2.signature != s.signature {
			t.Fatalf("%q parsed as %+v, written back as %q: %+v, %v", h, s, again, s2, err)
		}
	})
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

var fuzzTime = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// presignedSeed is a valid presigned query string for GET /bucket/a%20b+c
// on localhost:9000, signed by the AWS SDK at fuzzTime.
func presignedSeed(f *testing.F) string {
	sdk := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	req, _ := http.NewRequest("GET", "http://localhost:9000/bucket/a%20b+c?prefix=x%2By&uploads&X-Amz-Expires=3600", nil)
	u, _, err := sdk.PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSecret}, req, UnsignedPayload, "s3", "us-east-1", fuzzTime)
	if err != nil {
		f.Fatal(err)
	}
	parsed, _ := url.Parse(u)
	return parsed.RawQuery
}

// FuzzPresignedQuery: any query string on a request is parsed and checked
// without panicking; the only errors are *Errors; and nothing verifies but
// the signed query itself (up to the order of its parameters).
func FuzzPresignedQuery(f *testing.F) {
	seed := presignedSeed(f)
	f.Add(seed)
	f.Add(strings.Replace(seed, "X-Amz-Expires=3600", "X-Amz-Expires=604801", 1))
	f.Add(strings.Replace(seed, "X-Amz-Signature=", "X-Amz-Signature=0&X-Amz-Signature=", 1))
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%2F%2F%2F%2F")
	f.Add("a=%zz&b=%&c==&&&=")
	f.Add("Signature=x&AWSAccessKeyId=y")
	f.Add("AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=99999999999&Signature=AAAAAAAAAAAAAAAAAAAAAAAAAAA%3D")
	v := verifierAt(fuzzTime.Add(time.Minute))
	want := canonicalQuery(mustQuery(seed), true)
	r, _ := http.NewRequest("GET", "http://localhost:9000/bucket/a%20b+c?"+seed, nil)
	if a, err := v.Verify(r); err != nil || a.User != testUser {
		f.Fatalf("the seed does not verify: %v", err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := http.NewRequest("GET", "http://localhost:9000/bucket/a%20b+c", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.URL.RawQuery = raw
		a, err := v.Verify(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status < 400 || e.Code == "" {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if a.Anonymous {
			return
		}
		if got := canonicalQuery(mustQuery(raw), true); got != want || a.User != testUser {
			t.Fatalf("%q verified: canonical %q, signed %q", raw, got, want)
		}
	})
}

// FuzzChunked: the aws-chunked decoder, in each mode and read in pieces of
// any size, never panics, always makes progress, never yields more than it
// read, returns only *Errors, and keeps its state within its bounds; an
// unsigned body it accepts decodes the same once encoded again.
func FuzzChunked(f *testing.F) {
	data := []byte("hello, world: some data")
	for _, mode := range []Payload{PayloadStreamingSigned, PayloadStreamingSignedTrailer, PayloadStreamingUnsignedTrailer} {
		for _, chunks := range [][][]byte{nil, {data}, {data[:5], data[5:]}} {
			var trailers []string
			if mode != PayloadStreamingSigned {
				trailers = []string{"x-amz-checksum-crc32:AAAAAA=="}
			}
			f.Add(encodeChunks(mode, chunks, trailers), uint8(mode), uint16(7))
		}
	}
	f.Add([]byte("c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:abc=\n\r\n\r\n"), uint8(PayloadStreamingUnsignedTrailer), uint16(1))
	f.Add([]byte("ffffffff\r\n"), uint8(PayloadStreamingUnsignedTrailer), uint16(100))
	f.Fuzz(func(t *testing.T, body []byte, m uint8, readSize uint16) {
		mode := []Payload{PayloadStreamingSigned, PayloadStreamingSignedTrailer, PayloadStreamingUnsignedTrailer}[int(m)%3]
		declared := []string{"x-amz-checksum-crc32"}
		c := decoder(bytes.NewReader(body), mode, -1, declared)
		buf := make([]byte, 1+int(readSize)%(1<<14))
		var out []byte
		var err error
		for calls := 0; ; calls++ {
			if calls > len(body)+4 {
				t.Fatalf("%d reads of a %d-byte body", calls, len(body))
			}
			var n int
			n, err = c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
			if n == 0 {
				t.Fatal("a read made no progress")
			}
		}
		if len(out) > len(body) {
			t.Fatalf("decoded %d bytes from %d", len(out), len(body))
		}
		if len(c.trailer) > MaxTrailers || cap(c.stringBuf) > 1024 {
			t.Fatalf("state grew: %d trailers, string buffer %d", len(c.trailer), cap(c.stringBuf))
		}
		if err != io.EOF {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if mode == PayloadStreamingUnsignedTrailer {
			var trailers []string
			if v := c.trailer.Get("X-Amz-Checksum-Crc32"); v != "" || len(c.trailer) > 0 {
				trailers = []string{"x-amz-checksum-crc32:" + v}
			}
			again := encodeChunks(mode, [][]byte{out}, trailers)
			if len(out) == 0 {
				again = encodeChunks(mode, nil, trailers)
			}
			c2 := decoder(bytes.NewReader(again), mode, int64(len(out)), declared)
			out2, err := io.ReadAll(c2)
			if err != nil || !bytes.Equal(out, out2) || c2.trailer.Get("X-Amz-Checksum-Crc32") != c.trailer.Get("X-Amz-Checksum-Crc32") {
				t.Fatalf("re-encoded body decodes to %q, %v; first %q", out2, err, out)
			}
		}
	})
}

// FuzzVerify feeds whole requests (header-signed, presigned, aws-chunked):
// Verify and the body never panic and fail only with *Errors or the
// request reader's own errors.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("GET /test.txt HTTP/1.1\r\n" +
		"Host: examplebucket.s3.amazonaws.com\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n" +
		"Range: bytes=0-9\r\n" +
		"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n" +
		"x-amz-date: 20130524T000000Z\r\n\r\n"))
	a := strings.Repeat("a", 65536)
	body := "10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" + a + "\r\n" +
		"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" + a[:1024] + "\r\n" +
		"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n"
	f.Add(awsDocRequest(StreamingSigned,
		"content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class",
		"4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9", "", []byte(body)))
	f.Add([]byte("GET /bucket/a%20b+c?" + presignedSeed(f) + " HTTP/1.1\r\nHost: localhost:9000\r\n\r\n"))
	v := verifierAt(awsDocDate)
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		a, err := v.Verify(r)
		if err == nil {
			_, err = io.ReadAll(a.Body)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "chunked") {
			t.Fatalf("error %v (%T) is not an *Error", err, err)
		}
	})
}
