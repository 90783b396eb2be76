package s3gw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// putRetrying puts like a client that retries SlowDown, as SDKs do.
func (env *testEnv) putRetrying(bucket, key string, data []byte) error {
	var err error
	for try := 0; try < 100; try++ {
		_, err = env.alice.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
		if code(err) != "SlowDown" {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// settleSplits splits every shard of bucket over the limit until none is,
// as the background probes eventually would, and returns the record.
func (env *testEnv) settleSplits(bucket string) *bucketRec {
	env.t.Helper()
	ctx := context.Background()
	for round := 0; round < 100; round++ {
		for !env.probesIdle() {
			time.Sleep(time.Millisecond)
		}
		env.gw.buckets.drop(bucket)
		b, err := env.gw.lookupBucket(ctx, bucket)
		if err != nil || b == nil {
			env.t.Fatalf("bucket %s: %v", bucket, err)
		}
		before := len(b.Shards)
		for _, r := range b.Shards {
			if err := env.gw.maybeSplit(ctx, b, r); err != nil {
				env.t.Fatal(err)
			}
		}
		env.gw.buckets.drop(bucket)
		if b, _ = env.gw.lookupBucket(ctx, bucket); len(b.Shards) == before {
			return b
		}
	}
	env.t.Fatal("splits do not settle")
	return nil
}

// newSplitEnv is a test gateway whose index shards split past shardKeys
// keys, with an empty bucket "lst" of alice's.
func newSplitEnv(t *testing.T, shardKeys int) *testEnv {
	env := newEnv(t)
	env.gw.cfg.IndexShardKeys = shardKeys
	env.mkBucket(env.alice, "lst")
	return env
}

func (env *testEnv) probesIdle() bool {
	idle := true
	env.gw.probing.Range(func(any, any) bool { idle = false; return false })
	return idle
}

// TestIndexSplits fills a bucket whose shards split every few dozen keys
// while four writers put and multipart uploads are open, then checks that
// every key reads back, every listing matches the oracle across the
// shards, uploads list, complete and abort across them, no shard is over
// its limit, and a deleted bucket's collector reclaims every shard.
func TestIndexSplits(t *testing.T) {
	env := newSplitEnv(t, 40)
	ctx := context.Background()
	keys := awkwardKeys(400, 3)
	uploads := map[string]string{}
	for i := 0; i < len(keys); i += 37 {
		k := keys[i]
		out, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("lst"), Key: aws.String(k + "~mp")})
		if err != nil {
			t.Fatal(err)
		}
		uploads[k+"~mp"] = *out.UploadId
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys); i += 4 {
				if err := env.putRetrying("lst", keys[i], []byte(keys[i])); err != nil {
					errs <- fmt.Errorf("put %q: %v", keys[i], err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b := env.settleSplits("lst")
	if len(b.Shards) < 8 {
		t.Fatalf("400 keys in shards of at most 40 made %d shards", len(b.Shards))
	}
	checkShards(t, env, b)
	for _, k := range keys {
		if got := env.get("lst", k); string(got) != k {
			t.Fatalf("get %q: %q", k, got)
		}
	}
	for _, delim := range []string{"", "/", "a"} {
		for _, prefix := range []string{"", "a", "dir/"} {
			want := oracleList(keys, prefix, delim, "")
			for _, mk := range []int{1, 7, 40, 1000} {
				if got := env.listAll(t, true, prefix, delim, "", mk); !slices.Equal(got, want) {
					t.Fatalf("prefix %q delimiter %q max-keys %d over %d shards:\n got %v\nwant %v", prefix, delim, mk, len(b.Shards), got, want)
				}
			}
		}
	}
	checkUploadsAcrossShards(t, env, uploads)
	for _, k := range keys {
		if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("lst"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	for k := range uploads {
		if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("lst"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("lst")}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += 2 * time.Minute
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range env.store.Objects() {
		if strings.HasPrefix(o, "s3i.") || strings.HasPrefix(o, "s3d.") {
			t.Fatalf("%s is left after the bucket was deleted and collected", o)
		}
	}
}

// checkShards checks that every shard is open at the generation the
// record names, holds only keys of its range, and no more than the limit
// plus what arrived while it was being counted.
func checkShards(t *testing.T, env *testEnv, b *bucketRec) {
	t.Helper()
	ctx := context.Background()
	for i, r := range b.Shards {
		shard := shardObject(b.ID, r.N)
		vals, _ := env.store.OmapGet(ctx, shard, keyOpen, keySplit)
		if st := parseState(vals[keyOpen], true); st.kind != stateOpen || st.gen != r.Gen || vals[keySplit] != nil {
			t.Fatalf("shard %d: state %+v split record %q, want open at %d", r.N, st, vals[keySplit], r.Gen)
		}
		kvs, _, _ := env.store.OmapList(ctx, shard, "\x01", afterMarker, 100000)
		for _, kv := range kvs {
			if kv.Key < r.From || i+1 < len(b.Shards) && kv.Key >= b.Shards[i+1].From {
				t.Fatalf("shard %d [%q, …) holds %q", r.N, r.From, kv.Key)
			}
		}
		if len(kvs) > env.gw.cfg.IndexShardKeys {
			t.Fatalf("shard %d holds %d keys, over the limit of %d", r.N, len(kvs), env.gw.cfg.IndexShardKeys)
		}
	}
}

// checkUploadsAcrossShards lists the uploads (which moved with their keys),
// completes half and aborts the rest.
func checkUploadsAcrossShards(t *testing.T, env *testEnv, uploads map[string]string) {
	t.Helper()
	ctx := context.Background()
	var want, got []string
	for k := range uploads {
		want = append(want, k)
	}
	slices.Sort(want)
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String("lst"), MaxUploads: aws.Int32(3)}
	for page := 0; page < 100; page++ {
		out, err := env.alice.ListMultipartUploads(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range out.Uploads {
			got = append(got, *u.Key)
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	if !slices.Equal(got, want) {
		t.Fatalf("uploads listed %q, want %q", got, want)
	}
	part := bytes.Repeat([]byte("p"), 1000)
	for i, k := range want {
		id := aws.String(uploads[k])
		if i%2 == 1 {
			if _, err := env.alice.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("lst"), Key: aws.String(k), UploadId: id}); err != nil {
				t.Fatalf("abort %q: %v", k, err)
			}
			continue
		}
		pr, err := env.alice.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("lst"), Key: aws.String(k), UploadId: id, PartNumber: aws.Int32(1), Body: bytes.NewReader(part)})
		if err != nil {
			t.Fatalf("upload part of %q: %v", k, err)
		}
		_, err = env.alice.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("lst"), Key: aws.String(k), UploadId: id,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: pr.ETag, PartNumber: aws.Int32(1)}}}})
		if err != nil {
			t.Fatalf("complete %q: %v", k, err)
		}
		if got := env.get("lst", k); !bytes.Equal(got, part) {
			t.Fatalf("%q reads %d bytes after complete", k, len(got))
		}
	}
}

