package s3gw

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7/pkg/signer"
)

func TestBuckets(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	env.mkBucket(env.alice, "photos")
	env.mkBucket(env.bob, "bobs")
	_, err := env.alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")})
	wantCode(t, "create own bucket again", err, "BucketAlreadyOwnedByYou")
	_, err = env.bob.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")})
	wantCode(t, "create alice's bucket as bob", err, "BucketAlreadyExists")
	for _, bad := range []string{"ab", "Photos", "a..b", "-ab", "ab-", "192.168.1.1", "xn--abc", strings.Repeat("a", 64), "a_b"} {
		resp, body := env.raw("PUT", "/"+bad, nil, nil)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "<Code>InvalidBucketName</Code>") {
			t.Errorf("create bucket %q: %d %s, want 400 InvalidBucketName", bad, resp.StatusCode, body)
		}
	}
	out, err := env.alice.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil || len(out.Buckets) != 1 || *out.Buckets[0].Name != "photos" {
		t.Fatalf("alice's ListBuckets: %+v %v, want only photos", out, err)
	}
	if _, err := env.alice.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("photos")}); err != nil {
		t.Fatal(err)
	}
	_, err = env.bob.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("photos")})
	if !strings.Contains(err.Error(), "403") {
		t.Fatalf("bob's HEAD of alice's bucket: %v, want 403", err)
	}
	_, err = env.bob.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("photos"), Key: aws.String("x"), Body: strings.NewReader("x")})
	wantCode(t, "bob's PUT into alice's bucket", err, "AccessDenied")
	_, err = env.alice.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("nothere")})
	if !strings.Contains(err.Error(), "404") {
		t.Fatalf("HEAD of a missing bucket: %v, want 404", err)
	}
	_, err = env.alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("nothere")})
	wantCode(t, "list a missing bucket", err, "NoSuchBucket")

	env.put("photos", "cat.jpg", []byte("meow"))
	_, err = env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("photos")})
	wantCode(t, "delete a bucket holding an object", err, "BucketNotEmpty")
	env.put("photos", "dog.jpg", []byte("woof")) // the failed delete opened it again
	for _, k := range []string{"cat.jpg", "dog.jpg"} {
		if _, err := env.alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("photos"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.alice.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("photos")}); err != nil {
		t.Fatal(err)
	}
	_, err = env.alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("photos"), Key: aws.String("x"), Body: strings.NewReader("x")})
	wantCode(t, "PUT into a deleted bucket", err, "NoSuchBucket")
	// The name is free again, for anyone.
	env.mkBucket(env.bob, "photos")
	_, err = env.alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("photos"), Key: aws.String("cat.jpg")})
	wantCode(t, "alice's GET in bob's new photos", err, "AccessDenied")
}

func TestAnonymousAndBadSignature(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bk1")
	resp, err := http.Get(env.srv.URL + "/bk1/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("anonymous GET: %d, want 403", resp.StatusCode)
	}
	wrong := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(env.srv.URL), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKALICE", SecretAccessKey: "wrong"}, nil
		})})
	_, err = wrong.ListBuckets(context.Background(), &s3.ListBucketsInput{})
	wantCode(t, "wrong secret", err, "SignatureDoesNotMatch")
}

func TestNotImplementedAnswersS3Error(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bk1")
	for _, rq := range []struct{ method, path string }{{"PUT", "/bk1?versioning"}, {"GET", "/bk1?tagging"}, {"GET", "/bk1?versions"}} {
		resp, body := env.raw(rq.method, rq.path, nil, nil)
		if resp.StatusCode != 501 || !strings.Contains(string(body), "<Code>NotImplemented</Code>") {
			t.Fatalf("%s %s: %d %s", rq.method, rq.path, resp.StatusCode, body)
		}
	}
}

