package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// The S3 gateway that cairn dev starts, driven by clients nobody here
// wrote, with their default settings: aws-cli, boto3 and the AWS SDK for Go.

// s3Info reads the cluster's DIR/s3.json.
func (c *cluster) s3Info() devcluster.S3Info {
	c.t.Helper()
	fi, err := os.Stat(filepath.Join(c.dir, "s3.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		c.t.Fatalf("s3.json has mode %v, want 0600 (it holds a secret)", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, "s3.json"))
	var info devcluster.S3Info
	if err := json.Unmarshal(b, &info); err != nil || info.AccessKey == "" || info.SecretKey == "" {
		c.t.Fatalf("s3.json: %v: %s", err, b)
	}
	scheme := "http"
	if c.opts.tls {
		scheme = "https"
		if _, err := os.Stat(info.CAFile); err != nil {
			c.t.Fatalf("s3.json's ca_file: %v", err)
		}
	}
	if want := fmt.Sprintf("%s://127.0.0.1:%d", scheme, c.s3Port); info.Endpoint != want {
		c.t.Fatalf("s3.json endpoint %q, want %q", info.Endpoint, want)
	}
	return info
}

// requireTool fails (not skips) when a client the tests need is missing,
// saying how to install it; .ci/run installs them.
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: %s (.ci/run does this)", name, install)
	}
	return p
}

// s3Env is the environment of a client process: the admin key, and no
// configuration of the machine's user.
func s3Env(info devcluster.S3Info) []string {
	env := os.Environ()
	if info.CAFile != "" {
		env = append(env, "AWS_CA_BUNDLE="+info.CAFile)
	}
	return append(env, "AWS_ACCESS_KEY_ID="+info.AccessKey, "AWS_SECRET_ACCESS_KEY="+info.SecretKey,
		"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true", "S3_ENDPOINT="+info.Endpoint, "S3_ACCESS_KEY="+info.AccessKey, "S3_SECRET_KEY="+info.SecretKey)
}

func runAWS(t *testing.T, info devcluster.S3Info, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("aws", append([]string{"--endpoint-url", info.Endpoint}, args...)...)
	cmd.Env, cmd.Dir = s3Env(info), dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	// botocore waits 60 s for an answer it misread before it resends
	// (TestEmptyBodyExpectContinue has the case that did this).
	if d := time.Since(start); d > 45*time.Second {
		t.Errorf("aws %s took %.1f s: did botocore wait out its 60 s read timeout?", strings.Join(args, " "), d.Seconds())
	} else if d > 20*time.Second {
		t.Logf("aws %s took %.1f s", strings.Join(args, " "), d.Seconds())
	}
	return string(out), err
}

