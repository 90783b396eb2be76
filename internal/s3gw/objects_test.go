package s3gw

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func TestPutGetHeadDelete(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "bkt")
	data := []byte("hello, world")
	out, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir//a b+c%d/ü"),
		Body: bytes.NewReader(data), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ContentType: aws.String("text/plain"), CacheControl: aws.String("max-age=60"),
		ContentDisposition: aws.String(`attachment; filename="x.txt"`), ContentEncoding: aws.String("identity"),
		Expires: aws.Time(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), Metadata: map[string]string{"colour": "blue", "Size": "XL"}})
	if err != nil {
		t.Fatal(err)
	}
	if *out.ETag != `"`+md5hex(data)+`"` {
		t.Fatalf("ETag %s, want the MD5 %s", *out.ETag, md5hex(data))
	}
	if out.ChecksumCRC32 == nil {
		t.Fatalf("the CRC32 is not echoed: %+v", out)
	}
	got, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir//a b+c%d/ü"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if !bytes.Equal(body, data) || *got.ContentType != "text/plain" || *got.CacheControl != "max-age=60" ||
		*got.ContentDisposition != `attachment; filename="x.txt"` || *got.ContentEncoding != "identity" ||
		got.Metadata["colour"] != "blue" || got.Metadata["size"] != "XL" || *got.ChecksumCRC32 != *out.ChecksumCRC32 ||
		*got.ContentLength != int64(len(data)) || *got.ETag != *out.ETag || got.ExpiresString == nil {
		t.Fatalf("GET returned %q %+v", body, got)
	}
	head, err := env.alice.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir//a b+c%d/ü")})
	if err != nil || *head.ContentLength != int64(len(data)) || *head.ETag != *out.ETag {
		t.Fatalf("HEAD: %+v %v", head, err)
	}
	_, err = env.alice.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("nope")})
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("HEAD of a missing key: %v", err)
	}
	_, err = env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("nope")})
	wantCode(t, "GET of a missing key", err, "NoSuchKey")
	// Overwrite, then delete (twice: S3 deletes are idempotent).
	env.put("bkt", "dir//a b+c%d/ü", []byte("v2"))
	if b := env.get("bkt", "dir//a b+c%d/ü"); string(b) != "v2" {
		t.Fatalf("after overwrite: %q", b)
	}
	for i := 0; i < 2; i++ {
		if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir//a b+c%d/ü")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir//a b+c%d/ü")})
	wantCode(t, "GET after DELETE", err, "NoSuchKey")
}

func TestLargeObjectAndRanges(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bkt")
	data := randBytes(2*stripeSize+12345, 7)
	env.put("bkt", "big", data)
	if got := env.get("bkt", "big"); !bytes.Equal(got, data) {
		t.Fatalf("multi-stripe GET differs (%d bytes, want %d)", len(got), len(data))
	}
	if n := len(env.store.Objects()); n < 3 {
		t.Fatalf("a %d-byte object in %d store objects", len(data), n)
	}
	size := len(data)
	cases := []struct {
		rng    string
		status int
		from   int
		to     int // exclusive
	}{
		{"bytes=0-9", 206, 0, 10},
		{"bytes=4194300-4194310", 206, 4194300, 4194311}, // across a stripe boundary
		{"bytes=8388000-", 206, 8388000, size},
		{"bytes=-100", 206, size - 100, size},
		{"bytes=-999999999", 206, 0, size},
		{fmt.Sprintf("bytes=10-%d", size+50), 206, 10, size},
		{fmt.Sprintf("bytes=%d-", size), 416, 0, 0},
		{"bytes=-0", 416, 0, 0},
		{"bytes=5-2", 200, 0, size}, // malformed: ignored
		{"bytes=0-1,5-6", 200, 0, size},
		{"items=0-1", 200, 0, size},
	}
	for _, c := range cases {
		resp, body := env.raw("GET", "/bkt/big", http.Header{"Range": {c.rng}}, nil)
		if resp.StatusCode != c.status {
			t.Errorf("Range %s: status %d, want %d", c.rng, resp.StatusCode, c.status)
			continue
		}
		if c.status == 416 {
			if !strings.Contains(string(body), "InvalidRange") || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
				t.Errorf("Range %s: 416 body %s, Content-Range %q", c.rng, body, resp.Header.Get("Content-Range"))
			}
			continue
		}
		if !bytes.Equal(body, data[c.from:c.to]) {
			t.Errorf("Range %s: %d bytes, want [%d,%d)", c.rng, len(body), c.from, c.to)
		}
		if c.status == 206 && resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", c.from, c.to-1, size) {
			t.Errorf("Range %s: Content-Range %q", c.rng, resp.Header.Get("Content-Range"))
		}
	}
	env.put("bkt", "empty", nil)
	if resp, _ := env.raw("GET", "/bkt/empty", http.Header{"Range": {"bytes=0-"}}, nil); resp.StatusCode != 416 {
		t.Errorf("Range bytes=0- of an empty object: %d, want 416", resp.StatusCode)
	}
	if b := env.get("bkt", "empty"); len(b) != 0 {
		t.Errorf("empty object read %d bytes", len(b))
	}
}

