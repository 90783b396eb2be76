package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// TestS3DiskFull fills osd.0's small disk through the S3 gateway: a PUT
// that needs osd.0 fails with 507 InsufficientCapacity naming the full OSD
// (not a 500 a client retries for nothing), every acknowledged object
// reads back whole and lists, DELETEs succeed with the disk full (the
// bucket's index is on osd.0 too), and once the collector has freed their
// data, PUTs succeed again.
func TestS3DiskFull(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{dir: devDirWithSmallOSD0(t, "160m"), s3: true, s3GCGrace: 2 * time.Second})
	c.kill("osd.0")
	c.restart("osd.0", "--reserve", fmt.Sprint(2<<20))
	c.waitHealthy(60*time.Second, "with osd.0 back")
	cl := sdkClient(c.s3Info())
	ctx := context.Background()
	bucket := s3BucketIndexedOnOSD0(t, c, cl)

	acked := s3FillUntilFull(t, cl, bucket, 400)
	for _, k := range acked {
		if got := s3GetBytes(t, cl, bucket, k); !bytes.Equal(got, payload(k, 0, 2<<20)) {
			t.Fatalf("%s reads back wrong with osd.0 full", k)
		}
	}
	out, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(out.Contents) != len(acked) {
		t.Fatalf("listing with osd.0 full: %d keys, %v; want the %d acknowledged", len(out.Contents), err, len(acked))
	}

	for _, k := range acked {
		if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
			t.Fatalf("DELETE %s with osd.0 full: %v", k, err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		k := fmt.Sprintf("after-%04d", i)
		_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k),
			Body: bytes.NewReader(payload(k, 0, 2<<20))})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PUTs still fail 60 s after deleting every object: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// s3BucketIndexedOnOSD0 creates buckets until one's index shard is on
// osd.0, and returns its name.
func s3BucketIndexedOnOSD0(t *testing.T, c *cluster, cl *s3.Client) string {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < 64; i++ {
		name := fmt.Sprintf("full%02d", i)
		if _, err := cl.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		onOSD0 := false
		err := c.pool("s3").ListPrefix(context.Background(), "s3i.", func(obj string) error {
			if !seen[obj] {
				seen[obj] = true
				onOSD0 = slices.Contains(actingOf(t, c, "s3", obj), 0)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if onOSD0 {
			return name
		}
	}
	t.Fatal("64 buckets, none with its index on osd.0")
	return ""
}

// s3FillUntilFull PUTs objects of 2 MiB until one fails for want of space,
// at most max; the failure must be 507 InsufficientCapacity naming osd.0.
// It returns the keys acknowledged.
func s3FillUntilFull(t *testing.T, cl *s3.Client, bucket string, max int) []string {
	t.Helper()
	var acked []string
	for i := 0; i < max; i++ {
		k := fmt.Sprintf("fill-%04d", i)
		_, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k),
			Body: bytes.NewReader(payload(k, 0, 2<<20))})
		if err == nil {
			acked = append(acked, k)
			continue
		}
		var ae smithy.APIError
		var re *awshttp.ResponseError
		if !errors.As(err, &ae) || !errors.As(err, &re) {
			t.Fatalf("PUT %s: %v", k, err)
		}
		if ae.ErrorCode() != "InsufficientCapacity" || re.HTTPStatusCode() != 507 ||
			!strings.Contains(ae.ErrorMessage(), "osd.0") || !strings.Contains(ae.ErrorMessage(), "full") {
			t.Fatalf("PUT %s with osd.0 full: %d %s %q; want 507 InsufficientCapacity naming osd.0 and saying full",
				k, re.HTTPStatusCode(), ae.ErrorCode(), ae.ErrorMessage())
		}
		t.Logf("after %d acknowledged PUTs: %d %s: %s", len(acked), re.HTTPStatusCode(), ae.ErrorCode(), ae.ErrorMessage())
		return acked
	}
	t.Fatalf("PUT %d MiB without filling osd.0's small disk", 2*max)
	return nil
}

// s3GetBytes GETs key whole.
func s3GetBytes(t *testing.T, cl *s3.Client, bucket, key string) []byte {
	t.Helper()
	out, err := cl.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return b
}