func mustAWS(t *testing.T, info devcluster.S3Info, dir string, args ...string) string {
	t.Helper()
	out, err := runAWS(t, info, dir, args...)
	if err != nil {
		t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func sha256File(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestS3AWSCLI: aws-cli's s3 commands (mb, cp of a small file and of a
// 64 MiB file, which it uploads in parts and downloads in ranges, ls,
// sync both ways, rm, rb) and s3api put-object --if-none-match.
func TestS3AWSCLI(t *testing.T) {
	t.Parallel()
	requireTool(t, "aws", "pip install awscli (a release of 2025 or later sends CRC checksums by default)")
	c := startCluster(t, clusterOpts{s3: true})
	info := c.s3Info()
	ver, _ := exec.Command("aws", "--version").CombinedOutput()
	t.Logf("client: %s", strings.TrimSpace(string(ver)))
	work := t.TempDir()
	big := filepath.Join(work, "big.bin")
	if err := os.WriteFile(big, randomBytes(64<<20+12345), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAWS(t, info, work, "s3", "mb", "s3://backups")
	start := time.Now()
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", big, "s3://backups/vm/big.bin")
	up := time.Since(start)
	start = time.Now()
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://backups/vm/big.bin", filepath.Join(work, "big.back"))
	t.Logf("64 MiB: upload %.1f s, download %.1f s", up.Seconds(), time.Since(start).Seconds())
	if sha256File(t, big) != sha256File(t, filepath.Join(work, "big.back")) {
		t.Fatal("the 64 MiB object came back different")
	}
	// A server-side copy: aws-cli copies a large object in parts (UploadPartCopy).
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://backups/vm/big.bin", "s3://backups/vm/copy.bin")
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://backups/vm/copy.bin", filepath.Join(work, "copy.back"))
	if sha256File(t, big) != sha256File(t, filepath.Join(work, "copy.back")) {
		t.Fatal("the server-side copy of the 64 MiB object differs")
	}
	head := mustAWS(t, info, work, "s3api", "head-object", "--bucket", "backups", "--key", "vm/big.bin")
	if !strings.Contains(head, `-9\"`) {
		t.Errorf("head-object of the multipart upload: want an ETag of 9 parts (8 MiB each, the last 12345 bytes): %s", head)
	}

	src := filepath.Join(work, "src")
	for _, f := range []string{"a.txt", "dir/b.txt", "dir/sub/c d.txt", "ü.txt"} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755)
		os.WriteFile(filepath.Join(src, f), []byte("content of "+f), 0o644)
	}
	mustAWS(t, info, work, "s3", "sync", "--only-show-errors", src, "s3://backups/tree")
	ls := mustAWS(t, info, work, "s3", "ls", "--recursive", "s3://backups/tree/")
	for _, f := range []string{"tree/a.txt", "tree/dir/b.txt", "tree/dir/sub/c d.txt", "tree/ü.txt"} {
		if !strings.Contains(ls, f) {
			t.Errorf("s3 ls --recursive lacks %s:\n%s", f, ls)
		}
	}
	// aws-cli sent its default CRC32 with every upload, and the gateway
	// verified and kept it.
	if out := mustAWS(t, info, work, "s3api", "list-objects-v2", "--bucket", "backups", "--prefix", "tree/a.txt"); !strings.Contains(out, `"CRC32"`) {
		t.Errorf("list-objects-v2 does not show the CRC32 aws-cli sends by default: %s", out)
	}
	if out := mustAWS(t, info, work, "s3api", "head-object", "--bucket", "backups", "--key", "tree/a.txt", "--checksum-mode", "ENABLED"); !strings.Contains(out, "ChecksumCRC32") {
		t.Errorf("head-object --checksum-mode ENABLED: %s", out)
	}
	if out := mustAWS(t, info, work, "s3", "ls", "s3://backups/tree/"); !strings.Contains(out, "PRE dir/") || !strings.Contains(out, "a.txt") {
		t.Errorf("s3 ls of a prefix: %s", out)
	}
	if out := mustAWS(t, info, work, "s3", "sync", src, "s3://backups/tree"); strings.TrimSpace(out) != "" {
		t.Errorf("a second sync copied again: %s", out)
	}
	back := filepath.Join(work, "back")
	mustAWS(t, info, work, "s3", "sync", "--only-show-errors", "s3://backups/tree", back)
	if b, err := os.ReadFile(filepath.Join(back, "dir/sub/c d.txt")); err != nil || string(b) != "content of dir/sub/c d.txt" {
		t.Errorf("synced back: %q %v", b, err)
	}

	once := filepath.Join(work, "once")
	os.WriteFile(once, []byte("first"), 0o644)
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "backups", "--key", "once", "--body", once, "--if-none-match", "*")
	out, err := runAWS(t, info, work, "s3api", "put-object", "--bucket", "backups", "--key", "once", "--body", once, "--if-none-match", "*")
	if err == nil || !strings.Contains(out, "PreconditionFailed") {
		t.Errorf("a second put-object --if-none-match '*': want PreconditionFailed, got %v: %s", err, out)
	}

	mustAWS(t, info, work, "s3", "rm", "--only-show-errors", "--recursive", "s3://backups/")
	if out := mustAWS(t, info, work, "s3", "ls", "--recursive", "s3://backups/"); strings.TrimSpace(out) != "" {
		t.Errorf("objects left after rm --recursive: %s", out)
	}
	mustAWS(t, info, work, "s3", "rb", "s3://backups")
	if out := mustAWS(t, info, work, "s3", "ls"); strings.Contains(out, "backups") {
		t.Errorf("bucket listed after rb: %s", out)
	}
}

// TestS3Boto3 runs testdata/s3_boto3.py, which asserts what it does, over
// HTTP against cairn dev's gateway and over HTTPS against a second gateway
// started with --tls-cert (where boto3 streams uploads as aws-chunked
// bodies with CRC trailers).
func TestS3Boto3(t *testing.T) {
	t.Parallel()
	py := requireTool(t, "python3", "apt-get install python3")
	if out, err := exec.Command(py, "-c", "import boto3").CombinedOutput(); err != nil {
		t.Fatalf("boto3 is not installed: pip install boto3 (.ci/run does this): %s", out)
	}
	c := startCluster(t, clusterOpts{s3: true})
	info := c.s3Info()
	run := func(bucket string, env ...string) {
		cmd := exec.Command(py, "testdata/s3_boto3.py")
		cmd.Env = append(append(s3Env(info), "S3_BUCKET="+bucket), env...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "ok boto3") {
			t.Fatalf("s3_boto3.py on %s: %v\n%s", bucket, err, out)
		}
		t.Logf("%s: %s", bucket, strings.TrimSpace(string(out)))
	}
	run("boto-http")
	tlsEndpoint, ca := startTLSGateway(t, c)
	info.Endpoint = tlsEndpoint
	run("boto-https", "AWS_CA_BUNDLE="+ca)
}

// startTLSGateway starts a second gateway on the cluster's pool s3, over
// TLS with a certificate for 127.0.0.1, and returns its endpoint and CA.
func startTLSGateway(t *testing.T, c *cluster) (endpoint, caFile string) {
	dir := t.TempDir()
	writeTLSDir(t, dir)
	addr := startGateway(t, c, "--tls-cert", filepath.Join(dir, "server-cert.pem"), "--tls-key", filepath.Join(dir, "server-key.pem"))
	return "https://" + addr, filepath.Join(dir, "ca-cert.pem")
}

// startGateway starts another gateway on the cluster's pool s3 with args,
// stopped at the test's end, and returns its address once it listens.
func startGateway(t *testing.T, c *cluster, args ...string) string {
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1))
	srv := exec.Command(cairnBin, append([]string{"--conf", c.conf, "s3", "--listen", addr, "--pool", "s3"}, args...)...)
	var log bytes.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("the gateway on %s logged:\n%s", addr, log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not listen on %s: %s", addr, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sdkClient is the AWS SDK for Go's S3 client on the gateway.
func sdkClient(info devcluster.S3Info) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(info.Endpoint), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: info.AccessKey, SecretAccessKey: info.SecretKey}, nil
		})})
}

