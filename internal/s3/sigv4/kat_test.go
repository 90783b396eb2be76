package sigv4

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The examples of S3's documentation: "Signature Calculations for the
// Authorization Header: Transferring Payload in Multiple Chunks" (a PUT of
// 66,560 bytes of 'a' in a 64 KiB chunk, a 1 KiB chunk and the final one)
// and "... Including Trailing Headers".
var awsDocDate = time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)

func awsDocRequest(contentSHA, signedHeaders, sig string, extra string, body []byte) []byte {
	head := "PUT /examplebucket/chunkObject.txt HTTP/1.1\r\n" +
		"Host: s3.amazonaws.com\r\n" +
		"x-amz-date: 20130524T000000Z\r\n" +
		"x-amz-storage-class: REDUCED_REDUNDANCY\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=" + signedHeaders + ",Signature=" + sig + "\r\n" +
		"x-amz-content-sha256: " + contentSHA + "\r\n" +
		"Content-Encoding: aws-chunked\r\n" +
		"x-amz-decoded-content-length: 66560\r\n" +
		extra +
		"Content-Length: " + itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}

func itoa(n int) string { return strings.TrimSpace(strings.Repeat(" ", 0) + string(appendInt(nil, n))) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func TestAWSDocStreamingExample(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	body := []byte("10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n" + a(65536) + "\r\n" +
		"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n" + a(1024) + "\r\n" +
		"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n")
	if len(body) != 66824 {
		t.Fatalf("the example body is %d bytes, the documentation says 66824", len(body))
	}
	raw := awsDocRequest(StreamingSigned,
		"content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class",
		"4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9", "", body)
	v := verifierAt(awsDocDate.Add(time.Minute))
	au, got, err := verifyAll(v, raw)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != a(66560) || au.Payload != PayloadStreamingSigned || au.Region != "us-east-1" {
		t.Fatalf("decoded %d bytes, auth %+v", len(got), au)
	}
	// The final chunk's signature is checked: change its last digit.
	bad := bytes.Replace(raw, []byte("449df9\r\n"), []byte("449df8\r\n"), 1)
	_, _, err = verifyAll(v, bad)
	wantCode(t, "final chunk", err, "SignatureDoesNotMatch")
	// Drop the final chunk: the body is incomplete.
	cut := raw[:len(raw)-86]
	r := parse(t, cut)
	au, err = v.Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(au.Body)
	wantCode(t, "no final chunk", err, "IncompleteBody")
}

// The trailer example: its seed signature (the request's headers) and the
// signature of its trailer after a final chunk signature.
func TestAWSDocTrailerExample(t *testing.T) {
	raw := awsDocRequest(StreamingSignedTrailer,
		"content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
		"106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e", "x-amz-trailer: x-amz-checksum-crc32c\r\n", nil)
	r := parse(t, raw)
	r.Header.Del("Content-Length") // not signed in this example
	au, err := verifierAt(awsDocDate).Verify(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(au.DeclaredTrailers) != 1 || au.DeclaredTrailers[0] != "x-amz-checksum-crc32c" {
		t.Fatalf("declared %v", au.DeclaredTrailers)
	}

	key := signingKey(testSecret, "20130524", "us-east-1")
	for _, ok := range []bool{true, false} {
		sig := "41e14ac611e27a8bb3d66c3bad6856f209297767d5dd4fc87d8fa9e422e03faf"
		if !ok {
			sig = "41e14ac611e27a8bb3d66c3bad6856f209297767d5dd4fc87d8fa9e422e03fae"
		}
		c := newChunkReader(strings.NewReader("x-amz-checksum-crc32c:wdBDMA==\r\nx-amz-trailer-signature:"+sig+"\r\n\r\n"),
			PayloadStreamingSignedTrailer, -1, []string{"x-amz-checksum-crc32c"})
		c.sign(key, "20130524T000000Z", "20130524/us-east-1/s3/aws4_request", [32]byte{})
		hex.Encode(c.prev[:], mustHex("e05ab64fe1dfdbf0b5870abbaabdb063c371d4e96f2767e6934d90529c5ae850"))
		err := c.trailers()
		if ok && err != nil {
			t.Fatal(err)
		}
		if !ok {
			wantCode(t, "trailer signature", err, "SignatureDoesNotMatch")
		}
		if ok && c.trailer.Get("X-Amz-Checksum-Crc32c") != "wdBDMA==" {
			t.Fatalf("trailer %v", c.trailer)
		}
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// TestAWSDocGetObject is the GET example of "Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk".
func TestAWSDocGetObject(t *testing.T) {
	raw := "GET /test.txt HTTP/1.1\r\n" +
		"Host: examplebucket.s3.amazonaws.com\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n" +
		"Range: bytes=0-9\r\n" +
		"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n" +
		"x-amz-date: 20130524T000000Z\r\n\r\n"
	au, body, err := verifyAll(verifierAt(awsDocDate), []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if au.Payload != PayloadSHA256 || len(body) != 0 {
		t.Fatalf("auth %+v", au)
	}
	_ = http.MethodGet
}

// TestSecretRotation: the signing-key cache never outlives a secret.
func TestSecretRotation(t *testing.T) {
	raw := []byte("GET /test.txt HTTP/1.1\r\n" +
		"Host: examplebucket.s3.amazonaws.com\r\n" +
		"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41\r\n" +
		"Range: bytes=0-9\r\n" +
		"x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\r\n" +
		"x-amz-date: 20130524T000000Z\r\n\r\n")
	secret := testSecret
	v := &Verifier{Lookup: func(string) (string, string, bool) { return secret, "u", true }, Now: func() time.Time { return awsDocDate }}
	for i := 0; i < 3; i++ {
		if _, _, err := verifyAll(v, raw); err != nil {
			t.Fatal(err)
		}
	}
	secret = "rotated"
	_, _, err := verifyAll(v, raw)
	wantCode(t, "after rotation", err, "SignatureDoesNotMatch")
	secret = testSecret
	if _, _, err := verifyAll(v, raw); err != nil {
		t.Fatal(err)
	}
}
