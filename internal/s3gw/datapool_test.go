package s3gw

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// ecPools are data pools by name for a test gateway: MemStores that refuse
// omap, so a test sees the gateway keep nothing but data stripes in a
// bucket's data pool (its index stays in the gateway's own pool), and that
// a test may remove.
type ecPools struct {
	mu sync.Mutex
	m  map[string]*MemStore
}

var errECOmap = errors.New("a data pool holds data stripes only")

func newECPools(names ...string) *ecPools {
	p := &ecPools{m: map[string]*MemStore{}}
	for _, n := range names {
		st := NewMemStore()
		st.Fail = func(op, name string) error {
			if strings.HasPrefix(op, "omap") {
				return errECOmap
			}
			return nil
		}
		p.m[n] = st
	}
	return p
}

// open is the gateway's Config.DataStore.
func (p *ecPools) open(name string) (Store, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.m[name]
	if !ok {
		return nil, fmt.Errorf("pool %q: %w", name, ErrNoPool)
	}
	return st, nil
}

// add makes a pool (again).
func (p *ecPools) add(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[name] = NewMemStore()
}

// remove removes a pool: what the gateway opened of it answers ErrNoPool.
func (p *ecPools) remove(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[name].Fail = func(string, string) error { return fmt.Errorf("pool %q: %w", name, ErrNoPool) }
	delete(p.m, name)
}

// stripesOf counts the data stripes of bucket in st.
func stripesOf(t *testing.T, env *testEnv, st *MemStore, bucket string) int {
	t.Helper()
	b, err := env.gw.lookupBucket(context.Background(), bucket)
	if err != nil || b == nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	n := 0
	for _, o := range st.Objects() {
		if strings.HasPrefix(o, "s3d."+b.ID+".") {
			n++
		}
	}
	return n
}

// TestDataPoolRouting: a bucket created while the gateway's DataPool names
// a pool keeps its data stripes there and nothing else (the pool refuses
// omap); its index stays in the gateway's
// pool. A bucket created before keeps its data in the gateway's pool after
// the setting changed. PUT, ranged GET, multipart (with a part copied from
// the other bucket), copies both ways, DeleteObjects and the collector
// all go to the right pool.
func TestDataPoolRouting(t *testing.T) {
	pools := newECPools("ec")
	env := newEnvWith(t, false, func(c *Config) { c.DataStore = pools.open })
	ec := pools.m["ec"]
	ctx := context.Background()
	env.mkBucket(env.alice, "old")
	old1 := randBytes(stripeSize+100, 1)
	env.put("old", "o1", old1)

	env.gw.cfg.DataPool = "ec" // a gateway restarted with a data pool
	env.mkBucket(env.alice, "new")
	big := randBytes(2*stripeSize+7, 2)
	env.put("new", "big", big)
	old2 := randBytes(inlineMax+10, 3)
	env.put("old", "o2", old2)
	if n, m := stripesOf(t, env, ec, "new"), stripesOf(t, env, env.store, "new"); n != 3 || m != 0 {
		t.Fatalf("bucket new: %d stripes in its data pool, %d in the gateway's; want 3 and 0", n, m)
	}
	if n, m := stripesOf(t, env, env.store, "old"), stripesOf(t, env, ec, "old"); n != 3 || m != 0 {
		t.Fatalf("bucket old: %d stripes in the gateway's pool, %d in ec; want 3 and 0", n, m)
	}
	if s, err := StatBucket(ctx, env.store, "new"); err != nil || s.DataPool != "ec" || s.Objects != 1 {
		t.Fatalf("stat new: %+v %v", s, err)
	}
	if got := env.get("new", "big"); !bytes.Equal(got, big) {
		t.Fatal("GET of the object in the data pool differs")
	}
	rng := fmt.Sprintf("bytes=%d-%d", stripeSize-5, 2*stripeSize+3)
	out, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("new"), Key: aws.String("big"), Range: aws.String(rng)})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	if !bytes.Equal(got, big[stripeSize-5:2*stripeSize+4]) {
		t.Fatalf("ranged GET across stripes: %d bytes, differ", len(got))
	}

	copyBetweenPools(t, env, ec, old1, big)
	mp := multipartFromOld(t, env, old1)
	_, err = env.alice.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("new"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("big")}, {Key: aws.String("from-old")}, {Key: aws.String("mp")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("old"), Key: aws.String("from-new")}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if n := stripesOf(t, env, ec, "new"); n != 0 {
		t.Fatalf("%d stripes of deleted objects left in the data pool after the grace (the multipart object had %d bytes)", n, mp)
	}
	if n := stripesOf(t, env, env.store, "old"); n != 3 {
		t.Fatalf("bucket old: %d stripes after the collector, want its 3 live ones", n)
	}
	deadBucketInPool(t, env, ec)
}