// TestS3Conditional: the gateway's conditional writes under contention,
// on one cluster. 64 clients create one key with If-None-Match: * at once,
// round after round (100, or as many as 30 s allow, at least 20): exactly
// one 200 each round, the others 412, and the object holds the winner's
// bytes. Then 16 writers each add 1 to a counter object 10 times by
// read-modify-write with If-Match, retrying on 412: no update is lost.
func TestS3Conditional(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{s3: true})
	cl := sdkClient(c.s3Info())
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("race")}); err != nil {
		t.Fatal(err)
	}
	t.Run("creators", func(t *testing.T) { conditionalCreators(t, cl) })
	t.Run("if-match", func(t *testing.T) { ifMatchWriters(t, cl) })
}

func isPreconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
}

func conditionalCreators(t *testing.T, cl *s3.Client) {
	const creators = 64
	ctx := context.Background()
	start := time.Now()
	rounds := 0
	for ; rounds < 100 && (rounds < 20 || time.Since(start) < 30*time.Second); rounds++ {
		key := fmt.Sprint("key", rounds)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []int
		fails := 0
		ready := make(chan struct{})
		for i := 0; i < creators; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-ready
				_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("race"), Key: aws.String(key),
					Body: strings.NewReader(fmt.Sprint("writer ", i)), IfNoneMatch: aws.String("*")})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, i)
				case isPreconditionFailed(err):
					fails++
				default:
					t.Errorf("round %d writer %d: %v", rounds, i, err)
				}
			}(i)
		}
		close(ready)
		wg.Wait()
		if len(winners) != 1 || fails != creators-1 {
			t.Fatalf("round %d: %d got 200 and %d got 412, want 1 and %d", rounds, len(winners), fails, creators-1)
		}
		got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("race"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(got.Body)
		got.Body.Close()
		if string(b) != fmt.Sprint("writer ", winners[0]) {
			t.Fatalf("round %d: the object holds %q, the winner was writer %d", rounds, b, winners[0])
		}
	}
	t.Logf("%d rounds of %d creators in %.1f s, one winner each", rounds, creators, time.Since(start).Seconds())
}

