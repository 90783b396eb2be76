package sigv4

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// emptySHA256 is the hex SHA-256 of nothing, a fixed line of every chunk's
// string to sign.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

const (
	maxChunkLine   = 128 // "hex-size;chunk-signature=<64 hex>\r\n" is at most 91 bytes
	maxTrailerLine = 512
	readBufferSize = 16 << 10
)

// chunkReader decodes an aws-chunked body (see the package doc for the
// format) as it streams: it holds one read buffer and one running SHA-256,
// whatever the body's size. Data is handed out as it arrives; a chunk's
// signature is checked once its last byte has been read, before anything of
// the next chunk is returned.
type chunkReader struct {
	src     *bufio.Reader
	mode    Payload
	signed  bool
	trailed bool

	// Signing state (signed modes).
	key       []byte
	chunkPre  []byte   // "AWS4-HMAC-SHA256-PAYLOAD\n" date "\n" scope "\n"
	trailPre  []byte   // "AWS4-HMAC-SHA256-TRAILER\n" date "\n" scope "\n"
	prev      [64]byte // hex of the previous signature
	h         hash.Hash
	want      [32]byte // the current chunk's signature as sent
	stringBuf []byte

	left        int64 // data bytes of the current chunk still to read
	decoded     int64 // data bytes so far
	declaredLen int64 // x-amz-decoded-content-length, or -1
	declared    []string
	trailer     http.Header
	err         error // sticky; io.EOF once the body ended well
}

func newChunkReader(body io.Reader, mode Payload, declaredLen int64, declared []string) *chunkReader {
	return &chunkReader{
		src:         bufio.NewReaderSize(incomplete{body}, readBufferSize),
		mode:        mode,
		signed:      mode == PayloadStreamingSigned || mode == PayloadStreamingSignedTrailer,
		trailed:     mode == PayloadStreamingSignedTrailer || mode == PayloadStreamingUnsignedTrailer,
		declaredLen: declaredLen,
		declared:    declared,
	}
}

