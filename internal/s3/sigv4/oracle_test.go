package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7/pkg/signer"
)

// The oracles: requests signed by the AWS SDK for Go v2 and by minio-go,
// sent over the wire format (written and parsed back as a server sees
// them), must verify; the same requests with one byte changed must fail
// with the code S3 gives.

const (
	testAK     = "AKIAIOSFODNN7EXAMPLE"
	testSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	testUser   = "alice"
)

func lookup(ak string) (string, string, bool) {
	if ak == testAK {
		return testSecret, testUser, true
	}
	if ak == "OTHERKEY" {
		return "other-secret", "bob", true
	}
	return "", "", false
}

func verifierAt(t time.Time) *Verifier {
	return &Verifier{Lookup: lookup, Now: func() time.Time { return t }}
}

// wire writes a client request as it goes on the wire and parses it back as
// net/http's server does.
func wire(t testing.TB, req *http.Request) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	return buf.Bytes()
}

func parse(t testing.TB, raw []byte) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("parsing the request: %v\n%q", err, raw)
	}
	return r
}

// verifyAll verifies a raw request and reads its body to the end.
func verifyAll(v *Verifier, raw []byte) (*Auth, []byte, error) {
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return nil, nil, err
	}
	a, err := v.Verify(r)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(a.Body)
	return a, body, err
}

// Random request material: the characters that break signers.
var keyRunes = []string{"a", "b", "Z", "0", "9", "-", "_", ".", "~", " ", "  ", "+", "%", "%2F", "%20", "/", "//", "///",
	"é", "日本", "ß", "😀", "!", "*", "'", "(", ")", "&", "=", ";", ":", "@", ",", "$", "?", "#", "[", "]", "\"", "<", ">", "^", "`", "{", "}", "|", "\\"}

func randKey(rng *rand.Rand) string {
	var b strings.Builder
	for n := 1 + rng.IntN(12); n > 0; n-- {
		b.WriteString(keyRunes[rng.IntN(len(keyRunes))])
	}
	return b.String()
}

var valueRunes = []string{"a", "B", "1", " ", "  ", "   ", "+", "%", "&", "=", "/", "é", "日本", "*", "~", "-", "_", ".", ",", ";", ":", "\"", "'", "(", ")"}

func randValue(rng *rand.Rand) string {
	var b strings.Builder
	for n := rng.IntN(10); n > 0; n-- {
		b.WriteString(valueRunes[rng.IntN(len(valueRunes))])
	}
	return b.String()
}

var hosts = []string{"localhost:9000", "127.0.0.1:8080", "s3.example.com", "[::1]:9443", "bucket.s3.cairn.test:65535"}
var regions = []string{"us-east-1", "eu-west-3", "cairn", "local"}

// randQuery returns a raw query: parameters (some without '=', some
// repeated) encoded either the strict SigV4 way or url.QueryEscape's way
// (space as '+'), in a random order. sortedKeys restricts it to what
// minio-go can sign: names of plain characters, each once.
func randQuery(rng *rand.Rand, simple bool) string {
	names := []string{"prefix", "delimiter", "list-type", "uploads", "partNumber", "uploadId", "x-id", "marker", "max-keys", "encoding-type", "start-after", "versionId"}
	var parts []string
	used := map[string]bool{}
	for n := rng.IntN(6); n > 0; n-- {
		name := names[rng.IntN(len(names))]
		if !simple && rng.IntN(4) == 0 {
			name = randValue(rng) + "k"
		}
		if simple && used[name] {
			continue
		}
		used[name] = true
		enc := uriEncode
		if rng.IntN(2) == 0 {
			enc = func(s string, _ bool) string { return url.QueryEscape(s) }
		}
		if name == "uploads" && rng.IntN(2) == 0 {
			parts = append(parts, name)
			continue
		}
		parts = append(parts, enc(name, false)+"="+enc(randValue(rng), false))
		if !simple && rng.IntN(5) == 0 { // the same name again
			parts = append(parts, enc(name, false)+"="+enc(randValue(rng), false))
		}
	}
	return strings.Join(parts, "&")
}

