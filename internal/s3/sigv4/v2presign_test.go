package sigv4

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// SigV2 presigned URLs made by minio-go's signer, path-style and
// virtual-hosted, with keys that break signers, subresources and x-amz
// headers, verify; the same URL with its path, a subresource, Expires or
// Signature changed, after its expiry, or with an unknown key does not.
func TestMinioPresignV2(t *testing.T) {
	bucketOf := func(host string) string {
		if b, ok := strings.CutSuffix(host, ".s3.cairn.test:9000"); ok {
			return b
		}
		return ""
	}
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		method := []string{"GET", "PUT", "HEAD", "DELETE"}[rng.IntN(4)]
		virtual := rng.IntN(2) == 0
		host := "localhost:9000"
		if virtual {
			host = "bucket.s3.cairn.test:9000"
		}
		req := newRequest(t, method, host, randKey(rng), v2Query(rng), nil, false)
		if virtual {
			req.URL.Path = strings.TrimPrefix(req.URL.Path, "/bucket")
		}
		if rng.IntN(2) == 0 {
			req.Header.Set("Content-Type", "text/plain")
		}
		if rng.IntN(2) == 0 {
			req.Header.Set("X-Amz-Meta-Color", strings.TrimSpace(randValue(rng))+"x")
		}
		now := time.Now()
		out := signer.PreSignV2(*req, testAK, testSecret, 1+rng.Int64N(86400), virtual)
		raw := wire(t, out)
		v := &Verifier{Lookup: lookup, BucketOfHost: bucketOf, Now: func() time.Time { return now }}
		a, _, err := verifyAll(v, raw)
		if err != nil {
			t.Fatalf("seed %d (virtual %v): %v\n%s", seed, virtual, err, raw)
		}
		if !a.Presigned || a.User != testUser || a.AccessKey != testAK {
			t.Fatalf("seed %d: auth %+v", seed, a)
		}
		tamperV2(t, seed, v, string(raw))
	}
}

// tamperV2 changes one thing of a verified SigV2 request at a time.
func tamperV2(t *testing.T, seed uint64, v *Verifier, raw string) {
	line, rest, _ := strings.Cut(raw, "\r\n")
	cases := map[string]struct {
		line string
		now  time.Duration
		want *Error
	}{
		"path":        {strings.Replace(line, "/", "/x", 1), 0, ErrSignatureDoesNotMatch},
		"subresource": {strings.Replace(line, "?", "?versionId=7&", 1), 0, ErrSignatureDoesNotMatch},
		"signature":   {strings.Replace(line, "Signature=", "Signature=A", 1), 0, ErrSignatureDoesNotMatch},
		"expires":     {strings.Replace(line, "Expires=", "Expires=1", 1), 0, ErrSignatureDoesNotMatch},
		"key":         {strings.Replace(line, "AWSAccessKeyId="+testAK, "AWSAccessKeyId=OTHERKEY", 1), 0, ErrSignatureDoesNotMatch},
		"unknown key": {strings.Replace(line, "AWSAccessKeyId="+testAK, "AWSAccessKeyId=NOSUCHKEY", 1), 0, ErrInvalidAccessKeyID},
		"expired":     {line, 48 * time.Hour, ErrExpired},
	}
	for name, c := range cases {
		now := v.now()
		w := &Verifier{Lookup: v.Lookup, BucketOfHost: v.BucketOfHost, Now: func() time.Time { return now.Add(c.now) }}
		_, _, err := verifyAll(w, []byte(c.line+"\r\n"+rest))
		if !errors.Is(err, c.want) {
			t.Errorf("seed %d, %s changed: %v, want %s", seed, name, err, c.want.Code)
		}
	}
}

// v2Query is a query of subresources SigV2 signs and parameters it does
// not, each once (as minio-go signs them).
func v2Query(rng *rand.Rand) string {
	var parts []string
	for _, p := range []string{"versionId=3", "response-content-type=text%2Fplain", "uploads", "prefix=a", "max-keys=5"} {
		if rng.IntN(3) == 0 {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "&")
}

// The subresources must be in the order S3 signs them.
func TestV2SubResourcesSorted(t *testing.T) {
	if !slices.IsSorted(v2SubResources) {
		t.Error("v2SubResources is not sorted")
	}
}

// A SigV2 Authorization header stays refused by name.
func TestV2HeaderRefused(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://localhost:9000/bucket/k", nil)
	r.Header.Set("Authorization", "AWS "+testAK+":c2lnbmF0dXJl")
	if _, err := verifierAt(time.Now()).Verify(r); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("SigV2 header: %v, want InvalidRequest", err)
	}
}
