package sigv4_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
	"github.com/cairn-storage/cairn/internal/s3/sigv4"
)

// A tiny S3 endpoint built on Verify, driven by the AWS SDK's own S3 client
// with its default settings (which add a CRC32 checksum to every upload
// and, over TLS, send it as a trailer of an aws-chunked body), over HTTP and
// TLS. The checksums the client computes with its own code must match the
// checksum package's.
type fakeS3 struct {
	v       *sigv4.Verifier
	mu      sync.Mutex
	objects map[string][]byte
	seen    map[sigv4.Payload]int // payload kinds of the PUTs
	algs    map[checksum.Algorithm]int
}

func writeError(w http.ResponseWriter, code string, status int, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", code, msg)
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a, err := f.v.Verify(r)
	if err != nil {
		var e *sigv4.Error
		errors.As(err, &e)
		writeError(w, e.Code, e.Status, e.Message)
		return
	}
	switch r.Method {
	case http.MethodPut:
		data, err := io.ReadAll(a.Body)
		if err != nil {
			var e *sigv4.Error
			if errors.As(err, &e) {
				writeError(w, e.Code, e.Status, e.Message)
			} else {
				writeError(w, "IncompleteBody", 400, err.Error())
			}
			return
		}
		// The checksum: a header, or a trailer named in x-amz-trailer.
		alg, sum, err := checksum.FromHeaders(r.Header)
		if err != nil {
			writeError(w, "InvalidRequest", 400, err.Error())
			return
		}
		for _, name := range a.DeclaredTrailers {
			if ta, ok := checksum.FromHeader(name); ok {
				if alg != 0 {
					writeError(w, "InvalidRequest", 400, "two checksums")
					return
				}
				alg = ta
				if sum, err = ta.Decode(a.Trailer().Get(name)); err != nil {
					writeError(w, "InvalidRequest", 400, err.Error())
					return
				}
			}
		}
		if alg != 0 && !bytes.Equal(alg.Sum(data), sum) {
			writeError(w, "BadDigest", 400, "The "+alg.String()+" you specified did not match the calculated checksum.")
			return
		}
		f.mu.Lock()
		f.objects[r.URL.Path] = data
		f.seen[a.Payload]++
		f.algs[alg]++
		f.mu.Unlock()
		m := md5.Sum(data)
		w.Header().Set("ETag", `"`+hex.EncodeToString(m[:])+`"`)
		if alg != 0 {
			w.Header().Set(alg.Header(), checksum.Encode(sum))
		}
	case http.MethodGet:
		f.mu.Lock()
		data, ok := f.objects[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			writeError(w, "NoSuchKey", 404, "The specified key does not exist.")
			return
		}
		w.Write(data)
	default:
		writeError(w, "NotImplemented", 501, "")
	}
}

func newClient(url string, hc *http.Client, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		UsePathStyle:     true,
		HTTPClient:       hc,
		RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: secret}, nil
		}),
	})
}

// onlyReader hides Seek, so the SDK cannot hash the body ahead of sending it.
type onlyReader struct{ io.Reader }

func TestS3Client(t *testing.T) {
	keys := []string{"plain", "a b", "a+b", "100%", "x//y///z", "日本/é ß", "😀", "!*'();:@&=+$,?#[]", "~-_.", "a%2Fb", "semi;colon", "tab\tkey"}
	algs := []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmCrc64nvme, types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256}
	for _, tls := range []bool{false, true} {
		f := &fakeS3{
			v:       &sigv4.Verifier{Lookup: func(ak string) (string, string, bool) { return "secret", "alice", ak == "AKIAIOSFODNN7EXAMPLE" }},
			objects: map[string][]byte{},
			seen:    map[sigv4.Payload]int{},
			algs:    map[checksum.Algorithm]int{},
		}
		var srv *httptest.Server
		if tls {
			srv = httptest.NewTLSServer(f)
		} else {
			srv = httptest.NewServer(f)
		}
		client := newClient(srv.URL, srv.Client(), "secret")
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 7))
		for i, key := range keys {
			for j, alg := range algs {
				data := make([]byte, rng.IntN(300_000))
				for k := range data {
					data[k] = byte(rng.Uint32())
				}
				in := &s3.PutObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key), ChecksumAlgorithm: alg}
				if tls && (i+j)%2 == 1 {
					in.Body = onlyReader{bytes.NewReader(data)}
					in.ContentLength = aws.Int64(int64(len(data)))
				} else {
					in.Body = bytes.NewReader(data)
				}
				if _, err := client.PutObject(ctx, in); err != nil {
					t.Fatalf("tls=%v PUT %q %s: %v", tls, key, alg, err)
				}
				out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key)})
				if err != nil {
					t.Fatalf("tls=%v GET %q: %v", tls, key, err)
				}
				got, _ := io.ReadAll(out.Body)
				out.Body.Close()
				if !bytes.Equal(got, data) {
					t.Fatalf("tls=%v %q: read back %d bytes of %d", tls, key, len(got), len(data))
				}
			}
			// A presigned GET of the same key, through the SDK's presigner.
			ps, err := s3.NewPresignClient(client).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key)},
				s3.WithPresignExpires(10*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Get(ps.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("presigned GET %q: %s", key, resp.Status)
			}
			// A wrong secret: SignatureDoesNotMatch, 403, as the SDK reads it.
			_, err = newClient(srv.URL, srv.Client(), "wrong").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String(key)})
			var apiErr smithy.APIError
			var re interface{ HTTPStatusCode() int }
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SignatureDoesNotMatch" || !errors.As(err, &re) || re.HTTPStatusCode() != 403 {
				t.Fatalf("wrong secret: %v", err)
			}
		}
		t.Logf("tls=%v: payload kinds of the PUTs %v, checksums %v", tls, f.seen, f.algs)
		if tls && f.seen[sigv4.PayloadStreamingUnsignedTrailer] == 0 {
			t.Fatalf("tls: the SDK never sent an aws-chunked body with a trailer (%v)", f.seen)
		}
		for _, a := range checksum.All {
			if f.algs[a] == 0 {
				t.Fatalf("tls=%v: no upload carried %s (%v)", tls, a, f.algs)
			}
		}
		srv.Close()
	}
	_ = strings.ToLower
}
