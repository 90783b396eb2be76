package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// creds is the endpoint file: cairn dev's DIR/s3.json, or one the script
// writes for MinIO in the same format.
type creds struct {
	Endpoint  string `json:"endpoint"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// client is one S3 client shared by all the phase's workers, as an
// application shares one; its connection pool keeps one idle connection
// per worker, so no request pays for a new TCP connection after the first.
type client struct {
	s3 *s3.Client
}

func newClient(path string, clients int) (*client, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c creds
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.Endpoint == "" || c.AccessKey == "" || c.SecretKey == "" {
		return nil, fmt.Errorf("%s: needs endpoint, access_key and secret_key", path)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * clients,
		MaxIdleConnsPerHost: 2 * clients,
		IdleConnTimeout:     90 * time.Second,
	}
	cl := s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(c.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, ""),
		HTTPClient:   &http.Client{Transport: tr},
		// A failed request is counted, not retried: a retry would hide a
		// server that sheds load behind a lower rate.
		Retryer: aws.NopRetryer{},
	})
	return &client{s3: cl}, nil
}

func (c *client) ensureBucket(ctx context.Context, bucket string) error {
	if _, err := c.s3.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); err == nil {
		return nil
	}
	_, err := c.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	return nil
}

func key(prefix string, i int64) string { return fmt.Sprintf("%s/%08d", prefix, i) }

// phase runs o.clients workers until o.duration has passed (a put phase
// also stops after o.maxObjects objects, a delete phase once every object
// is gone). Requests in flight at the deadline are finished, not
// cancelled, so every object a put phase counts is whole and the time
// covers them.
func (c *client) phase(ctx context.Context, o options) (result, error) {
	cpu0, err := serverCPU(o.pids, o.clkTck)
	if err != nil {
		return result{}, err
	}
	front0, err := serverCPU(o.frontPids, o.clkTck)
	if err != nil {
		return result{}, err
	}
	self0 := selfCPU()
	start := time.Now()
	deadline := start.Add(o.duration)
	if o.op == "delete" {
		deadline = start.Add(time.Hour) // until every object is gone
	}
	lats, errs, first := c.workers(ctx, o, deadline)
	elapsed := time.Since(start)
	cpu1, err := serverCPU(o.pids, o.clkTck)
	if err != nil {
		return result{}, err
	}
	front1, err := serverCPU(o.frontPids, o.clkTck)
	if err != nil {
		return result{}, err
	}
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	r := summarize(o, lats, elapsed)
	r.Errors, r.FirstError = errs, first
	r.ClientCPU = selfCPU() - self0
	if len(o.pids) > 0 {
		r.ServerCPU, r.FrontCPU = cpu1-cpu0, front1-front0
		r.perCPU()
	}
	return r, nil
}

// workers runs the phase's clients and returns every successful request's
// latency, the number of failed ones and the first failure.
func (c *client) workers(ctx context.Context, o options, deadline time.Time) ([]time.Duration, int64, string) {
	var next, errs atomic.Int64
	var firstErr atomic.Value
	all := make([][]time.Duration, o.clients)
	var wg sync.WaitGroup
	for w := range o.clients {
		wg.Go(func() {
			op := c.worker(o, w)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				done, err := op(ctx, &next)
				if done {
					return
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				all[w] = append(all[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	var lats []time.Duration
	for _, l := range all {
		lats = append(lats, l...)
	}
	first, _ := firstErr.Load().(string)
	return lats, errs.Load(), first
}

// opFunc does one request; done says there is nothing left to do.
type opFunc func(ctx context.Context, next *atomic.Int64) (done bool, err error)

func (c *client) worker(o options, w int) opFunc {
	switch o.op {
	case "put":
		return c.putter(o, w)
	case "get":
		return c.getter(o, w)
	case "list":
		return c.lister(o, w)
	}
	return c.deleter(o)
}

// putter writes objects PREFIX/0, 1, ... in the order workers claim them.
// Each body is random bytes, different in its first 8 bytes from every
// other object's, so no server can store two objects as one.
func (c *client) putter(o options, w int) opFunc {
	body := make([]byte, o.size)
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	for i := 0; i+8 <= len(body); i += 8 {
		binary.LittleEndian.PutUint64(body[i:], rng.Uint64())
	}
	return func(ctx context.Context, next *atomic.Int64) (bool, error) {
		i := next.Add(1) - 1
		if i >= o.maxObjects {
			return true, nil
		}
		i += o.first
		if len(body) >= 8 {
			binary.LittleEndian.PutUint64(body, uint64(i))
		}
		k := key(o.prefix, i)
		_, err := c.s3.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &o.bucket, Key: &k, Body: bytes.NewReader(body), ContentLength: aws.Int64(o.size),
		})
		return false, err
	}
}

// getter reads whole objects chosen at random among the phase's -objects.
func (c *client) getter(o options, w int) opFunc {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	buf := make([]byte, 256<<10)
	return func(ctx context.Context, _ *atomic.Int64) (bool, error) {
		k := key(o.prefix, rng.Int64N(o.objects))
		out, err := c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: &o.bucket, Key: &k})
		if err != nil {
			return false, err
		}
		n, err := io.CopyBuffer(discard{}, out.Body, buf)
		out.Body.Close()
		if err == nil && n != o.size {
			err = fmt.Errorf("GET %s: %d bytes, want %d", k, n, o.size)
		}
		return false, err
	}
}

// listPage is the keys a listing page asks for (S3's default and most).
const listPage = 1000

// lister asks for pages of listPage keys starting after a key chosen at
// random among the -objects (all but the last listPage, so that every page
// is full and buckets of every size are compared on the same pages), and
// checks each page holds the keys that follow it, in order: a listing that
// is fast but wrong counts as failed.
func (c *client) lister(o options, w int) opFunc {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	return func(ctx context.Context, _ *atomic.Int64) (bool, error) {
		at := rng.Int64N(max(1, o.objects-listPage))
		after := key(o.prefix, at)
		out, err := c.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &o.bucket, StartAfter: &after, MaxKeys: aws.Int32(listPage)})
		if err != nil {
			return false, err
		}
		want := min(listPage, o.objects-at-1)
		if int64(len(out.Contents)) != want {
			return false, fmt.Errorf("a page after %s holds %d keys, want %d", after, len(out.Contents), want)
		}
		for i, obj := range out.Contents {
			if k := aws.ToString(obj.Key); k != key(o.prefix, at+1+int64(i)) {
				return false, fmt.Errorf("a page after %s holds %s at %d, want %s", after, k, i, key(o.prefix, at+1+int64(i)))
			}
		}
		return false, nil
	}
}

// discard is io.Discard without its ReadFrom, so CopyBuffer reads into the
// worker's own buffer instead of allocating.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// deleteBatch is the keys per DeleteObjects request (S3's limit is 1,000).
const deleteBatch = 500

// deleter removes the -objects in DeleteObjects batches.
func (c *client) deleter(o options) opFunc {
	return func(ctx context.Context, next *atomic.Int64) (bool, error) {
		from := next.Add(deleteBatch) - deleteBatch
		if from >= o.objects {
			return true, nil
		}
		var ids []types.ObjectIdentifier
		for i := from; i < min(from+deleteBatch, o.objects); i++ {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(key(o.prefix, i))})
		}
		out, err := c.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &o.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err == nil && len(out.Errors) > 0 {
			e := out.Errors[0]
			err = fmt.Errorf("DeleteObjects: %d keys failed, the first %s: %s", len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Message))
		}
		return false, err
	}
}
