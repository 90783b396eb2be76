package sigv4

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// The decoder alone, fed bodies made here: a fixed key, date, scope and
// seed signature.
var (
	fixKey   = signingKey(testSecret, "20260101", "us-east-1")
	fixDate  = "20260101T000000Z"
	fixScope = "20260101/us-east-1/s3/aws4_request"
	fixSeed  = sha256.Sum256([]byte("seed"))
)

// encodeChunks writes an aws-chunked body of the given chunks (signed
// when mode says so) and trailers ("name:value"), the way the AWS
// documentation lays it out. The signatures are computed with the
// package's own signature function: TestAWSDocStreamingExample and the
// minio-go oracle pin that against outside signers.
func encodeChunks(mode Payload, chunks [][]byte, trailers []string) []byte {
	signed := mode == PayloadStreamingSigned || mode == PayloadStreamingSignedTrailer
	prev := hex.EncodeToString(fixSeed[:])
	var b bytes.Buffer
	for i := 0; i <= len(chunks); i++ {
		var data []byte
		if i < len(chunks) {
			data = chunks[i]
		}
		b.WriteString(strconv.FormatInt(int64(len(data)), 16))
		if signed {
			sum := sha256.Sum256(data)
			sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + fixDate + "\n" + fixScope + "\n" + prev + "\n" + emptySHA256 + "\n" + hex.EncodeToString(sum[:])
			sig := signature(fixKey, []byte(sts))
			prev = hex.EncodeToString(sig[:])
			b.WriteString(";chunk-signature=" + prev)
		}
		b.WriteString("\r\n")
		if len(data) > 0 {
			b.Write(data)
			b.WriteString("\r\n")
		}
	}
	if mode == PayloadStreamingSigned {
		b.WriteString("\r\n")
		return b.Bytes()
	}
	var canon string
	for _, t := range trailers {
		b.WriteString(t + "\r\n")
		canon += t + "\n"
	}
	if signed {
		sum := sha256.Sum256([]byte(canon))
		sts := "AWS4-HMAC-SHA256-TRAILER\n" + fixDate + "\n" + fixScope + "\n" + prev + "\n" + hex.EncodeToString(sum[:])
		sig := signature(fixKey, []byte(sts))
		b.WriteString("x-amz-trailer-signature:" + hex.EncodeToString(sig[:]) + "\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

func decoder(body io.Reader, mode Payload, declaredLen int64, declared []string) *chunkReader {
	c := newChunkReader(body, mode, declaredLen, declared)
	if mode != PayloadStreamingUnsignedTrailer {
		c.sign(fixKey, fixDate, fixScope, fixSeed)
	}
	return c
}

// readIn reads r to its end in pieces of random sizes, as a server would.
func readIn(rng *rand.Rand, r io.Reader) ([]byte, error) {
	var out []byte
	buf := make([]byte, 70_000)
	for {
		n, err := r.Read(buf[:1+rng.IntN(len(buf)-1)])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestChunkedRoundTrip decodes random chunkings of random data in all three
// modes, read in random pieces, with and without the declared length.
func TestChunkedRoundTrip(t *testing.T) {
	modes := []Payload{PayloadStreamingSigned, PayloadStreamingSignedTrailer, PayloadStreamingUnsignedTrailer}
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		mode := modes[seed%3]
		data := randBody(rng, 300_000)
		var chunks [][]byte
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(100_000))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		var trailers, declared []string
		if mode != PayloadStreamingSigned {
			for i := rng.IntN(3); i > 0; i-- {
				name := "x-amz-checksum-" + strconv.Itoa(i)
				declared = append(declared, name)
				trailers = append(trailers, name+":v"+strconv.Itoa(rng.IntN(1000)))
			}
		}
		body := encodeChunks(mode, chunks, trailers)
		declaredLen := int64(len(data))
		if rng.IntN(2) == 0 {
			declaredLen = -1
		}
		c := decoder(bytes.NewReader(body), mode, declaredLen, declared)
		got, err := readIn(rng, c)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("seed %d mode %d: %d of %d bytes, %v", seed, mode, len(got), len(data), err)
		}
		if len(c.trailer) != len(trailers) {
			t.Fatalf("seed %d: trailers %v, sent %v", seed, c.trailer, trailers)
		}
		for _, tr := range trailers {
			name, value, _ := strings.Cut(tr, ":")
			if c.trailer.Get(name) != value {
				t.Fatalf("seed %d: trailer %s = %q, sent %q", seed, name, c.trailer.Get(name), value)
			}
		}
		// Every single-byte change of a signed body fails; a change of an
		// unsigned one fails or changes only the data or trailer values.
		for k := 0; k < 20 && len(body) > 0; k++ {
			i := rng.IntN(len(body))
			bad := bytes.Clone(body)
			bad[i] ^= byte(1 + rng.IntN(255))
			c := decoder(bytes.NewReader(bad), mode, declaredLen, declared)
			got, err := readIn(rng, c)
			if err == nil && mode != PayloadStreamingUnsignedTrailer {
				t.Fatalf("seed %d mode %d: byte %d changed, decoded without error", seed, mode, i)
			}
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Fatalf("seed %d: error %v is not an *Error", seed, err)
			}
			if err == nil && len(got) != len(data) {
				t.Fatalf("seed %d: an unsigned body changed length silently", seed)
			}
		}
		// A declared length one off fails.
		if declaredLen >= 0 {
			for _, d := range []int64{declaredLen - 1, declaredLen + 1} {
				if d < 0 {
					continue
				}
				_, err := readIn(rng, decoder(bytes.NewReader(body), mode, d, declared))
				wantCode(t, "declared length", err, "IncompleteBody")
			}
		}
	}
}

// TestChunkedVariants: the layouts minio-go writes (trailer lines ending in
// LF, blank lines between) are accepted; malformed framing is refused with
// the right code.
func TestChunkedVariants(t *testing.T) {
	data := []byte("hello, world")
	ok := map[string]string{
		"LF trailer, extra CRLFs":   "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:abc=\n\r\n\r\n",
		"CRLF trailer":              "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:abc=\r\n\r\n",
		"trailer without final end": "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:abc=",
		"upper-case hex, zeros":     "0000C\r\nhello, world\r\n0\r\nX-Amz-Checksum-CRC32: abc=\r\n\r\n",
	}
	for name, body := range ok {
		c := decoder(strings.NewReader(body), PayloadStreamingUnsignedTrailer, 12, []string{"x-amz-checksum-crc32"})
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, data) || c.trailer.Get("X-Amz-Checksum-Crc32") != "abc=" {
			t.Errorf("%s: %q, %v, trailer %v", name, got, err, c.trailer)
		}
	}
	bad := map[string]string{
		"no final chunk":           "c\r\nhello, world\r\n",
		"short data":               "c\r\nhello, worl\r\n0\r\n\r\n",
		"long data":                "c\r\nhello, world!\r\n0\r\n\r\n",
		"not hex":                  "x\r\nhello, world\r\n0\r\n\r\n",
		"negative":                 "-c\r\nhello, world\r\n0\r\n\r\n",
		"too long size":            "00000000c\r\nhello, world\r\n0\r\n\r\n",
		"chunk over 16 MiB":        "1000001\r\n",
		"extension when unsigned":  "c;chunk-signature=00\r\nhello, world\r\n0\r\n\r\n",
		"LF only chunk line":       "c\nhello, world\r\n0\r\n\r\n",
		"undeclared trailer":       "c\r\nhello, world\r\n0\r\nx-amz-other:1\r\n\r\n",
		"trailer twice":            "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:a\r\nx-amz-checksum-crc32:a\r\n\r\n",
		"trailer not name:value":   "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32\r\n\r\n",
		"signature when unsigned":  "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:a\r\nx-amz-trailer-signature:" + strings.Repeat("0", 64) + "\r\n\r\n",
		"huge trailer line":        "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:" + strings.Repeat("a", 600) + "\r\n\r\n",
		"too many trailer bytes":   "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:a\r\n" + strings.Repeat("\r\n", 3000),
		"CR inside a trailer line": "c\r\nhello, world\r\n0\r\nx-amz-checksum-crc32:a\rb\r\n\r\n",
	}
	for name, body := range bad {
		c := decoder(strings.NewReader(body), PayloadStreamingUnsignedTrailer, -1, []string{"x-amz-checksum-crc32"})
		got, err := io.ReadAll(c)
		var e *Error
		if err == nil || !errors.As(err, &e) || e.Status != 400 {
			t.Errorf("%s: decoded %q, %v", name, got, err)
		}
	}
	// A declared trailer that never comes.
	c := decoder(strings.NewReader("0\r\n\r\n"), PayloadStreamingUnsignedTrailer, -1, []string{"x-amz-checksum-crc32"})
	_, err := io.ReadAll(c)
	wantCode(t, "missing trailer", err, "MalformedTrailerError")
	// Signed: data after the final CRLF; no CRLF at all.
	body := encodeChunks(PayloadStreamingSigned, [][]byte{data}, nil)
	_, err = io.ReadAll(decoder(bytes.NewReader(append(bytes.Clone(body), 'x')), PayloadStreamingSigned, -1, nil))
	wantCode(t, "data after the end", err, "IncompleteBody")
	_, err = io.ReadAll(decoder(bytes.NewReader(body[:len(body)-2]), PayloadStreamingSigned, -1, nil))
	wantCode(t, "no final CRLF", err, "IncompleteBody")
	// A chunk of the right size but over the limit.
	_, err = io.ReadAll(decoder(strings.NewReader("1000001;chunk-signature="+strings.Repeat("0", 64)+"\r\n"), PayloadStreamingSigned, -1, nil))
	wantCode(t, "chunk over 16 MiB", err, "InvalidChunkSizeError")
}

