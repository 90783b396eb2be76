package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-storage/cairn/internal/devcluster"
	"github.com/cairn-storage/cairn/internal/s3gw"
)

// TestS3IndexSplits: a bucket whose index shards split every 100 keys
// (--s3-index-shard-keys) takes 2,000 PUTs from 16 clients that retry
// SlowDown as SDKs do, while a lister pages through it and the gateway is
// SIGKILLed once, mid-way (a split it was running is finished by the
// restarted one); then `cairn s3 bucket fill` adds 1,500 keys among
// them, a batch per transaction. Every listing is sorted, without duplicates, and holds
// every key acknowledged before it began; at the end every key reads
// back, listings with and without a delimiter equal the model, the index
// has split into many shards, and once the bucket is emptied and deleted
// the collector removes every shard.
func TestS3IndexSplits(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{s3: true, s3IndexShardKeys: 100, s3GCGrace: time.Second, s3IntentTimeout: 5 * time.Second})
	cl := retryingClient(c.s3Info())
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("split")}); err != nil {
		t.Fatal(err)
	}
	keys := splitKeys(2000)
	var acked sync.Map // key → true once its PUT returned
	var done atomic.Bool
	listErr := make(chan error, 1)
	go func() { listErr <- listWhileWriting(cl, &acked, &done) }()
	putAll(t, c, cl, keys, &acked)
	done.Store(true)
	if err := <-listErr; err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if i%7 != 0 {
			continue
		}
		out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("split"), Key: aws.String(k)})
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != k {
			t.Fatalf("get %q: %q", k, b)
		}
	}
	keys = append(keys, fillKeys(t, c, cl, "d4", 1500)...)
	sorted := slices.Sorted(slices.Values(keys))
	if got := listKeys(t, cl, "", 1000); !slices.Equal(got, sorted) {
		t.Fatalf("listing after the writes: %d keys, want %d", len(got), len(sorted))
	}
	checkDelimited(t, cl, sorted)
	st := bucketStat(t, c, "split")
	t.Logf("%d keys in %d index shards", len(keys), st.IndexShards)
	if st.Objects != uint64(len(keys)) || st.IndexShards < 10 {
		t.Fatalf("bucket stat: %d objects in %d index shards, want %d in at least 10", st.Objects, st.IndexShards, len(keys))
	}
	emptyAndDelete(t, c, cl, keys)
}

// fillKeys writes n objects PREFIX/%08d of "xyz" into the bucket with
// `cairn s3 bucket fill`, among the keys PUT before, checks that a second
// fill over them is refused and that they read back, and returns them.
func fillKeys(t *testing.T, c *cluster, cl *s3.Client, prefix string, n int) []string {
	args := []string{"s3", "bucket", "fill", "split", "--prefix", prefix, "--objects", strconv.Itoa(n), "--size", "3", "--index-shard-keys", "100"}
	if out, err := c.cli(nil, args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	args[7] = "10"
	if out, err := c.cli(nil, append(args, "--first", strconv.Itoa(n-5))...); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a fill over filled keys: %v\n%s, want it refused", err, out)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%08d", prefix, i)
	}
	for i := 0; i < n; i += 97 {
		out, err := cl.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("split"), Key: aws.String(keys[i])})
		if err != nil {
			t.Fatalf("get %q: %v", keys[i], err)
		}
		b, _ := io.ReadAll(out.Body)
		out.Body.Close()
		if string(b) != "xxx" {
			t.Fatalf("get %q: %q, want the filled xxx", keys[i], b)
		}
	}
	return keys
}

// retryingClient is an SDK client that retries SlowDown and broken
// connections as the SDK's default retryer does, more often.
func retryingClient(info devcluster.S3Info) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(info.Endpoint), UsePathStyle: true, RetryMaxAttempts: 20,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: info.AccessKey, SecretAccessKey: info.SecretKey}, nil
		})})
}

// splitKeys are n keys spread over prefixes, so that splits cut through
// common prefixes.
func splitKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("d%d/%c/obj %05d", i%5, 'a'+i%3, (i*7919)%100000)
	}
	return keys
}