// copyBetweenPools copies old/o1 into bucket new and new/big into bucket
// old, and checks that each copy's data is in its destination's pool.
func copyBetweenPools(t *testing.T, env *testEnv, ec *MemStore, old1, big []byte) {
	ctx := context.Background()
	for _, c := range []struct{ src, dst, key string }{{"old/o1", "new", "from-old"}, {"new/big", "old", "from-new"}} {
		if _, err := env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(c.dst), Key: aws.String(c.key), CopySource: aws.String(c.src)}); err != nil {
			t.Fatalf("copy %s to %s: %v", c.src, c.dst, err)
		}
	}
	if !bytes.Equal(env.get("new", "from-old"), old1) || !bytes.Equal(env.get("old", "from-new"), big) {
		t.Fatal("a copy between buckets of different data pools differs")
	}
	if n := stripesOf(t, env, ec, "new"); n != 3+2 {
		t.Fatalf("bucket new: %d stripes in its data pool after the copy into it, want 5", n)
	}
	if n := stripesOf(t, env, env.store, "old"); n != 3+3 {
		t.Fatalf("bucket old: %d stripes in the gateway's pool after the copy into it, want 6", n)
	}
}

// multipartFromOld completes a multipart upload in bucket new of one part
// uploaded and one copied from bucket old, and reads it back.
func multipartFromOld(t *testing.T, env *testEnv, old1 []byte) int {
	ctx := context.Background()
	c := env.alice
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("new"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	p1 := randBytes(minPartSize, 4)
	u1, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("new"), Key: aws.String("mp"), UploadId: cr.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(p1)})
	if err != nil {
		t.Fatal(err)
	}
	u2, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("new"), Key: aws.String("mp"), UploadId: cr.UploadId,
		PartNumber: aws.Int32(2), CopySource: aws.String("old/o1"), CopySourceRange: aws.String("bytes=100-999")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("new"), Key: aws.String("mp"), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{PartNumber: aws.Int32(1), ETag: u1.ETag}, {PartNumber: aws.Int32(2), ETag: u2.CopyPartResult.ETag}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, p1...), old1[100:1000]...)
	if got := env.get("new", "mp"); sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("the multipart object in the data pool differs (%d bytes, want %d)", len(got), len(want))
	}
	return len(want)
}

// deadBucketInPool deletes bucket new (empty by now) after putting one
// object and removing it, and checks that the collector empties its data
// pool and the gateway's of it.
func deadBucketInPool(t *testing.T, env *testEnv, ec *MemStore) {
	ctx := context.Background()
	env.put("new", "x", randBytes(stripeSize+1, 5))
	b, _ := env.gw.lookupBucket(ctx, "new")
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("new"), Key: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("new")}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	if st, err := env.gw.Collect(ctx); err != nil || st.Buckets != 1 {
		t.Fatalf("collecting the deleted bucket: %+v %v", st, err)
	}
	if objs := ec.Objects(); len(objs) != 0 {
		t.Fatalf("left in the data pool of a collected bucket: %q", objs)
	}
	for _, o := range env.store.Objects() {
		if strings.Contains(o, b.ID) {
			t.Fatalf("left in the gateway's pool of a collected bucket: %q", o)
		}
	}
}