// endless yields a header that declares a chunk, then the same byte for
// ever: the decoder's memory must not grow with what it reads.
type endless struct {
	head []byte
	fill byte
}

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.head)
	e.head = e.head[n:]
	for i := n; i < len(p); i++ {
		p[i] = e.fill
	}
	return len(p), nil
}

// TestChunkedMemoryBound streams hostile bodies (the largest chunk
// repeated, a chunk line that never ends, trailer lines that never end)
// and checks that the decoder allocates a fixed amount whatever it reads.
func TestChunkedMemoryBound(t *testing.T) {
	bigChunk := "1000000;chunk-signature=" + strings.Repeat("0", 64) + "\r\n"
	cases := []struct {
		name string
		mode Payload
		src  io.Reader
		read int64 // bytes to pull through
	}{
		{"largest chunk, unsigned", PayloadStreamingUnsignedTrailer, &endless{head: []byte("1000000\r\n"), fill: 'a'}, 16 << 20},
		{"largest chunk, signed", PayloadStreamingSigned, &endless{head: []byte(bigChunk), fill: 'a'}, 16 << 20},
		{"chunk line without end", PayloadStreamingSigned, &endless{fill: '0'}, 1 << 20},
		{"trailer line without end", PayloadStreamingUnsignedTrailer, &endless{head: []byte("0\r\n"), fill: 'x'}, 1 << 20},
		{"blank trailer lines", PayloadStreamingUnsignedTrailer, &endless{head: []byte("0\r\n"), fill: '\n'}, 1 << 20},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		d := decoder(c.src, c.mode, -1, []string{"x-amz-checksum-crc32"})
		n, err := io.Copy(io.Discard, io.LimitReader(d, c.read))
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<10 {
			t.Errorf("%s: allocated %d bytes reading %d", c.name, alloc, n)
		}
		if c.read > 1<<20 && n < c.read-1 {
			t.Errorf("%s: decoded only %d bytes: %v", c.name, n, err)
		}
		if c.read == 1<<20 && err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// BenchmarkChunked decodes a 64 MiB body in 64 KiB chunks (the size minio-go
// and the AWS SDKs use), in MB/s of decoded data.
func BenchmarkChunked(b *testing.B) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i)
	}
	chunks := make([][]byte, 1024)
	for i := range chunks {
		chunks[i] = data
	}
	for _, mode := range []Payload{PayloadStreamingSigned, PayloadStreamingUnsignedTrailer} {
		body := encodeChunks(mode, chunks, []string{"x-amz-checksum-crc32:AAAAAA=="})
		name := map[Payload]string{PayloadStreamingSigned: "signed", PayloadStreamingUnsignedTrailer: "unsigned-trailer"}[mode]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 256<<10)
			b.SetBytes(int64(len(chunks) * len(data)))
			for b.Loop() {
				d := decoder(bytes.NewReader(body), mode, -1, []string{"x-amz-checksum-crc32"})
				if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{d}, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyHeader is the cost of checking a header-signed request
// (no body).
func BenchmarkVerifyHeader(b *testing.B) {
	raw := "GET /test.txt HTTP/1.1\r\n" +
		"Host: examplebucket.s3.amazonaws.com\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n" +
		"Range: bytes=0-9\r\n" +
		"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n" +
		"x-amz-date: 20130524T000000Z\r\n\r\n"
	r := parse(b, []byte(raw))
	v := verifierAt(awsDocDate)
	for b.Loop() {
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}
