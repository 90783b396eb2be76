package s3gw

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestSpaceComesBack: overwritten and deleted objects' data stays for the
// grace (GETs in flight), then the collector deletes it; so does the data
// of a PUT whose gateway died before its commit, and all of a deleted
// bucket.
func TestSpaceComesBack(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "gcb")
	data := randBytes(stripeSize+1, 5)
	env.put("gcb", "a", data)
	env.put("gcb", "a", data[:inlineMax+10]) // overwrite: 2 stripes to reclaim
	env.put("gcb", "b", data)
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("gcb"), Key: aws.String("b")}); err != nil {
		t.Fatal(err)
	}
	if n := countData(env.store); n != 5 {
		t.Fatalf("%d data objects before the grace, want 5 (old ones still readable)", n)
	}
	st, err := env.gw.Collect(ctx)
	if err != nil || st.Data != 0 {
		t.Fatalf("collected %+v, %v within the grace", st, err)
	}
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	st, err = env.gw.Collect(ctx)
	if err != nil || st.Data != 2 || countData(env.store) != 1 {
		t.Fatalf("after the grace: collected %+v, %v; %d data objects left, want 1", st, err, countData(env.store))
	}
	if got := env.get("gcb", "a"); string(got) != string(data[:inlineMax+10]) {
		t.Fatalf("the live object after collection: %q", got)
	}

	// A gateway that died mid-PUT: its intent and stripes, no entry.
	b, _ := env.gw.lookupBucket(ctx, "gcb")
	in := intent{Start: env.clock.now(), Size: 2*stripeSize + 5}
	env.store.OmapApply(ctx, b.shard("x"), Txn{Set: map[string][]byte{pendingKey("dead1"): in.encode()}})
	env.store.Put(ctx, dataObject(b.ID, "dead1", 0), data[:stripeSize])
	env.store.Put(ctx, dataObject(b.ID, "dead1", 2), data[:5])
	env.clock.offset += env.gw.cfg.IntentTimeout - time.Second
	if st, _ := env.gw.Collect(ctx); st.Intents != 0 {
		t.Fatalf("an intent younger than the timeout was reclaimed")
	}
	env.clock.offset += 2 * time.Second
	if st, err := env.gw.Collect(ctx); err != nil || st.Intents != 1 || countData(env.store) != 1 {
		t.Fatalf("dead PUT: collected %+v, %v; %d data objects left, want 1", st, err, countData(env.store))
	}

	// A deleted bucket goes whole.
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("gcb"), Key: aws.String("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("gcb")}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += env.gw.cfg.GCGrace + time.Second
	if st, err := env.gw.Collect(ctx); err != nil || st.Buckets != 1 {
		t.Fatalf("deleted bucket: %+v %v", st, err)
	}
	for _, o := range env.store.Objects() {
		if o != registryObject {
			t.Fatalf("left after the bucket was collected: %q (all: %q)", o, strings.Join(env.store.Objects(), " "))
		}
	}
	if kvs, _, _ := env.store.OmapList(ctx, registryObject, "", "", 10); len(kvs) != 0 {
		t.Fatalf("registry keys left: %v", kvs)
	}
}

// A write whose intent the collector reclaimed (its writer took longer
// than the intent timeout) cannot commit: its data is being deleted.
func TestReclaimedIntentFailsCommit(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "gcb")
	reclaimed := false
	env.store.Fail = func(op, name string) error {
		if op == "put" && strings.HasPrefix(name, "s3d.") && !reclaimed {
			reclaimed = true
			env.clock.offset += env.gw.cfg.IntentTimeout + time.Second
			if st, err := env.gw.Collect(ctx); err != nil || st.Intents != 1 {
				t.Errorf("collect during the PUT: %+v %v", st, err)
			}
		}
		return nil
	}
	_, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("gcb"), Key: aws.String("slow"), Body: strings.NewReader(strings.Repeat("d", inlineMax+1))})
	wantCode(t, "PUT whose intent was reclaimed", err, "InternalError")
	_, err = env.alice.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("gcb"), Key: aws.String("slow")})
	if err == nil {
		t.Fatal("the object is visible")
	}
	if n := countData(env.store); n != 0 {
		t.Fatalf("%d data objects left", n)
	}
}

func TestBucketStats(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "st1")
	env.mkBucket(env.bob, "st2")
	env.put("st1", "a", make([]byte, inlineMax+1)) // in a data object
	env.put("st1", "b/c", []byte("678"))           // inline
	env.put("st1", "a", []byte("1"))               // replaces: one GC record
	if _, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("st1"), Key: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	s, err := StatBucket(ctx, env.store, "st1")
	if err != nil || s.Objects != 2 || s.Bytes != 4 || s.Owner != "alice" || s.Uploads != 1 || s.GCPending != 1 {
		t.Fatalf("stat: %+v %v", s, err)
	}
	all, err := ListBucketStats(ctx, env.store)
	if err != nil || len(all) != 2 || all[0].Name != "st1" || all[1].Name != "st2" || all[1].Owner != "bob" {
		t.Fatalf("ls: %+v %v", all, err)
	}
	if _, err := StatBucket(ctx, env.store, "nope"); !errors.Is(err, ErrNoSuchBucket) {
		t.Fatalf("stat of a missing bucket: %v", err)
	}
}