// TestDataPoolMissing: a gateway whose DataPool does not exist creates no
// bucket; a bucket whose data pool was removed answers InternalError
// naming the pool (and the gateway opens it again once it exists).
func TestDataPoolMissing(t *testing.T) {
	pools := newECPools("ec")
	env := newEnvWith(t, false, func(c *Config) { c.DataStore = pools.open; c.DataPool = "nopool" })
	ctx := context.Background()
	_, err := env.alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bk1")})
	wantMessage(t, "create bucket with a missing data pool", err, "InternalError", `"nopool"`)
	if _, err := env.alice.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bk1")}); err == nil {
		t.Fatal("the bucket exists")
	}
	env.gw.cfg.DataPool = "ec"
	env.mkBucket(env.alice, "bk2")
	env.put("bk2", "k", randBytes(inlineMax+1, 1))
	env.put("bk2", "small", []byte("data")) // inline: in the index's pool
	pools.remove("ec")
	_, err = env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bk2"), Key: aws.String("k")})
	wantMessage(t, "GET from a removed data pool", err, "InternalError", `"ec"`)
	_, err = env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bk2"), Key: aws.String("k2"), Body: strings.NewReader(strings.Repeat("x", inlineMax+1))})
	wantMessage(t, "PUT into a removed data pool", err, "InternalError", `"ec"`)
	if got := env.get("bk2", "small"); string(got) != "data" {
		t.Fatalf("GET of an inline object with the data pool removed: %q", got)
	}
	// The removed pool took the data of k with it: the collector drops
	// its records instead of failing on them for ever.
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bk2"), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	if st, err := env.gw.Collect(ctx); err != nil || st.Data != 1 {
		t.Fatalf("collect with the data pool gone: %+v %v", st, err)
	}
	pools.add("ec") // made again: opened anew
	env.put("bk2", "k3", []byte("again"))
	if got := env.get("bk2", "k3"); string(got) != "again" {
		t.Fatalf("GET after the pool was made again: %q", got)
	}
}

func wantMessage(t *testing.T, what string, err error, code, inMessage string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code || !strings.Contains(ae.ErrorMessage(), inMessage) {
		t.Fatalf("%s: got %v, want %s naming %s", what, err, code, inMessage)
	}
}

// TestDeadRecord: a dead bucket's record round-trips with and without a
// data pool, and records written before buckets had data pools (time and
// shards only, or time only) still read.
func TestDeadRecord(t *testing.T) {
	at := time.Unix(0, 1234567890)
	for _, r := range []deadRec{{at: at, shards: []int{0, 3, 7}}, {at: at, shards: []int{0}, pool: "ec21"}} {
		got, err := decodeDead(r.encode())
		if err != nil || !got.at.Equal(r.at) || fmt.Sprint(got.shards) != fmt.Sprint(r.shards) || got.pool != r.pool {
			t.Fatalf("%+v came back as %+v, %v", r, got, err)
		}
	}
	w := &enc{}
	w.varint(at.UnixNano())
	if got, err := decodeDead(w.b); err != nil || fmt.Sprint(got.shards) != "[0]" || got.pool != "" {
		t.Fatalf("a record of time only: %+v %v", got, err)
	}
	most := deadRec{at: at, shards: make([]int, maxDeadShards), pool: "p"}
	if got, err := decodeDead(most.encode()); err != nil || len(got.shards) != maxDeadShards || got.pool != "p" {
		t.Fatalf("a record of the most shards a bucket has, and its data pool: %d shards, pool %q, %v", len(got.shards), got.pool, err)
	}
	many := deadRec{at: at, shards: make([]int, maxDeadShards+1), pool: "p"}
	if _, err := decodeDead(many.encode()); err == nil {
		t.Fatalf("a record of %d shards, more than any bucket has, was accepted", len(many.shards))
	}
	bad := append(deadRec{at: at, shards: []int{1}, pool: "p"}.encode(), 9)
	if _, err := decodeDead(bad); err == nil {
		t.Fatal("a record with bytes after the pool's name reads")
	}
}
