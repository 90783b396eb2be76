package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestS3ConcurrentLargePutETags: rounds of 24 PUTs of 1-3 MiB bodies at
// once (aws-sdk-go-v2, to an erasure-coded data pool) come back with the
// ETag of each body's MD5, from the PUT, a HEAD and a GET, whose bytes are
// the body's. So many large bodies in flight make the gateway hash their
// MD5 on its multi-lane server; its metrics show that some did, and that
// every large body was counted once.
func TestS3ConcurrentLargePutETags(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{metrics: true, s3: true, s3DataPool: "s3ec", s3DataEC: "2+1"})
	cl := sdkClient(c.s3Info())
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lanes")}); err != nil {
		t.Fatal(err)
	}
	const rounds, perRound = 3, 24
	rng := rand.New(rand.NewPCG(uint64(rounds), perRound))
	for round := range rounds {
		bodies := make([][]byte, perRound)
		for i := range bodies {
			bodies[i] = make([]byte, 1<<20+rng.IntN(2<<20))
			for j := 0; j < len(bodies[i]); j += 8 {
				bodies[i][j] = byte(rng.Uint32())
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, perRound)
		for i, body := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = putAndCheckETag(ctx, cl, fmt.Sprintf("r%d/o%02d", round, i), body)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, object %d: %v", round, i, err)
			}
		}
	}
	body := httpGet(t, "http://"+c.devJSON()["s3"].Metrics+"/metrics")
	lanes := metricValue(t, body, `cairn_s3_md5_bodies_total{hashing="lanes"}`)
	alone := metricValue(t, body, `cairn_s3_md5_bodies_total{hashing="alone"}`)
	if lanes == 0 || lanes+alone != rounds*perRound {
		t.Fatalf("large bodies hashed: %v on the lanes, %v alone; want some on the lanes, %d in all", lanes, alone, rounds*perRound)
	}
	t.Logf("%v of %d large bodies hashed on the lanes", lanes, rounds*perRound)
}

// putAndCheckETag puts body as key and checks the ETag of the PUT, of a
// HEAD and of a GET, and the GET's bytes.
func putAndCheckETag(ctx context.Context, cl *s3.Client, key string, body []byte) error {
	sum := md5.Sum(body)
	want := `"` + hex.EncodeToString(sum[:]) + `"`
	put, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lanes"), Key: aws.String(key), Body: bytes.NewReader(body)})
	if err != nil {
		return err
	}
	head, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("lanes"), Key: aws.String(key)})
	if err != nil {
		return err
	}
	get, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lanes"), Key: aws.String(key)})
	if err != nil {
		return err
	}
	back, err := io.ReadAll(get.Body)
	get.Body.Close()
	switch {
	case err != nil:
		return err
	case aws.ToString(put.ETag) != want || aws.ToString(head.ETag) != want || aws.ToString(get.ETag) != want:
		return fmt.Errorf("ETags: PUT %s, HEAD %s, GET %s; the body's MD5 is %s", aws.ToString(put.ETag), aws.ToString(head.ETag), aws.ToString(get.ETag), want)
	case !bytes.Equal(back, body):
		return fmt.Errorf("GET returned %d bytes that differ from the %d put", len(back), len(body))
	}
	return nil
}