// randHeaders sets headers clients send: metadata with odd spacing,
// repeated headers, standard ones.
func randHeaders(rng *rand.Rand, h http.Header) {
	if rng.IntN(2) == 0 {
		h.Set("Content-Type", "application/octet-stream")
	}
	for n := rng.IntN(4); n > 0; n-- {
		h.Add("X-Amz-Meta-"+strconv.Itoa(rng.IntN(3)), randValue(rng)+"x")
	}
	if rng.IntN(3) == 0 {
		h.Add("X-Custom", "a   b")
		h.Add("X-Custom", " c ")
	}
	if rng.IntN(3) == 0 {
		h.Set("Range", "bytes=0-"+strconv.Itoa(rng.IntN(1000)))
	}
	if rng.IntN(3) == 0 {
		h.Set("If-None-Match", "*")
	}
}

// newRequest builds a client request for host, bucket/key and query. If
// strict, the path is escaped as AWS SDKs do (everything but the
// unreserved characters and '/'); otherwise as Go does by default, which
// leaves characters such as '+' and '$' as they are.
func newRequest(t testing.TB, method, host, key, rawQuery string, body []byte, strict bool) *http.Request {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: host, Path: "/bucket/" + key, RawQuery: rawQuery}
	if strict {
		u.RawPath = uriEncode(u.Path, true)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, u.String(), rd)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = u
	req.Host = host
	if body != nil {
		req.ContentLength = int64(len(body))
	}
	return req
}

func randBody(rng *rand.Rand, max int) []byte {
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// wantCode fails unless err is an *Error with the code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
}

// flip changes one byte of raw at i into another byte that keeps the
// request parseable (hex stays hex, printable stays printable).
func flip(raw []byte, i int) []byte {
	out := bytes.Clone(raw)
	c := out[i]
	switch {
	case '0' <= c && c <= '8', 'a' <= c && c <= 'e', 'A' <= c && c <= 'E':
		out[i] = c + 1
	case c == '9':
		out[i] = 'a'
	case c == 'f' || c == 'F':
		out[i] = '0'
	case c > ' ' && c < 0x7f && c != '%':
		out[i] = 'Q'
		if c == 'Q' {
			out[i] = 'R'
		}
	default:
		out[i] = c ^ 1
	}
	return out
}

// bodyStart is the offset of the body in a raw request.
func bodyStart(raw []byte) int { return bytes.Index(raw, []byte("\r\n\r\n")) + 4 }

// headerLine is the offset of the value of the header line name in raw.
func headerLine(raw []byte, name string) int {
	i := bytes.Index(bytes.ToLower(raw[:bodyStart(raw)]), []byte("\r\n"+strings.ToLower(name)+": "))
	if i < 0 {
		return -1
	}
	return i + len(name) + 4
}