func TestIntegrity(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bkt")
	data := []byte("some data")
	wrongMD5 := md5.Sum([]byte("other"))
	resp, body := env.raw("PUT", "/bkt/k", http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(wrongMD5[:])}}, data)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "BadDigest") {
		t.Fatalf("wrong Content-MD5: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("PUT", "/bkt/k", http.Header{"Content-Md5": {"notbase64"}}, data)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "InvalidDigest") {
		t.Fatalf("malformed Content-MD5: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("PUT", "/bkt/k", http.Header{"X-Amz-Checksum-Sha256": {base64.StdEncoding.EncodeToString(make([]byte, 32))}}, data)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "BadDigest") {
		t.Fatalf("wrong x-amz-checksum-sha256: %d %s", resp.StatusCode, body)
	}
	good := md5.Sum(data)
	resp, body = env.raw("PUT", "/bkt/k", http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(good[:])}}, data)
	if resp.StatusCode != 200 {
		t.Fatalf("right Content-MD5: %d %s", resp.StatusCode, body)
	}
	// No checksum sent: the gateway stores a CRC64NVME, as S3 does.
	resp, _ = env.raw("HEAD", "/bkt/k", http.Header{"X-Amz-Checksum-Mode": {"ENABLED"}}, nil)
	if resp.Header.Get("X-Amz-Checksum-Crc64nvme") == "" {
		t.Fatalf("HEAD with checksum mode: %v", resp.Header)
	}
	// Failed PUTs left no data behind and no intent.
	for _, o := range env.store.Objects() {
		if strings.HasPrefix(o, "s3d.") {
			if n := strings.Count(strings.Join(env.store.Objects(), " "), "s3d."); n != 1 {
				t.Fatalf("data objects after 3 failed and 1 good PUT: %v", env.store.Objects())
			}
		}
	}
	kvs, _, _ := env.store.OmapList(context.Background(), shardObjectOf(t, env, "bkt"), prefixPending, prefixPending+"\xff", 10)
	if len(kvs) != 0 {
		t.Fatalf("intents left after the PUTs: %d", len(kvs))
	}
}

func shardObjectOf(t *testing.T, env *testEnv, bucket string) string {
	b, err := env.gw.lookupBucket(context.Background(), bucket)
	if err != nil || b == nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	return b.shard("")
}

func TestConditionalReads(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bkt")
	etag := *env.put("bkt", "k", []byte("x")).ETag
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	cases := []struct {
		h      http.Header
		status int
	}{
		{http.Header{"If-Match": {etag}}, 200},
		{http.Header{"If-Match": {`"nope"`}}, 412},
		{http.Header{"If-Match": {"*"}}, 200},
		{http.Header{"If-None-Match": {etag}}, 304},
		{http.Header{"If-None-Match": {`"nope"`}}, 200},
		{http.Header{"If-Modified-Since": {past}}, 200},
		{http.Header{"If-Modified-Since": {future}}, 304},
		{http.Header{"If-Unmodified-Since": {past}}, 412},
		{http.Header{"If-Unmodified-Since": {future}}, 200},
		{http.Header{"If-Match": {etag}, "If-Unmodified-Since": {past}}, 200},
		{http.Header{"If-None-Match": {`"nope"`}, "If-Modified-Since": {future}}, 200},
		{http.Header{"If-Modified-Since": {"garbage"}}, 200},
	}
	for _, c := range cases {
		for _, m := range []string{"GET", "HEAD"} {
			resp, _ := env.raw(m, "/bkt/k", c.h, nil)
			if resp.StatusCode != c.status {
				t.Errorf("%s with %v: %d, want %d", m, c.h, resp.StatusCode, c.status)
			}
		}
	}
}