func ifMatchWriters(t *testing.T, cl *s3.Client) {
	const writers, each = 16, 10
	ctx := context.Background()
	key := aws.String("counter")
	if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("race"), Key: key, Body: strings.NewReader("0")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied, conflicts := 0, 0
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("race"), Key: key})
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(got.Body)
				got.Body.Close()
				var n int
				fmt.Sscan(string(b), &n)
				_, err = cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("race"), Key: key,
					Body: strings.NewReader(fmt.Sprint(n + 1)), IfMatch: got.ETag})
				mu.Lock()
				switch {
				case err == nil:
					applied++
					done++
				case isPreconditionFailed(err):
					conflicts++
				default:
					t.Error(err)
					mu.Unlock()
					return
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("race"), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(b) != fmt.Sprint(writers*each) || applied != writers*each {
		t.Fatalf("the counter holds %q after %d successful If-Match writes, want %d", b, applied, writers*each)
	}
	t.Logf("%d writers, %d updates each, %d conflicts (412) retried, %.1f s", writers, each, conflicts, time.Since(start).Seconds())
}

// s3Stripes counts the gateway's data stripes in pool s3.
func s3Stripes(t *testing.T, c *cluster) int {
	n := 0
	if err := c.pool("s3").ListPrefix(context.Background(), "s3d.", func(string) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestS3GatewayKilledMidPUT: a gateway SIGKILLed while a 64 MiB PUT
// streams in leaves no object visible, and once its intent is older than
// the intent timeout, the restarted gateway's collector deletes the
// stripes it had written. Overwritten data comes back after the grace too.
func TestS3GatewayKilledMidPUT(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{s3: true, s3GCGrace: 2 * time.Second, s3IntentTimeout: 6 * time.Second})
	info := c.s3Info()
	cl := sdkClient(info)
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("crash")}); err != nil {
		t.Fatal(err)
	}
	// The client sends 12 MiB, then waits; the gateway has written stripes.
	pw, done := pipePut(t, info, "/crash/half", nil, 64<<20)
	if _, err := pw.Write(randomBytes(12 << 20)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s3Stripes(t, c) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway wrote no stripe of the PUT in 20 s:\n%s", c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.kill("s3")
	pw.Close()
	if err := <-done; err == nil {
		t.Fatal("the PUT to the killed gateway succeeded")
	}
	left := s3Stripes(t, c)
	t.Logf("the killed gateway left %d stripes", left)
	killed := time.Now()
	c.restart("s3")
	waitS3(t, cl)
	if _, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("crash"), Key: aws.String("half")}); err == nil {
		t.Fatal("the object of the killed PUT is visible")
	}
	if l, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("crash")}); err != nil || len(l.Contents) != 0 {
		t.Fatalf("listing after the kill: %+v %v", l, err)
	}
	// An overwrite and a delete: their old data goes after the grace.
	for i := 0; i < 2; i++ {
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("crash"), Key: aws.String("x"), Body: bytes.NewReader(randomBytes(5 << 20))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("crash"), Key: aws.String("x")}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(40 * time.Second)
	for n := s3Stripes(t, c); n != 0; n = s3Stripes(t, c) {
		if time.Now().After(deadline) {
			t.Fatalf("%d stripes still in pool s3 %.0f s after the kill (intent timeout 6 s, grace 2 s):\n%s", n, time.Since(killed).Seconds(), c.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("all space back %.1f s after the kill", time.Since(killed).Seconds())
}

// waitS3 waits until the gateway answers.
func waitS3(t *testing.T, cl *s3.Client) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cl.ListBuckets(context.Background(), &s3.ListBucketsInput{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the S3 gateway does not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