// TestAWSSDKHeader signs random requests with the AWS SDK's SignHTTP, with
// a hex SHA-256 or UNSIGNED-PAYLOAD, and tampers with each.
func TestAWSSDKHeader(t *testing.T) {
	sdk := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSecret}
	methods := []string{"GET", "PUT", "HEAD", "DELETE", "POST"}
	for seed := uint64(0); seed < 400; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		method := methods[rng.IntN(len(methods))]
		var body []byte
		if method == "PUT" || method == "POST" {
			body = randBody(rng, 4096)
		}
		host, region := hosts[rng.IntN(len(hosts))], regions[rng.IntN(len(regions))]
		key := randKey(rng)
		req := newRequest(t, method, host, key, randQuery(rng, false), body, rng.IntN(2) == 0)
		randHeaders(rng, req.Header)
		payload := UnsignedPayload
		if rng.IntN(2) == 0 {
			payload = sha256hex(body)
		}
		req.Header.Set("X-Amz-Content-Sha256", payload)
		when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(400 * 24 * time.Hour))))
		if err := sdk.SignHTTP(context.Background(), creds, req, payload, "s3", region, when); err != nil {
			t.Fatal(err)
		}
		shuffleQuery(rng, req.URL) // the signature does not depend on the order
		raw := wire(t, req)
		skew := time.Duration(rng.Int64N(int64(2*MaxSkew))) - MaxSkew
		v := verifierAt(when.Add(skew))
		a, got, err := verifyAll(v, raw)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, raw)
		}
		if a.User != testUser || a.AccessKey != testAK || a.Region != region || a.Presigned || !a.Time.Equal(when.Truncate(time.Second)) {
			t.Fatalf("seed %d: auth %+v", seed, a)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("seed %d: body differs", seed)
		}
		tamperHeaderSigned(t, seed, v, raw, payload != UnsignedPayload && len(body) > 0)
		// The clock beyond the skew; the configured region; other keys.
		if _, _, err := verifyAll(verifierAt(when.Add(MaxSkew+time.Second)), raw); true {
			wantCode(t, "late clock", err, "RequestTimeTooSkewed")
		}
		if _, _, err := verifyAll(verifierAt(when.Add(-MaxSkew-time.Second)), raw); true {
			wantCode(t, "early clock", err, "RequestTimeTooSkewed")
		}
		vr := verifierAt(when)
		vr.Region = "elsewhere"
		_, _, err = verifyAll(vr, raw)
		wantCode(t, "region", err, "AuthorizationHeaderMalformed")
		vr.Region = region
		if _, _, err := verifyAll(vr, raw); err != nil {
			t.Fatalf("seed %d: the configured region: %v", seed, err)
		}
		wrong := bytes.Replace(raw, []byte("Credential="+testAK), []byte("Credential=OTHERKEY"), 1)
		_, _, err = verifyAll(v, wrong)
		wantCode(t, "another user's key", err, "SignatureDoesNotMatch")
		unknown := bytes.Replace(raw, []byte("Credential="+testAK), []byte("Credential=NOSUCHKEY"), 1)
		_, _, err = verifyAll(v, unknown)
		wantCode(t, "unknown key", err, "InvalidAccessKeyId")
	}
}

// tamperHeaderSigned changes one byte of the method, path, query, a signed
// header, the signature or the body of a header-signed request.
func tamperHeaderSigned(t *testing.T, seed uint64, v *Verifier, raw []byte, bodySigned bool) {
	t.Helper()
	// One byte of the request line: method, path or query.
	line := bytes.Index(raw, []byte(" HTTP/1.1\r\n"))
	for _, i := range []int{0, 6, line - 1} {
		bad := flip(raw, i)
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(bad)))
		if err != nil {
			continue // not a request any more
		}
		if _, err := v.Verify(r); err == nil {
			// The flip may have only changed how a byte is escaped.
			r0 := parse(t, raw)
			if r0.Method == r.Method && r0.URL.Path == r.URL.Path && canonicalQuery(mustQuery(r.URL.RawQuery), false) == canonicalQuery(mustQuery(r0.URL.RawQuery), false) {
				continue
			}
			t.Fatalf("seed %d: request line byte %d changed (%q), still verified", seed, i, bad[:line])
		} else {
			wantCode(t, fmt.Sprintf("seed %d request line byte %d", seed, i), err, "SignatureDoesNotMatch")
		}
	}
	// One byte of a signed header's value.
	for _, h := range []string{"x-amz-date", "host", "x-amz-meta-0", "x-amz-meta-1", "content-type", "range", "x-custom"} {
		i := headerLine(raw, h)
		if i < 0 {
			continue
		}
		for raw[i] == ' ' {
			i++
		}
		bad := flip(raw, i)
		_, _, err := verifyAll(v, bad)
		if h == "x-amz-date" {
			if err == nil {
				t.Fatalf("seed %d: x-amz-date changed, still verified", seed)
			}
			continue // a changed date may also be skewed or out of scope
		}
		wantCode(t, fmt.Sprintf("seed %d header %s", seed, h), err, "SignatureDoesNotMatch")
	}
	// One hex digit of the signature.
	i := bytes.Index(raw, []byte("Signature=")) + len("Signature=") + 5
	_, _, err := verifyAll(v, flip(raw, i))
	wantCode(t, fmt.Sprintf("seed %d signature", seed), err, "SignatureDoesNotMatch")
	// An x-amz header nobody signed.
	extra := bytes.Replace(raw, []byte("\r\n\r\n"), []byte("\r\nX-Amz-Meta-Injected: 1\r\n\r\n"), 1)
	_, _, err = verifyAll(v, extra)
	wantCode(t, fmt.Sprintf("seed %d unsigned header", seed), err, "AccessDenied")
	// One byte of the body.
	if start := bodyStart(raw); start < len(raw) {
		_, _, err := verifyAll(v, flip(raw, start+(len(raw)-start)/2))
		if bodySigned {
			wantCode(t, fmt.Sprintf("seed %d body", seed), err, "XAmzContentSHA256Mismatch")
		} else if err != nil {
			t.Fatalf("seed %d: an unsigned body changed: %v", seed, err)
		}
	}
}