// putAll puts keys from 16 clients; a third of the way in, the gateway is
// killed and restarted, and writes retry until it answers again.
func putAll(t *testing.T, c *cluster, cl *s3.Client, keys []string, acked *sync.Map) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(keys); i = int(next.Add(1)) - 1 {
				if err := putUntil(cl, keys[i], time.Now().Add(60*time.Second)); err != nil {
					errs <- err
					return
				}
				acked.Store(keys[i], true)
			}
		}()
	}
	for next.Load() < int64(len(keys)/3) {
		time.Sleep(10 * time.Millisecond)
	}
	c.kill("s3")
	c.restart("s3")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func putUntil(cl *s3.Client, key string, deadline time.Time) error {
	for {
		_, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("split"), Key: aws.String(key), Body: strings.NewReader(key)})
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond) // the gateway restarts
	}
}

// listWhileWriting lists the bucket again and again until done, checking
// each listing against what was acknowledged before it began.
func listWhileWriting(cl *s3.Client, acked *sync.Map, done *atomic.Bool) error {
	for rounds := 0; !done.Load(); rounds++ {
		var before []string
		acked.Range(func(k, _ any) bool { before = append(before, k.(string)); return true })
		got, err := listKeysErr(cl, "", 250)
		if err != nil {
			if done.Load() || strings.Contains(err.Error(), "connect") || strings.Contains(err.Error(), "EOF") {
				continue // the gateway was being restarted
			}
			return err
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			return fmt.Errorf("listing %d is not sorted or repeats a key", rounds)
		}
		for _, k := range before {
			if _, ok := slices.BinarySearch(got, k); !ok {
				return fmt.Errorf("listing %d misses %q, acknowledged before it began", rounds, k)
			}
		}
	}
	return nil
}

func listKeys(t *testing.T, cl *s3.Client, delim string, mk int32) []string {
	t.Helper()
	keys, err := listKeysErr(cl, delim, mk)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// listKeysErr pages through the bucket; with a delimiter it returns keys
// and common prefixes together, in order.
func listKeysErr(cl *s3.Client, delim string, mk int32) ([]string, error) {
	var out []string
	in := &s3.ListObjectsV2Input{Bucket: aws.String("split"), MaxKeys: aws.Int32(mk)}
	if delim != "" {
		in.Delimiter = aws.String(delim)
	}
	for page := 0; page < 10000; page++ {
		l, err := cl.ListObjectsV2(context.Background(), in)
		if err != nil {
			return nil, err
		}
		for _, o := range l.Contents {
			out = append(out, *o.Key)
		}
		for _, p := range l.CommonPrefixes {
			out = append(out, *p.Prefix)
		}
		if !aws.ToBool(l.IsTruncated) {
			slices.Sort(out)
			return out, nil
		}
		in.ContinuationToken = l.NextContinuationToken
	}
	return nil, fmt.Errorf("listing does not end")
}

// checkDelimited lists with delimiter "/" and small pages, which end
// inside common prefixes that span shards.
func checkDelimited(t *testing.T, cl *s3.Client, sorted []string) {
	var want []string
	for _, k := range sorted {
		cp := k[:strings.Index(k, "/")+1]
		if len(want) == 0 || want[len(want)-1] != cp {
			want = append(want, cp)
		}
	}
	for _, mk := range []int32{1, 2, 1000} {
		if got := listKeys(t, cl, "/", mk); !slices.Equal(got, want) {
			t.Fatalf("delimiter / with max-keys %d: %q, want %q", mk, got, want)
		}
	}
}

func bucketStat(t *testing.T, c *cluster, bucket string) s3gw.BucketStat {
	out, err := c.cli(nil, "s3", "bucket", "stat", bucket, "--json")
	var st s3gw.BucketStat
	if err == nil {
		err = json.Unmarshal(out, &st)
	}
	if err != nil {
		t.Fatalf("cairn s3 bucket stat: %v\n%s", err, out)
	}
	return st
}

// emptyAndDelete deletes every key (DeleteObjects, 1,000 a request) and the
// bucket, then waits for the collector to remove every index shard.
func emptyAndDelete(t *testing.T, c *cluster, cl *s3.Client, keys []string) {
	ctx := context.Background()
	for i := 0; i < len(keys); i += 1000 {
		var ids []types.ObjectIdentifier
		for _, k := range keys[i:min(i+1000, len(keys))] {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
		}
		out, err := cl.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("split"), Delete: &types.Delete{Objects: ids}})
		if err != nil || len(out.Errors) > 0 {
			t.Fatalf("DeleteObjects: %v %+v", err, out)
		}
	}
	if _, err := cl.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("split")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := 0
		if err := c.pool("s3").ListPrefix(ctx, "s3i.", func(string) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d index shards left 60 s after the bucket was deleted", n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
