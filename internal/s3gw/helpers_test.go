package s3gw

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// testEnv is a gateway over a MemStore behind an httptest server, with two
// users (alice, bob) and AWS SDK clients for each.
type testEnv struct {
	t     *testing.T
	store *MemStore
	gw    *Gateway
	srv   *httptest.Server
	alice *s3.Client
	bob   *s3.Client
	clock *fakeClock
}

var testCreds = map[string][2]string{
	"AKALICE": {"alice-secret", "alice"},
	"AKBOB":   {"bob-secret", "bob"},
}

func lookup(ak string) (string, string, bool) {
	c, ok := testCreds[ak]
	return c[0], c[1], ok
}

// fakeClock is real time plus an offset tests advance (the collector's
// grace) without sleeping.
type fakeClock struct{ offset time.Duration }

func (c *fakeClock) now() time.Time { return time.Now().Add(c.offset) }

func newEnv(t *testing.T) *testEnv { return newEnvTLS(t, false) }

// newEnvTLS serves over TLS when tls is set: the SDK then sends its
// checksums as trailers of aws-chunked bodies.
func newEnvTLS(t *testing.T, tls bool) *testEnv { return newEnvWith(t, tls, func(*Config) {}) }

// newEnvWith is newEnvTLS with the gateway's configuration changed by edit.
func newEnvWith(t *testing.T, tls bool, edit func(*Config)) *testEnv {
	t.Helper()
	env := &testEnv{t: t, store: NewMemStore(), clock: &fakeClock{}}
	cfg := Config{Store: env.store, Lookup: lookup, GCGrace: time.Minute, IntentTimeout: time.Hour,
		Now: env.clock.now, Logf: t.Logf, Metrics: NewMetrics()}
	edit(&cfg)
	env.gw = New(cfg)
	if tls {
		env.srv = httptest.NewTLSServer(env.gw)
	} else {
		env.srv = httptest.NewServer(env.gw)
	}
	t.Cleanup(env.srv.Close)
	env.alice = env.client("AKALICE")
	env.bob = env.client("AKBOB")
	return env
}

func (env *testEnv) client(ak string) *s3.Client {
	secret := testCreds[ak][0]
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(env.srv.URL),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: ak, SecretAccessKey: secret}, nil
		}),
		RetryMaxAttempts: 1,
		HTTPClient:       env.srv.Client(),
	})
}

// code returns the S3 error code of err ("" for nil).
func code(err error) string {
	if err == nil {
		return ""
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return err.Error()
}

func wantCode(t *testing.T, what string, err error, want string) {
	t.Helper()
	if got := code(err); got != want {
		t.Fatalf("%s: got error %q (%v), want %q", what, got, err, want)
	}
}

// raw sends a request signed as alice with the SDK's signer (payload
// SHA-256 in the header) and returns the response with its body read.
func (env *testEnv) raw(method, path string, hdr http.Header, body []byte) (*http.Response, []byte) {
	env.t.Helper()
	req, err := http.NewRequest(method, env.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		env.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	sum := sha256.Sum256(body)
	ph := hex.EncodeToString(sum[:])
	req.Header.Set("x-amz-content-sha256", ph)
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "AKALICE", SecretAccessKey: "alice-secret"},
		req, ph, "s3", "us-east-1", time.Now())
	if err != nil {
		env.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		env.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (env *testEnv) mkBucket(c *s3.Client, name string) {
	env.t.Helper()
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		env.t.Fatalf("create bucket %s: %v", name, err)
	}
}

func (env *testEnv) put(bucket, key string, data []byte) *s3.PutObjectOutput {
	env.t.Helper()
	out, err := env.alice.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
	if err != nil {
		env.t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return out
}

func (env *testEnv) get(bucket, key string) []byte {
	env.t.Helper()
	out, err := env.alice.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		env.t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		env.t.Fatalf("get %s/%s body: %v", bucket, key, err)
	}
	return b
}