// withBody replaces the body of a raw request and its Content-Length.
func withBody(t testing.TB, raw, body []byte) []byte {
	t.Helper()
	head := string(raw[:bodyStart(raw)])
	i := strings.Index(head, "\r\nContent-Length: ") + 2
	if i < 2 {
		return nil // sent with Transfer-Encoding: chunked
	}
	j := i + strings.Index(head[i:], "\r\n")
	return append([]byte(head[:i]+"Content-Length: "+strconv.Itoa(len(body))+head[j:]), body...)
}

// shuffleQuery puts the parameters of u's query in a random order.
func shuffleQuery(rng *rand.Rand, u *url.URL) {
	parts := strings.Split(u.RawQuery, "&")
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	u.RawQuery = strings.Join(parts, "&")
}

func mustQuery(raw string) params {
	q, err := parseQuery(raw)
	if err != nil {
		panic(err)
	}
	return q
}

// TestAWSSDKPresign presigns random requests with the AWS SDK's PresignHTTP
// and checks expiry, skew and tampering.
func TestAWSSDKPresign(t *testing.T) {
	sdk := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSecret}
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		method := []string{"GET", "PUT", "HEAD", "DELETE"}[rng.IntN(4)]
		host, region := hosts[rng.IntN(len(hosts))], regions[rng.IntN(len(regions))]
		q := randQuery(rng, false)
		expires := 1 + rng.Int64N(int64(MaxPresignExpiry/time.Second))
		if q != "" {
			q += "&"
		}
		q += "X-Amz-Expires=" + strconv.FormatInt(expires, 10)
		req := newRequest(t, method, host, randKey(rng), q, nil, rng.IntN(2) == 0)
		if rng.IntN(2) == 0 {
			req.Header.Set("X-Amz-Meta-Hoisted", "v") // the SDK moves it into the query
		}
		if rng.IntN(2) == 0 {
			req.Header.Set("Content-Type", "text/plain") // stays a signed header
		}
		when := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(300 * 24 * time.Hour))))
		signedURL, hdr, err := sdk.PresignHTTP(context.Background(), creds, req, UnsignedPayload, "s3", region, when)
		if err != nil {
			t.Fatal(err)
		}
		preq, err := http.NewRequest(method, signedURL, nil)
		if err != nil {
			t.Fatal(err)
		}
		shuffleQuery(rng, preq.URL)
		for k, vs := range hdr {
			if k != "Host" {
				preq.Header[k] = vs
			}
		}
		raw := wire(t, preq)
		life := time.Duration(expires) * time.Second
		at := when.Add(time.Duration(rng.Int64N(int64(life))))
		a, _, err := verifyAll(verifierAt(at), raw)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, raw)
		}
		if !a.Presigned || a.User != testUser || a.Payload != PayloadUnsigned {
			t.Fatalf("seed %d: auth %+v", seed, a)
		}
		_, _, err = verifyAll(verifierAt(when.Add(life+time.Second)), raw)
		wantCode(t, "expired", err, "AccessDenied")
		if !strings.Contains(err.Error(), "Request has expired") {
			t.Fatalf("seed %d: expired: %v", seed, err)
		}
		_, _, err = verifyAll(verifierAt(when.Add(-MaxSkew-time.Minute)), raw)
		wantCode(t, "not yet valid", err, "AccessDenied")
		vr := verifierAt(at)
		vr.Region = "elsewhere"
		_, _, err = verifyAll(vr, raw)
		wantCode(t, "presigned for another region", err, "AuthorizationQueryParametersError")
		// Change a byte of the path, of X-Amz-Expires, of the signature.
		for _, what := range []string{"path", "X-Amz-Expires=", "X-Amz-Signature=", "X-Amz-Credential="} {
			var i int
			if what == "path" {
				i = len(method) + 2
			} else {
				i = bytes.Index(raw, []byte(what)) + len(what)
			}
			if what == "X-Amz-Credential=" {
				i += len(testAK) + 3 + 4 // in the scope's date
			}
			bad := flip(raw, i)
			_, _, err := verifyAll(verifierAt(at), bad)
			switch {
			case what == "X-Amz-Expires=" && (errors.Is(err, ErrExpired) || errors.Is(err, ErrAuthorizationQueryParameters)):
			case what == "X-Amz-Credential=":
				wantCode(t, fmt.Sprintf("seed %d: %s", seed, what), err, "AuthorizationQueryParametersError")
			default:
				wantCode(t, fmt.Sprintf("seed %d: %s", seed, what), err, "SignatureDoesNotMatch")
			}
		}
		// Another host (the URL was signed for one host and port).
		other := bytes.Replace(raw, []byte("Host: "+host), []byte("Host: evil.example:1"), 1)
		_, _, err = verifyAll(verifierAt(at), other)
		wantCode(t, "other host", err, "SignatureDoesNotMatch")
	}
}