// sign sets the key and the seed signature chunk signatures chain from.
func (c *chunkReader) sign(key []byte, amzDate, scope string, seed [32]byte) {
	c.key = key
	c.chunkPre = []byte("AWS4-HMAC-SHA256-PAYLOAD\n" + amzDate + "\n" + scope + "\n")
	c.trailPre = []byte("AWS4-HMAC-SHA256-TRAILER\n" + amzDate + "\n" + scope + "\n")
	hex.Encode(c.prev[:], seed[:])
	c.h = sha256.New()
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.left == 0 {
		if err := c.header(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.src.Read(p)
	if n > 0 {
		if c.signed {
			c.h.Write(p[:n])
		}
		c.left -= int64(n)
		c.decoded += int64(n)
		if c.declaredLen >= 0 && c.decoded > c.declaredLen {
			err = ErrIncompleteBody.with("The aws-chunked body holds more data than x-amz-decoded-content-length says.")
		} else if c.left == 0 {
			err = c.endChunk()
		}
	}
	if err == io.EOF {
		err = ErrIncompleteBody
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// header reads a chunk header; at the final chunk it reads the trailers and
// returns io.EOF if all is well.
func (c *chunkReader) header() error {
	line, err := c.line(maxChunkLine, true)
	if err != nil {
		return err
	}
	sizeHex, ext, hasExt := strings.Cut(line, ";")
	if sizeHex == "" || len(sizeHex) > 8 || !isHex(sizeHex) {
		return malformedChunk("a chunk size is not hexadecimal")
	}
	var size int64
	for i := 0; i < len(sizeHex); i++ {
		size = size<<4 | int64(unhex(sizeHex[i]))
	}
	if size > MaxChunkBytes {
		return ErrInvalidChunkSize
	}
	if c.signed {
		sig, ok := strings.CutPrefix(ext, "chunk-signature=")
		if !hasExt || !ok || len(sig) != 64 || !isHex(sig) {
			return malformedChunk("a chunk lacks its chunk-signature")
		}
		hex.Decode(c.want[:], []byte(sig))
		c.h.Reset()
	} else if hasExt {
		return malformedChunk("a chunk of an unsigned body has an extension")
	}
	if size > 0 {
		c.left = size
		return nil
	}
	// The final, empty chunk.
	if c.signed {
		if err := c.checkChunk(); err != nil {
			return err
		}
	}
	if c.trailed {
		if err := c.trailers(); err != nil {
			return err
		}
	} else {
		// An empty line ends the body.
		switch line, err := c.line(2, true); {
		case err != nil:
			return err
		case line != "":
			return malformedChunk("data follows the final chunk")
		}
	}
	if _, err := c.src.ReadByte(); err != io.EOF {
		if err == nil {
			return malformedChunk("data follows the end of the aws-chunked body")
		}
		return err
	}
	if c.declaredLen >= 0 && c.decoded != c.declaredLen {
		return ErrIncompleteBody.with("The aws-chunked body holds less data than x-amz-decoded-content-length says.")
	}
	return io.EOF
}

// endChunk reads the CRLF after a chunk's data and checks its signature.
func (c *chunkReader) endChunk() error {
	line, err := c.line(2, true)
	if err != nil {
		return err
	}
	if line != "" {
		return malformedChunk("a chunk's data is not followed by CRLF")
	}
	if c.signed {
		return c.checkChunk()
	}
	return nil
}

// checkChunk compares the current chunk's signature, over
//
//	"AWS4-HMAC-SHA256-PAYLOAD\n" date "\n" scope "\n" previous-signature "\n" hex(sha256("")) "\n" hex(sha256(data))
//
// and makes it the previous one.
func (c *chunkReader) checkChunk() error {
	var sum [32]byte
	c.h.Sum(sum[:0])
	b := append(c.stringBuf[:0], c.chunkPre...)
	b = append(b, c.prev[:]...)
	b = append(b, '\n')
	b = append(b, emptySHA256...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, sum[:])
	c.stringBuf = b
	got := signature(c.key, b)
	if !hmac.Equal(got[:], c.want[:]) {
		return ErrSignatureDoesNotMatch.with("The signature of a chunk of the aws-chunked body does not match.")
	}
	hex.Encode(c.prev[:], c.want[:])
	return nil
}

// trailers reads the trailer section after the final chunk, up to the end
// of the body: lines "name:value" (CRLF or LF ends each; empty lines are
// skipped), then, for a signed body, "x-amz-trailer-signature:<hex>", over
//
//	"AWS4-HMAC-SHA256-TRAILER\n" date "\n" scope "\n" previous-signature "\n" hex(sha256(trailers))
//
// where trailers is each "name:value\n" in the order sent.
func (c *chunkReader) trailers() error {
	var (
		canon  []byte
		sig    [32]byte
		hasSig bool
		total  int
	)
	for {
		line, err := c.line(maxTrailerLine, false)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		total += len(line) + 2
		if total > MaxTrailerBytes {
			return ErrMalformedTrailer.with("The trailers are too long.")
		}
		if line == "" {
			continue
		}
		if hasSig {
			return ErrMalformedTrailer.with("A trailer follows x-amz-trailer-signature.")
		}
		name, value, ok := strings.Cut(line, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		value = strings.Trim(value, " \t")
		if !ok || !isToken(name) {
			return ErrMalformedTrailer
		}
		if name == "x-amz-trailer-signature" {
			if !c.signed || len(value) != 64 || !isHex(value) {
				return ErrMalformedTrailer.with("x-amz-trailer-signature is not valid here.")
			}
			hex.Decode(sig[:], []byte(value))
			hasSig = true
			continue
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if !contains(c.declared, name) || c.trailer[key] != nil {
			return ErrMalformedTrailer.with("The trailer " + name + " is not declared in x-amz-trailer, or sent twice.")
		}
		if c.trailer == nil {
			c.trailer = make(http.Header, len(c.declared))
		}
		c.trailer[key] = []string{value}
		canon = append(canon, name...)
		canon = append(canon, ':')
		canon = append(canon, value...)
		canon = append(canon, '\n')
	}
	if len(c.trailer) != len(c.declared) {
		return ErrMalformedTrailer.with("A trailer declared in x-amz-trailer is missing.")
	}
	if !c.signed {
		return nil
	}
	if !hasSig {
		return ErrMalformedTrailer.with("x-amz-trailer-signature is missing.")
	}
	sum := sha256.Sum256(canon)
	b := append(c.stringBuf[:0], c.trailPre...)
	b = append(b, c.prev[:]...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, sum[:])
	c.stringBuf = b
	got := signature(c.key, b)
	if !hmac.Equal(got[:], sig[:]) {
		return ErrSignatureDoesNotMatch.with("The signature of the trailers does not match.")
	}
	return nil
}

// line reads one line of at most max bytes before its end, which is CRLF,
// or LF too unless crlf. It returns io.EOF at the very end of the body and
// IncompleteBody when the body ends inside a line.
func (c *chunkReader) line(max int, crlf bool) (string, error) {
	b, err := c.src.ReadSlice('\n')
	switch {
	case err == io.EOF && len(b) == 0:
		if crlf {
			return "", ErrIncompleteBody
		}
		return "", io.EOF
	case err == io.EOF || err == bufio.ErrBufferFull:
		if err == io.EOF && !crlf && len(b) <= max {
			return string(b), nil // the last trailer line may lack its end
		}
		if err == io.EOF {
			return "", ErrIncompleteBody
		}
		return "", malformedChunk("a line is too long")
	case err != nil:
		return "", err
	}
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	} else if crlf {
		return "", malformedChunk("a line does not end with CRLF")
	}
	if len(b) > max || bytes.IndexByte(b, '\r') >= 0 {
		return "", malformedChunk("a line is too long or holds a CR")
	}
	return string(b), nil
}

// incomplete reports a body that ends before its Content-Length (net/http's
// io.ErrUnexpectedEOF) as S3 does.
type incomplete struct{ r io.Reader }

func (i incomplete) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if err == io.ErrUnexpectedEOF {
		err = ErrIncompleteBody
	}
	return n, err
}

func malformedChunk(why string) *Error {
	return ErrIncompleteBody.with("The aws-chunked body is malformed: " + why + ".")
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