// A split whose gateway died after marking the shard is finished by the
// next write that waits for it, once it is old enough.
func TestIndexSplitFinishedByAWriter(t *testing.T) {
	env := newEnv(t)
	env.gw.cfg.IndexShardKeys = 1 << 20 // no split of its own
	env.mkBucket(env.alice, "bkt")
	for i := 0; i < 20; i++ {
		env.put("bkt", fmt.Sprintf("k%02d", i), []byte("v"))
	}
	ctx := context.Background()
	b, _ := env.gw.lookupBucket(ctx, "bkt")
	rec, _ := json.Marshal(splitRec{N: 7, Start: env.clock.now().Add(-time.Minute)})
	err := env.store.OmapApply(ctx, shardObject(b.ID, 0), Txn{Set: map[string][]byte{
		keyOpen: shardState{kind: stateSplit, at: "k10"}.encode(), keySplit: rec}})
	if err != nil {
		t.Fatal(err)
	}
	env.put("bkt", "k15", []byte("new"))
	env.gw.buckets.drop("bkt")
	b, _ = env.gw.lookupBucket(ctx, "bkt")
	if len(b.Shards) != 2 || b.Shards[1] != (shardRange{From: "k10", N: 7}) || b.Shards[0].Gen != 1 {
		t.Fatalf("after the stuck split: shards %+v", b.Shards)
	}
	if got := env.get("bkt", "k15"); string(got) != "new" {
		t.Fatalf("k15 reads %q", got)
	}
	checkShards(t, env, b)
	out, err := env.alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt")})
	if err != nil || len(out.Contents) != 20 || aws.ToBool(out.IsTruncated) {
		t.Fatalf("listed %d keys (%v), want 20", len(out.Contents), err)
	}
}