// minioSigned signs req with minio-go's SignV4 (clock: now).
func TestMinioHeaderAndPresign(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		method := []string{"GET", "PUT", "HEAD", "DELETE"}[rng.IntN(4)]
		var body []byte
		if method == "PUT" {
			body = randBody(rng, 2048)
		}
		host, region := hosts[rng.IntN(len(hosts))], regions[rng.IntN(len(regions))]
		req := newRequest(t, method, host, randKey(rng), randQuery(rng, true), body, false)
		randHeaders(rng, req.Header)
		presign := rng.IntN(2) == 0
		var out *http.Request
		if presign {
			out = signer.PreSignV4(*req, testAK, testSecret, "", region, 1+rng.Int64N(604800))
		} else {
			payload := UnsignedPayload
			if len(body) > 0 && rng.IntN(2) == 0 {
				payload = sha256hex(body)
			}
			req.Header.Set("X-Amz-Content-Sha256", payload)
			out = signer.SignV4(*req, testAK, testSecret, "", region)
		}
		raw := wire(t, out)
		v := &Verifier{Lookup: lookup}
		a, got, err := verifyAll(v, raw)
		if err != nil {
			t.Fatalf("seed %d presign=%v: %v\n%s", seed, presign, err, raw)
		}
		if a.Presigned != presign || a.User != testUser || !bytes.Equal(got, body) {
			t.Fatalf("seed %d: auth %+v", seed, a)
		}
		if !presign {
			tamperHeaderSigned(t, seed, v, raw, a.Payload == PayloadSHA256 && len(body) > 0)
		}
	}
}

// minioHasher adapts sha256 to minio-go's hasher interface.
type minioHasher struct{ hashWriter }

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
	Reset()
	Size() int
	BlockSize() int
}

func (minioHasher) Close() {}