func TestConditionalWrites(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "bkt")
	put := func(h http.Header, body string) int {
		resp, _ := env.raw("PUT", "/bkt/k", h, []byte(body))
		return resp.StatusCode
	}
	if s := put(http.Header{"If-Match": {`"abc"`}}, "x"); s != 404 {
		t.Fatalf("If-Match on a missing key: %d, want 404", s)
	}
	if s := put(http.Header{"If-None-Match": {"*"}}, "v1"); s != 200 {
		t.Fatalf("create-only PUT of a new key: %d", s)
	}
	if s := put(http.Header{"If-None-Match": {"*"}}, "v2"); s != 412 {
		t.Fatalf("create-only PUT of an existing key: %d, want 412", s)
	}
	etag := `"` + md5hex([]byte("v1")) + `"`
	if s := put(http.Header{"If-Match": {etag}}, "v3"); s != 200 {
		t.Fatalf("If-Match with the right ETag: %d", s)
	}
	if s := put(http.Header{"If-Match": {etag}}, "v4"); s != 412 {
		t.Fatalf("If-Match with the old ETag: %d, want 412", s)
	}
	if b := env.get("bkt", "k"); string(b) != "v3" {
		t.Fatalf("content %q, want v3", b)
	}
	// Racers: exactly one create-only PUT wins each round.
	for round := 0; round < 10; round++ {
		key := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, fails := 0, 0
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key),
					Body: strings.NewReader(fmt.Sprint(i)), IfNoneMatch: aws.String("*")})
				mu.Lock()
				defer mu.Unlock()
				switch code(err) {
				case "":
					wins++
				case "PreconditionFailed":
					fails++
				default:
					t.Errorf("racer: %v", err)
				}
			}(i)
		}
		wg.Wait()
		if wins != 1 || fails != 15 {
			t.Fatalf("round %d: %d winners and %d 412s, want 1 and 15", round, wins, fails)
		}
	}
}

func TestCopyObject(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "src")
	env.mkBucket(env.alice, "dst")
	data := randBytes(stripeSize+100, 3)
	_, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("src"), Key: aws.String("a/b c"), Body: bytes.NewReader(data),
		ContentType: aws.String("image/png"), Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("src/a/b%20c")})
	if err != nil {
		t.Fatal(err)
	}
	if *out.CopyObjectResult.ETag != `"`+md5hex(data)+`"` {
		t.Fatalf("copy ETag %s", *out.CopyObjectResult.ETag)
	}
	got, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got.Body)
	if !bytes.Equal(b, data) || *got.ContentType != "image/png" || got.Metadata["k"] != "v" {
		t.Fatalf("COPY directive: %d bytes, %s, %v", len(b), *got.ContentType, got.Metadata)
	}
	_, err = env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("dst/copy"),
		MetadataDirective: types.MetadataDirectiveReplace, ContentType: aws.String("text/x"), Metadata: map[string]string{"n": "m"}})
	if err != nil {
		t.Fatal(err)
	}
	head, err := env.alice.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy")})
	if err != nil || *head.ContentType != "text/x" || head.Metadata["n"] != "m" || head.Metadata["k"] != "" {
		t.Fatalf("REPLACE directive: %+v %v", head, err)
	}
	_, err = env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("copy"), CopySource: aws.String("dst/copy")})
	wantCode(t, "copy onto itself without REPLACE", err, "InvalidRequest")
	_, err = env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("c2"), CopySource: aws.String("src/a/b%20c"), CopySourceIfMatch: aws.String(`"nope"`)})
	wantCode(t, "copy with a failing copy-source-if-match", err, "PreconditionFailed")
	_, err = env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("dst"), Key: aws.String("c2"), CopySource: aws.String("src/missing")})
	wantCode(t, "copy of a missing key", err, "NoSuchKey")
}

