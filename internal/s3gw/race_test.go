package s3gw

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// DeleteBucket racing PUTs into the empty bucket: if the delete succeeds,
// no PUT was acknowledged (it would have been found by the emptiness
// check); if a PUT was acknowledged, the delete answers BucketNotEmpty and
// the object is there.
func TestDeleteBucketRacesPuts(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	for round := 0; round < 20; round++ {
		name := fmt.Sprintf("race%d", round)
		env.mkBucket(env.alice, name)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var acked []string
		var delErr error
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				key := fmt.Sprint("k", i)
				_, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(name), Key: aws.String(key), Body: bytes.NewReader([]byte(key))})
				if err == nil {
					mu.Lock()
					acked = append(acked, key)
					mu.Unlock()
				} else if code(err) != "NoSuchBucket" {
					t.Errorf("PUT racing a delete: %v", err)
				}
			}(i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, delErr = env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
		}()
		wg.Wait()
		switch {
		case delErr == nil && len(acked) > 0:
			t.Fatalf("round %d: the bucket was deleted although PUTs of %v were acknowledged", round, acked)
		case delErr != nil && code(delErr) != "BucketNotEmpty":
			t.Fatalf("round %d: delete: %v", round, delErr)
		case delErr != nil:
			for _, k := range acked {
				if got := env.get(name, k); string(got) != k {
					t.Fatalf("round %d: acknowledged %s reads %q", round, k, got)
				}
			}
		}
	}
}

// GETs during repeated overwrites of a multi-stripe object each read
// exactly one written version, never a mix.
func TestGetDuringOverwrites(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "ovw")
	versions := map[[32]byte]bool{}
	var datas [][]byte
	for v := 0; v < 4; v++ {
		d := randBytes(2*stripeSize+100, uint64(100+v))
		datas = append(datas, d)
		versions[sha256.Sum256(d)] = true
	}
	env.put("ovw", "obj", datas[0])
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i < 12; i++ {
			env.put("ovw", "obj", datas[i%len(datas)])
		}
		close(stop)
	}()
	reads := 0
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		out, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("ovw"), Key: aws.String("obj")})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !versions[sha256.Sum256(b)] {
			t.Fatalf("a GET during overwrites read %d bytes that are no written version", len(b))
		}
		reads++
	}
	wg.Wait()
	t.Logf("%d GETs, each one whole version", reads)
}

// Every transaction's answer lost and its resend failing on its own
// change: writes still succeed once, and no live data goes to the
// collector or is removed.
func TestResendAfterApply(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "rsnd")
	env.store.Resent = func(name string) bool { return true }
	data := randBytes(stripeSize+10, 21)
	env.put("rsnd", "k", data[:5])
	env.put("rsnd", "k", data) // an overwrite
	cr, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("rsnd"), Key: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.alice.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("rsnd"), Key: aws.String("m"), UploadId: cr.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("part"))}); err != nil {
		t.Fatal(err)
	}
	env.clock.offset += 2 * env.gw.cfg.GCGrace
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.get("rsnd", "k"); !bytes.Equal(got, data) {
		t.Fatalf("after resent commits and a collection: %d bytes, want %d", len(got), len(data))
	}
	if n := countData(env.store); n != 3 {
		t.Fatalf("%d data objects, want 3 (2 stripes of k, 1 of the part)", n)
	}
	env.put("rsnd", "x", []byte("x"))
	if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("rsnd"), Key: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	env.mkBucket(env.alice, "rsnd2")
	if _, err := env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("rsnd2")}); err != nil {
		t.Fatalf("DeleteBucket with resent transactions: %v", err)
	}
	_, err = env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("rsnd")})
	wantCode(t, "DeleteBucket of a bucket holding objects, transactions resent", err, "BucketNotEmpty")
	env.put("rsnd", "after", []byte("open again"))
}

// Writers incrementing a counter object with If-Match lose no update: a
// write whose ETag is stale gets 412 and reads again.
func TestIfMatchNoLostUpdate(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "ctr")
	env.put("ctr", "n", []byte("0"))
	const writers, each = 8, 8
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				out, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("ctr"), Key: aws.String("n")})
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(out.Body)
				out.Body.Close()
				var n int
				fmt.Sscan(string(b), &n)
				_, err = env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ctr"), Key: aws.String("n"),
					Body: bytes.NewReader([]byte(fmt.Sprint(n + 1))), IfMatch: out.ETag})
				switch code(err) {
				case "":
					done++
				case "PreconditionFailed":
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := string(env.get("ctr", "n")); got != fmt.Sprint(writers*each) {
		t.Fatalf("counter %s after %d increments", got, writers*each)
	}
}