func crc32b64(b []byte) string {
	var s [4]byte
	binary.BigEndian.PutUint32(s[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(s[:])
}

// streamingRequest signs a PUT with an aws-chunked body with minio-go: mode
// is one of the three STREAMING payloads.
func streamingRequest(t testing.TB, rng *rand.Rand, mode Payload, body []byte, when time.Time) []byte {
	t.Helper()
	host, region := hosts[rng.IntN(len(hosts))], regions[rng.IntN(len(regions))]
	req := newRequest(t, "PUT", host, randKey(rng), randQuery(rng, true), body, false)
	randHeaders(rng, req.Header)
	var trailer http.Header
	if mode != PayloadStreamingSigned {
		trailer = http.Header{"x-amz-checksum-crc32": {crc32b64(body)}}
	}
	var out *http.Request
	switch mode {
	case PayloadStreamingSigned, PayloadStreamingSignedTrailer:
		req.Trailer = trailer
		out = signer.StreamingSignV4(req, testAK, testSecret, "", region, int64(len(body)), when, minioHasher{sha256.New()})
	case PayloadStreamingUnsignedTrailer:
		req.Header.Set("X-Amz-Content-Sha256", StreamingUnsignedTrailer)
		out = signer.SignV4Trailer(*req, testAK, testSecret, "", region, trailer)
	}
	return wire(t, out)
}

// TestMinioStreaming checks aws-chunked bodies of all three kinds, signed by
// minio-go, and tampers with their data, chunk signatures, trailers, framing
// and length.
func TestMinioStreaming(t *testing.T) {
	modes := []Payload{PayloadStreamingSigned, PayloadStreamingSignedTrailer, PayloadStreamingUnsignedTrailer}
	for seed := uint64(0); seed < 90; seed++ {
		rng := rand.New(rand.NewPCG(seed, 4))
		mode := modes[seed%3]
		sizes := []int{0, 1, 65535, 65536, 65537, 3*65536 + 100}
		body := randBody(rng, 0)
		if seed%2 == 0 {
			body = make([]byte, sizes[rng.IntN(len(sizes))])
		} else {
			body = randBody(rng, 200_000)
		}
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		when := time.Now().UTC().Truncate(time.Second) // minio-go's unsigned-trailer signer uses the clock
		raw := streamingRequest(t, rng, mode, body, when)
		v := &Verifier{Lookup: lookup, Now: func() time.Time { return when.Add(time.Minute) }}
		a, got, err := verifyAll(v, raw)
		if err != nil {
			t.Fatalf("seed %d mode %d len %d: %v\n%.2000s", seed, mode, len(body), err, raw)
		}
		if a.Payload != mode || !a.Chunked || !bytes.Equal(got, body) || a.DecodedLength != int64(len(body)) {
			t.Fatalf("seed %d: mode %d/%d, %d bytes of %d, decoded length %d", seed, a.Payload, mode, len(got), len(body), a.DecodedLength)
		}
		if mode != PayloadStreamingSigned {
			if tr := a.Trailer(); tr.Get("X-Amz-Checksum-Crc32") != crc32b64(body) || len(tr) != 1 {
				t.Fatalf("seed %d: trailer %v", seed, tr)
			}
		}
		tamperStreaming(t, seed, v, raw, mode, len(body))
	}
}

func tamperStreaming(t *testing.T, seed uint64, v *Verifier, raw []byte, mode Payload, n int) {
	t.Helper()
	start := bodyStart(raw)
	signedChunks := mode != PayloadStreamingUnsignedTrailer
	check := func(what string, bad []byte, code string) {
		t.Helper()
		if bad == nil {
			return
		}
		_, _, err := verifyAll(v, bad)
		if code == "" {
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, what, err)
			}
			return
		}
		wantCode(t, fmt.Sprintf("seed %d mode %d: %s", seed, mode, what), err, code)
	}
	// A data byte of the first chunk.
	if n > 0 {
		first := start + bytes.Index(raw[start:], []byte("\r\n")) + 2
		code := "SignatureDoesNotMatch"
		if !signedChunks {
			code = "" // unsigned: the trailing checksum is the gateway's to compare
		}
		check("data byte", flip(raw, first+n/2%65536), code)
	}
	if signedChunks {
		// The first and the final chunk's signatures.
		const cs = ";chunk-signature="
		check("first chunk signature", flip(raw, start+bytes.Index(raw[start:], []byte(cs))+len(cs)+7), "SignatureDoesNotMatch")
		check("final chunk signature", flip(raw, bytes.LastIndex(raw, []byte(cs))+len(cs)+7), "SignatureDoesNotMatch")
		// The seed signature, in the Authorization header.
		check("seed signature", flip(raw, bytes.Index(raw, []byte("Signature="))+len("Signature=")+3), "SignatureDoesNotMatch")
	}
	if mode != PayloadStreamingSigned {
		tv := bytes.LastIndex(raw, []byte("x-amz-checksum-crc32:")) + len("x-amz-checksum-crc32:")
		if mode == PayloadStreamingSignedTrailer {
			check("trailer value", flip(raw, tv+1), "SignatureDoesNotMatch")
			ts := bytes.LastIndex(raw, []byte("x-amz-trailer-signature:")) + len("x-amz-trailer-signature:")
			check("trailer signature", flip(raw, ts+10), "SignatureDoesNotMatch")
			// Without its signature.
			check("trailer signature removed", withBody(t, raw, append(bytes.Clone(raw[start:ts-len("x-amz-trailer-signature:")]), "\r\n"...)), "MalformedTrailerError")
		}
		check("undeclared trailer", bytes.Replace(raw, []byte("x-amz-checksum-crc32:"), []byte("x-amz-checksum-crc33:"), 1), "MalformedTrailerError")
	}
	// The body cut short, anywhere.
	for _, cut := range []int{1, 2, 5, 40, (len(raw) - start) / 2} {
		if cut < len(raw)-start {
			r := parse(t, raw[:len(raw)-cut])
			r.ContentLength = int64(len(raw) - start - cut)
			a, err := v.Verify(r)
			if err != nil {
				t.Fatalf("seed %d: headers of a cut request: %v", seed, err)
			}
			_, err = io.ReadAll(a.Body)
			if err == nil {
				t.Fatalf("seed %d: body cut by %d bytes read without error", seed, cut)
			}
		}
	}
	// A lying x-amz-decoded-content-length (signed, so the signature fails
	// first); and the header check alone.
	check("decoded length", bytes.Replace(raw, []byte("X-Amz-Decoded-Content-Length: "+strconv.Itoa(n)), []byte("X-Amz-Decoded-Content-Length: "+strconv.Itoa(n+1)), 1), "SignatureDoesNotMatch")
}