// GetBucketVersioning says "never enabled" (no Status), as S3 does for
// such a bucket: rclone purge asks before deleting a bucket's contents and
// logged an error at the NotImplemented it got before. Another user's
// bucket is AccessDenied, a missing one NoSuchBucket.
func TestGetBucketVersioningUnversioned(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bk1")
	ctx := context.Background()
	out, err := env.alice.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("bk1")})
	if err != nil {
		t.Fatalf("GetBucketVersioning: %v", err)
	}
	if out.Status != "" || out.MFADelete != "" {
		t.Fatalf("GetBucketVersioning: status %q, MFA delete %q, want neither", out.Status, out.MFADelete)
	}
	_, err = env.bob.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("bk1")})
	wantCode(t, "bob's GetBucketVersioning of alice's bucket", err, "AccessDenied")
	_, err = env.alice.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("nope")})
	wantCode(t, "GetBucketVersioning of a missing bucket", err, "NoSuchBucket")
}

// Virtual-host style: <bucket>.<domain> addresses the bucket, the path is
// the key.
func TestVirtualHostStyle(t *testing.T) {
	env := newEnv(t)
	env.gw.cfg.Domains = []string{"localhost"}
	env.mkBucket(env.alice, "vhost")
	env.put("vhost", "dir/key", []byte("v"))
	req, _ := http.NewRequest("GET", env.srv.URL+"/dir/key", nil)
	req.Host = "vhost.localhost:9000"
	rq := &request{g: env.gw, r: req}
	if err := rq.route(); err != nil || rq.bucket != "vhost" || rq.key != "dir/key" {
		t.Fatalf("route of vhost.localhost/dir/key: bucket %q key %q %v", rq.bucket, rq.key, err)
	}
	req.Host = "127.0.0.1:9000"
	req.URL.Path = "/vhost/dir//key/"
	if err := rq.route(); err != nil || rq.bucket != "vhost" || rq.key != "dir//key/" {
		t.Fatalf("path style keeps '/' runs: bucket %q key %q %v", rq.bucket, rq.key, err)
	}
}

// A SigV2 presigned URL of a virtual-hosted object reads it: the
// verifier learns the bucket from the Host as the router does, and a URL
// signed for another bucket's key of the same path is refused.
func TestPresignedV2VirtualHost(t *testing.T) {
	env := newEnv(t)
	env.gw.cfg.Domains = []string{"localhost"}
	env.mkBucket(env.alice, "vhost")
	env.mkBucket(env.alice, "other")
	env.put("vhost", "dir/key", []byte("v2"))
	get := func(host string) (int, []byte) {
		req, _ := http.NewRequest("GET", env.srv.URL+"/dir/key", nil)
		req.Host = host
		signed := signer.PreSignV2(*req, "AKALICE", "alice-secret", 600, true)
		signed.Host = "vhost.localhost:9000"
		resp, err := http.DefaultClient.Do(signed)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if st, body := get("vhost.localhost:9000"); st != http.StatusOK || string(body) != "v2" {
		t.Errorf("presigned V2 GET: %d %q", st, body)
	}
	if st, body := get("other.localhost:9000"); st != http.StatusForbidden || !bytes.Contains(body, []byte("SignatureDoesNotMatch")) {
		t.Errorf("V2 URL signed for bucket other, sent to vhost: %d %q, want 403 SignatureDoesNotMatch", st, body)
	}
}

// A request with Expect: 100-continue and an empty body gets 100 Continue
// before its answer, as from S3. Without it botocore (aws-cli, boto3)
// misread the next answer on the connection and stalled 60 s: aws s3 sync
// of a tree holding an empty file did, now and then.
func TestEmptyBodyExpectContinue(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "bk1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(env.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "PUT /bk1/empty HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n", strings.TrimPrefix(env.srv.URL, "http://"))
	br := bufio.NewReader(conn)
	first, err := br.ReadString('\n')
	if err != nil || first != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line of the answer: %q %v, want HTTP/1.1 100 Continue", first, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the final answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the final answer to an anonymous PUT: %s, want 403", resp.Status)
	}
}