func TestDeleteObjects(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "bkt")
	for i := 0; i < 5; i++ {
		env.put("bkt", fmt.Sprint("k", i), []byte("x"))
	}
	var ids []types.ObjectIdentifier
	for _, k := range []string{"k0", "k1", "k3", "missing"} {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	out, err := env.alice.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("bkt"), Delete: &types.Delete{Objects: ids}})
	if err != nil || len(out.Deleted) != 4 || len(out.Errors) != 0 {
		t.Fatalf("DeleteObjects: %+v %v", out, err)
	}
	l, err := env.alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt")})
	if err != nil || len(l.Contents) != 2 || *l.Contents[0].Key != "k2" || *l.Contents[1].Key != "k4" {
		t.Fatalf("after DeleteObjects: %+v %v", l, err)
	}
	resp, body := env.raw("POST", "/bkt?delete", nil, []byte("<Delete><Object><Key>k2</Key>"))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "MalformedXML") {
		t.Fatalf("malformed DeleteObjects body: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("POST", "/bkt?delete", nil, bytes.Repeat([]byte("x"), maxXMLBytes+10))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "MaxMessageLengthExceeded") {
		t.Fatalf("oversized DeleteObjects body: %d %s", resp.StatusCode, body)
	}
}

func TestRequestBounds(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bkt")
	resp, body := env.raw("PUT", "/bkt/"+strings.Repeat("k", maxKeyBytes+1), nil, []byte("x"))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "KeyTooLongError") {
		t.Fatalf("long key: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("PUT", "/bkt/a%00b", nil, []byte("x"))
	if resp.StatusCode != 400 {
		t.Fatalf("key with NUL: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("PUT", "/bkt/m", http.Header{"X-Amz-Meta-Big": {strings.Repeat("v", maxMetaBytes)}}, []byte("x"))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "MetadataTooLarge") {
		t.Fatalf("metadata over 2 KiB: %d %s", resp.StatusCode, body)
	}
}

// Over TLS the SDK streams uploads as aws-chunked bodies with a CRC32
// trailer; the gateway verifies and stores it.
func TestChunkedTrailerOverTLS(t *testing.T) {
	env := newEnvTLS(t, true)
	ctx := context.Background()
	env.mkBucket(env.alice, "bkt")
	data := randBytes(stripeSize+999, 11)
	out, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"),
		Body: io.NopCloser(bytes.NewReader(data)), ContentLength: aws.Int64(int64(len(data))), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(got.Body)
	if err != nil || !bytes.Equal(b, data) || got.ChecksumCRC32C == nil || out.ChecksumCRC32C == nil || *got.ChecksumCRC32C != *out.ChecksumCRC32C {
		t.Fatalf("GET after a chunked PUT: %d bytes, %v; checksums %v %v", len(b), err, got.ChecksumCRC32C, out.ChecksumCRC32C)
	}
}

// readAheadStore holds every data write until the index entry of the
// object being written has been read: a PUT that reads the entry only
// after storing its data never gets past it.
type readAheadStore struct {
	*MemStore
	key   string
	read  chan struct{}
	once  sync.Once
	ahead atomic.Bool  // the data write found the entry read already
	reads atomic.Int32 // of the entry
}

func (s *readAheadStore) OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error) {
	if slices.Contains(keys, s.key) {
		s.reads.Add(1)
		s.once.Do(func() { close(s.read) })
	}
	return s.MemStore.OmapGet(ctx, name, keys...)
}

func (s *readAheadStore) Put(ctx context.Context, name string, data []byte) error {
	if strings.HasPrefix(name, "s3d.") {
		select {
		case <-s.read:
			s.ahead.Store(true)
		case <-time.After(2 * time.Second):
		}
	}
	return s.MemStore.Put(ctx, name, data)
}

// A PUT reads the entry it replaces while it stores the data, and its
// commit decides on that read: the commit costs one round trip to the
// index, not two.
func TestPutReadsEntryAhead(t *testing.T) {
	st := &readAheadStore{MemStore: NewMemStore(), key: "k", read: make(chan struct{})}
	env := newEnvWith(t, false, func(c *Config) { c.Store = st })
	env.mkBucket(env.alice, "bkt")
	ctx := context.Background()
	for i, data := range [][]byte{randBytes(inlineMax+1, 1), randBytes(inlineMax+2, 2)} {
		if _, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if !st.ahead.Load() || st.reads.Load() != 1 {
			t.Fatalf("put %d: entry read before the data write: %v; reads of the entry: %d, want 1", i, st.ahead.Load(), st.reads.Load())
		}
		got, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(got.Body)
		got.Body.Close()
		if !bytes.Equal(body, data) {
			t.Fatalf("get after put %d: %q", i, body)
		}
		st.read, st.once = make(chan struct{}), sync.Once{}
		st.ahead.Store(false)
		st.reads.Store(0)
	}
}