// TestUnsignedPayloadAWSChunked: an aws-chunked body under UNSIGNED-PAYLOAD
// (as some SDKs send it), signed by the AWS SDK, is decoded; without
// x-amz-decoded-content-length it is passed through as it is.
func TestUnsignedPayloadAWSChunked(t *testing.T) {
	sdk := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSecret}
	data := []byte("some object data")
	body := []byte("10\r\nsome object data\r\n0\r\nx-amz-checksum-crc32:" + crc32b64(data) + "\r\n\r\n")
	for _, declared := range []bool{true, false} {
		req := newRequest(t, "PUT", "localhost:9000", "k", "", body, true)
		req.Header.Set("X-Amz-Content-Sha256", UnsignedPayload)
		req.Header.Set("Content-Encoding", "aws-chunked")
		if declared {
			req.Header.Set("X-Amz-Decoded-Content-Length", strconv.Itoa(len(data)))
			req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
		}
		when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		if err := sdk.SignHTTP(context.Background(), creds, req, UnsignedPayload, "s3", "us-east-1", when); err != nil {
			t.Fatal(err)
		}
		a, got, err := verifyAll(verifierAt(when), wire(t, req))
		if err != nil {
			t.Fatal(err)
		}
		if declared && (!a.Chunked || !bytes.Equal(got, data) || a.Trailer().Get("X-Amz-Checksum-Crc32") != crc32b64(data)) {
			t.Fatalf("decoded %q, chunked %v, trailer %v", got, a.Chunked, a.Trailer())
		}
		if !declared && (a.Chunked || !bytes.Equal(got, body)) {
			t.Fatalf("undeclared: %q, chunked %v", got, a.Chunked)
		}
	}
}