// A part uploaded again while CompleteMultipartUpload runs, between its
// listing of the parts and its commit (a client retrying a part that
// timed out, the first attempt still in flight), must not take data from
// the completed object: the replaced part's data went to the collector,
// so if the object named it, it would lose those bytes after the grace.
// Either the part is refused or it lands before the listing; the object
// reads whole after a collection, and no data is left that nothing names.
func TestCompleteRacesPartReupload(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "mpr")
	cr, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpr"), Key: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	part := func(n int32, data []byte) (*s3.UploadPartOutput, error) {
		return env.alice.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpr"), Key: aws.String("m"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(n), Body: bytes.NewReader(data)})
	}
	p1, p2 := randBytes(minPartSize, 31), randBytes(100, 32)
	o1, err := part(1, p1)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := part(2, p2)
	if err != nil {
		t.Fatal(err)
	}
	// A Complete that fails leaves the upload open to parts.
	_, err = env.alice.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpr"), Key: aws.String("m"), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: o2.ETag}}}})
	wantCode(t, "Complete naming part 1 with part 2's ETag", err, "InvalidPart")
	if o2, err = part(2, p2); err != nil {
		t.Fatalf("a part after a failed Complete: %v", err)
	}
	// Once the Complete has listed the parts, part 1 is sent again
	// (the same bytes, as a client's retry sends).
	var retryErr error
	fired := env.onceBetween("mpr", "m", "omaplist", "omapget", func() { _, retryErr = part(1, p1) })
	_, err = env.alice.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpr"), Key: aws.String("m"), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: o1.ETag}, {PartNumber: aws.Int32(2), ETag: o2.ETag}}}})
	env.store.Fail = nil
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	if !*fired {
		t.Fatal("the part was never sent again during the Complete: the test hooks the wrong step")
	}
	t.Logf("the part sent again during the Complete: %v", retryErr)
	env.clock.offset += 2 * env.gw.cfg.GCGrace
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	var got []byte
	out, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpr"), Key: aws.String("m")})
	if err == nil {
		got, err = io.ReadAll(out.Body)
		out.Body.Close()
	}
	if err != nil || !bytes.Equal(got, append(p1, p2...)) {
		t.Fatalf("after a collection the completed object reads %d bytes (%v), want %d: its data went to the collector", len(got), err, len(p1)+len(p2))
	}
	// 2 stripes of part 1, 1 of part 2: nothing else is left.
	if n := countData(env.store); n != 3 {
		t.Fatalf("%d data objects after the collection, want 3: the part sent again leaked", n)
	}
}

// A part uploaded again while AbortMultipartUpload runs, between its
// listing of the parts and its commit: the abort hands what it listed to
// the collector and removes every part key, so the new part's data must
// not land in between, where nothing would ever name it again.
func TestAbortRacesPartReupload(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "mpa")
	cr, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpa"), Key: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	part := func() error {
		_, err := env.alice.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpa"), Key: aws.String("m"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(randBytes(100, 33))})
		return err
	}
	if err := part(); err != nil {
		t.Fatal(err)
	}
	var retryErr error
	fired := env.onceBetween("mpa", "m", "omaplist", "omapapply", func() { retryErr = part() })
	_, err = env.alice.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("mpa"), Key: aws.String("m"), UploadId: cr.UploadId})
	env.store.Fail = nil
	if err != nil || !*fired {
		t.Fatalf("abort: %v (part sent again during it: %v)", err, *fired)
	}
	t.Logf("the part sent again during the Abort: %v", retryErr)
	env.clock.offset += 2 * env.gw.cfg.GCGrace
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countData(env.store); n != 0 {
		t.Fatalf("%d data objects after the abort and a collection, want 0: the part sent again leaked", n)
	}
}

// A Complete sent again while the first still runs (a client's retry
// after a timeout): whichever commits, both answer with the object, even
// the one that lists the parts after the other removed them.
func TestCompleteRacesComplete(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "mpc")
	cr, err := env.alice.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("m")})
	if err != nil {
		t.Fatal(err)
	}
	o1, err := env.alice.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpc"), Key: aws.String("m"), UploadId: cr.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("only part"))})
	if err != nil {
		t.Fatal(err)
	}
	complete := func() (*s3.CompleteMultipartUploadOutput, error) {
		return env.alice.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("m"), UploadId: cr.UploadId,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: o1.ETag}}}})
	}
	// The second Complete runs whole just before the first lists the parts.
	var second *s3.CompleteMultipartUploadOutput
	var secondErr error
	fired := env.onceBetween("mpc", "m", "", "omaplist", func() { second, secondErr = complete() })
	first, err := complete()
	env.store.Fail = nil
	if !*fired || secondErr != nil {
		t.Fatalf("the second Complete: ran %v, %v", *fired, secondErr)
	}
	if err != nil {
		t.Fatalf("the first Complete, whose parts the second removed: %v", err)
	}
	if aws.ToString(first.ETag) != aws.ToString(second.ETag) {
		t.Fatalf("the two Completes answer ETags %s and %s", aws.ToString(first.ETag), aws.ToString(second.ETag))
	}
	if got := env.get("mpc", "m"); string(got) != "only part" {
		t.Fatalf("the object reads %q", got)
	}
}

// onceBetween makes the store run fn once, on the index shard of key in
// bucket, at the first op `at` that follows an op `after` there ("": any
// op before), so a test can put a request between two steps of another.
// It returns whether fn ran; the caller clears env.store.Fail.
func (env *testEnv) onceBetween(bucket, key, after, at string, fn func()) *bool {
	b, _ := env.gw.lookupBucket(context.Background(), bucket)
	shard := b.shard(key)
	var mu sync.Mutex
	seen, fired := after == "", new(bool)
	env.store.Fail = func(op, name string) error {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case name != shard || *fired:
		case seen && op == at:
			*fired = true
			mu.Unlock()
			fn()
			mu.Lock()
		case op == after:
			seen = true
		}
		return nil
	}
	return fired
}
