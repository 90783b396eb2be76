package s3gw

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// countingStore counts the round trips to index shards.
type countingStore struct {
	*MemStore
	gets, applies atomic.Int32
}

func (s *countingStore) OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error) {
	if strings.HasPrefix(name, "s3i.") {
		s.gets.Add(1)
	}
	return s.MemStore.OmapGet(ctx, name, keys...)
}

func (s *countingStore) OmapApply(ctx context.Context, name string, txn Txn) error {
	if strings.HasPrefix(name, "s3i.") {
		s.applies.Add(1)
	}
	return s.MemStore.OmapApply(ctx, name, txn)
}

// shardKeys lists every key of the bucket's index shards.
func shardKeys(t *testing.T, env *testEnv, bucket string) []string {
	t.Helper()
	b, err := env.gw.lookupBucket(context.Background(), bucket)
	if err != nil || b == nil {
		t.Fatalf("bucket %s: %v", bucket, err)
	}
	var keys []string
	for _, r := range b.Shards {
		kvs, _, err := env.store.OmapList(context.Background(), shardObject(b.ID, r.N), "", "", 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			keys = append(keys, kv.Key)
		}
	}
	return keys
}

// TestInlineObjects: objects of at most inlineMax bytes live in their
// index shard: a PUT is one read and one commit of the index and writes
// no data object, a GET one read; whole, ranged, copied, overwritten
// either way and deleted, they never leave their data behind or lose it.
func TestInlineObjects(t *testing.T) {
	cs := &countingStore{MemStore: NewMemStore()}
	env := newEnvWith(t, false, func(c *Config) { c.Store = cs })
	env.store = cs.MemStore
	ctx := context.Background()
	env.mkBucket(env.alice, "inl")
	for _, size := range []int{0, 1, 4096, inlineMax} {
		key := fmt.Sprintf("k%d", size)
		data := randBytes(size, uint64(size))
		cs.gets.Store(0)
		cs.applies.Store(0)
		env.put("inl", key, data)
		if g, a := cs.gets.Load(), cs.applies.Load(); g != 1 || a != 1 || countData(env.store) != 0 {
			t.Fatalf("PUT of %d bytes: %d reads and %d commits of the index, %d data objects; want 1, 1, 0", size, g, a, countData(env.store))
		}
		cs.gets.Store(0)
		if got := env.get("inl", key); !bytes.Equal(got, data) || cs.gets.Load() != 1 {
			t.Fatalf("GET of %d bytes: %d bytes back, equal %v, %d index reads", size, len(got), bytes.Equal(got, data), cs.gets.Load())
		}
		if size > 2 {
			rng := fmt.Sprintf("bytes=1-%d", size-2)
			out, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("inl"), Key: aws.String(key), Range: aws.String(rng)})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(out.Body)
			out.Body.Close()
			if !bytes.Equal(got, data[1:size-1]) {
				t.Fatalf("GET %s of %d bytes differs", rng, size)
			}
		}
	}
	// Copies read the inline source; the copy's data is its own.
	if _, err := env.alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("inl"), Key: aws.String("copy"), CopySource: aws.String("inl/k4096")}); err != nil {
		t.Fatal(err)
	}
	if got := env.get("inl", "copy"); !bytes.Equal(got, randBytes(4096, 4096)) {
		t.Fatal("the copy of an inline object differs")
	}
	// Inline over striped leaves the striped data to the collector;
	// striped over inline drops the inline data; a delete drops it too.
	big := randBytes(inlineMax+1, 9)
	env.put("inl", "k1", big)
	if got := env.get("inl", "k1"); !bytes.Equal(got, big) || hasKey(shardKeys(t, env, "inl"), inlineKey("k1")) {
		t.Fatalf("striped over inline: equal %v, inline data left: %v", bytes.Equal(got, big), hasKey(shardKeys(t, env, "inl"), inlineKey("k1")))
	}
	env.put("inl", "k1", []byte("small again"))
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	if st, err := env.gw.Collect(ctx); err != nil || st.Data != 1 || env.get("inl", "k1") == nil || string(env.get("inl", "k1")) != "small again" {
		t.Fatalf("inline over striped: collected %+v %v", st, err)
	}
	for _, k := range []string{"k0", "k1", "k4096", fmt.Sprintf("k%d", inlineMax), "copy"} {
		if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("inl"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range shardKeys(t, env, "inl") {
		if !strings.HasPrefix(k, "\x00") || strings.HasPrefix(k, prefixInline) {
			t.Fatalf("left in the index after every object was deleted: %q (all: %q)", k, shardKeys(t, env, "inl"))
		}
	}
}

func hasKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// Inline data that is not its entry's (another write's, or damaged) is
// never served: the GET fails with an internal error.
func TestInlineDataMismatch(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "inl")
	env.put("inl", "k", []byte("the real data"))
	b, _ := env.gw.lookupBucket(ctx, "inl")
	for _, bad := range [][]byte{[]byte("0000000000000000the real data"), nil} {
		txn := Txn{Set: map[string][]byte{inlineKey("k"): bad}}
		if bad == nil {
			txn = Txn{Rm: []string{inlineKey("k")}}
		}
		if err := env.store.OmapApply(ctx, b.shard("k"), txn); err != nil {
			t.Fatal(err)
		}
		_, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("inl"), Key: aws.String("k")})
		wantCode(t, "GET of inline data that is not the entry's", err, "InternalError")
	}
}