// A request holding the record from before a split (cached, or read just
// before) reads, writes and lists what the split moved where it now is.
func TestStaleRecordFollowsSplit(t *testing.T) {
	env := newEnv(t)
	env.gw.cfg.IndexShardKeys = 1 << 20
	env.mkBucket(env.alice, "bkt")
	var keys []string
	for i := 0; i < 30; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
		env.put("bkt", keys[i], []byte(keys[i]))
	}
	ctx := context.Background()
	old, _ := env.gw.lookupBucket(ctx, "bkt")
	if err := env.gw.split(ctx, old, old.Shards[0], "k15"); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		e, err := env.gw.readEntry(ctx, old, k)
		if err != nil || e.Size != uint64(len(k)) {
			t.Fatalf("read %s with the record from before the split: %+v %v", k, e, err)
		}
	}
	l, err := env.gw.listAcross(ctx, old, acrossQuery{limit: 1000, keyOf: func(k string) string { return k }})
	if err != nil || len(l.Entries) != len(keys) || l.More {
		t.Fatalf("listing with the record from before the split: %d entries, more %v, %v", len(l.Entries), l.More, err)
	}
	_, err = env.gw.update(ctx, old, "k20", nil, func(*Entry) (change, error) {
		return change{entry: &Entry{Size: 99, ETag: "x", Stripe: stripeSize, Parts: []Part{{DataID: "d", Size: 99}}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	env.gw.buckets.drop("bkt")
	now, _ := env.gw.lookupBucket(ctx, "bkt")
	if e, err := env.gw.readEntry(ctx, now, "k20"); err != nil || e.Size != 99 {
		t.Fatalf("k20 after an update through the old record: %+v %v", e, err)
	}
	vals, _ := env.store.OmapGet(ctx, shardObject(now.ID, 0), "k20")
	if len(vals) != 0 {
		t.Fatal("the update through the old record landed in the shard the key left")
	}
}

// Listings and reads at each step of a split, with the record from before
// it and the one after: every key once, none missing, none stale (a write
// to the new shard once it is open is seen through either record).
func TestListingDuringSplitSteps(t *testing.T) {
	env := newEnv(t)
	env.gw.cfg.IndexShardKeys = 1 << 20
	env.mkBucket(env.alice, "bkt")
	for i := 0; i < 30; i++ {
		env.put("bkt", fmt.Sprintf("k%02d/x", i), []byte("v"))
	}
	ctx := context.Background()
	old, _ := env.gw.lookupBucket(ctx, "bkt")
	src, dst := shardObject(old.ID, 0), shardObject(old.ID, 9)
	all := func(b *bucketRec, delim string) int {
		t.Helper()
		l, err := env.gw.listAcross(ctx, b, acrossQuery{delim: delim, limit: 1000, keyOf: func(k string) string { return k }})
		if err != nil || l.More {
			t.Fatalf("listing: more %v, %v", l.More, err)
		}
		return len(l.Entries) + len(l.Prefixes)
	}
	// Step 1 and 2: splitting, T filled but not open.
	splitting := shardState{kind: stateSplit, at: "k15"}
	rec, _ := json.Marshal(splitRec{N: 9, Start: env.clock.now()})
	if err := env.store.OmapApply(ctx, src, Txn{Set: map[string][]byte{keyOpen: splitting.encode(), keySplit: rec}}); err != nil {
		t.Fatal(err)
	}
	if err := env.gw.copyMoved(ctx, src, dst, "k15"); err != nil {
		t.Fatal(err)
	}
	for _, delim := range []string{"", "/"} {
		if n := all(old, delim); n != 30 {
			t.Fatalf("while splitting, delimiter %q: %d items, want 30", delim, n)
		}
	}
	// Steps 3 and 4: trimming, T open and in the record; a key moved to T
	// is deleted through the new record.
	trimming := shardState{kind: stateTrimming, at: "k15"}
	if err := env.store.OmapApply(ctx, src, Txn{Set: map[string][]byte{keyOpen: trimming.encode()}}); err != nil {
		t.Fatal(err)
	}
	if err := env.gw.openMoved(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if err := env.gw.recordSplit(ctx, "bkt", old.ID, 0, trimming, 9); err != nil {
		t.Fatal(err)
	}
	env.gw.buckets.drop("bkt")
	now, _ := env.gw.lookupBucket(ctx, "bkt")
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k20/x")}); err != nil {
		t.Fatal(err)
	}
	if n := all(now, ""); n != 29 {
		t.Fatalf("while trimming, with the new record: %d items, want 29", n)
	}
	if _, err := env.gw.readEntry(ctx, old, "k20/x"); !errors.Is(err, ErrNoSuchKey) {
		t.Fatalf("a key deleted in the new shard, read through the old record: %v", err)
	}
	// Step 5 half done: S lost the moved keys but is not open yet. The
	// old record's listing waits for the split, then finishes it itself
	// (it looks stuck), and sees the delete.
	if err := env.store.OmapApply(ctx, src, Txn{RmFrom: "k15", RmTo: afterMarker}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += time.Minute
	if n := all(old, "/"); n != 29 {
		t.Fatalf("while trimming, with the old record: %d items, want 29", n)
	}
	env.gw.buckets.drop("bkt")
	b, _ := env.gw.lookupBucket(ctx, "bkt")
	checkShards(t, env, b)
}
