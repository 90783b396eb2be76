package s3gw

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-storage/cairn/internal/metricsrv"
)

// Requests are counted by operation and outcome, with their body bytes.
func TestMetricsCountRequests(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	if _, err := env.alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 5000)
	if _, err := env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("missing")}); code(err) != "NoSuchKey" {
		t.Fatalf("get of a missing key: %v", err)
	}
	m := env.gw.cfg.Metrics
	for _, c := range []struct {
		op, code string
		want     float64
	}{{"CreateBucket", "OK", 1}, {"PutObject", "OK", 1}, {"GetObject", "NoSuchKey", 1}, {"GetObject", "OK", 0}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(c.op, c.code)); got != c.want {
			t.Errorf("%s %s: %g, want %g", c.op, c.code, got, c.want)
		}
	}
	if in := testutil.ToFloat64(m.bytes.WithLabelValues("PutObject", "in")); in < 5000 {
		t.Errorf("PutObject bytes in: %g, want at least the 5000 of the body", in)
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/metrics.md's S3 section from the registry")

// TestMetricsDocumented keeps docs/metrics.md's table of the S3 gateway's
// metrics equal to what it serves.
func TestMetricsDocumented(t *testing.T) {
	if err := metricsrv.CheckDoc("../../docs/metrics.md", "s3", NewMetrics().Registry, *updateDocs); err != nil {
		t.Fatal(err)
	}
}
