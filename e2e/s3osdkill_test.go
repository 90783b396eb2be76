package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// pipePut sends a signed PUT of size bytes to path (and query) whose body
// the caller writes into the returned pipe; done receives the answer's
// status (or the error) once the request ends.
func pipePut(t *testing.T, info devcluster.S3Info, path string, query url.Values, size int64) (*io.PipeWriter, chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	u := info.Endpoint + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, _ := http.NewRequest("PUT", u, pr)
	req.ContentLength = size
	req.Header.Set("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
	err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: info.AccessKey, SecretAccessKey: info.SecretKey},
		req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, b)
			}
		}
		pr.CloseWithError(fmt.Errorf("the request ended"))
		done <- err
	}()
	t.Cleanup(func() { pw.CloseWithError(fmt.Errorf("the test ended")) })
	return pw, done
}

// osdDataBytes sums the space the OSDs' object data files take on disk
// (small objects and omaps live in each OSD's index and are not counted),
// by OSD.
func osdDataBytes(t *testing.T, c *cluster) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	dirs, _ := filepath.Glob(filepath.Join(c.dir, "osd.*", "data"))
	for _, d := range dirs {
		osd := filepath.Base(filepath.Dir(d))
		out[osd] += 0
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			out[osd] += fi.Sys().(*syscall.Stat_t).Blocks * 512
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) != c.hosts*c.perHost {
		t.Fatalf("found the data directories of %d OSDs in %s, want %d", len(out), c.dir, c.hosts*c.perHost)
	}
	return out
}

func sumBytes(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// TestS3OSDKilledMidUpload: an OSD SIGKILLed while a 64 MiB PUT and a
// part of a multipart upload stream in. Each write either succeeds whole
// or fails and leaves nothing visible (a failed part is sent again, as
// clients do, and the upload completes). Then, once the OSD is marked
// down, the objects are deleted and the collector frees their stripes on
// the survivors; the OSD comes back with its stale copies and recovers,
// and the space its data files take, like every OSD's, returns to what it
// was before the uploads.
func TestS3OSDKilledMidUpload(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{s3: true, s3GCGrace: 2 * time.Second, s3IntentTimeout: 6 * time.Second})
	info := c.s3Info()
	cl := sdkClient(info)
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("osdkill")}); err != nil {
		t.Fatal(err)
	}
	base := osdDataBytes(t, c)
	t.Logf("before the uploads the OSDs' data files take %d bytes: %v", sumBytes(base), base)

	putData := randomBytes(64 << 20)
	mp := startMultipart(t, cl, "osdkill", "multi", 3)
	putW, putDone := pipePut(t, info, "/osdkill/single", nil, int64(len(putData)))
	partW, partDone := pipePut(t, info, "/osdkill/multi", url.Values{"partNumber": {"4"}, "uploadId": {mp.id}}, int64(len(mp.last)))
	// The PUT is a third in and the part half when the OSD dies: 3
	// parts of 2 stripes, 5 of the PUT and 2 of the part are stored.
	go putW.Write(putData[:len(putData)/3])
	go partW.Write(mp.last[:len(mp.last)/2])
	deadline := time.Now().Add(20 * time.Second)
	for s3Stripes(t, c) < 3*2+5+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the uploads wrote %d stripes in 20 s", s3Stripes(t, c))
		}
		time.Sleep(50 * time.Millisecond)
	}
	victim := "osd.1"
	c.kill(victim)
	killed := time.Now()
	go func() { putW.Write(putData[len(putData)/3:]); putW.Close() }()
	go func() { partW.Write(mp.last[len(mp.last)/2:]); partW.Close() }()
	putErr, partErr := <-putDone, <-partDone
	t.Logf("with %s killed: the PUT answered %v, the part %v, %.1f s after the kill", victim, putErr, partErr, time.Since(killed).Seconds())

	wholeOrAbsent(t, cl, "single", putData, putErr == nil)
	if partErr != nil {
		mp.upload(t, 4, mp.last) // a client sends a failed part again
	}
	mp.complete(t)
	wholeOrAbsent(t, cl, "multi", mp.data(), true)

	held := osdDataBytes(t, c)[victim]
	if held == 0 {
		t.Fatalf("%s held none of the uploads' data when it died: the test killed a bystander", victim)
	}
	c.waitStatus(20*time.Second, victim+" down", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(5) })
	for _, k := range []string{"single", "multi"} {
		if _, err := cl.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("osdkill"), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	waitNoStripes(t, c, 60*time.Second)
	// The survivors deleted their copies; the victim's are still on its disk.
	if now := osdDataBytes(t, c); now[victim] != held {
		t.Fatalf("while down, %s's data files went from %d to %d bytes", victim, held, now[victim])
	}
	c.restart(victim)
	c.waitHealthy(120*time.Second, "after "+victim+" came back")
	waitDataBytes(t, c, base, 60*time.Second)
	t.Logf("all space back %.1f s after the kill, %d bytes of it on %s", time.Since(killed).Seconds(), held, victim)
}

// wholeOrAbsent fails unless key holds exactly data (when it must exist)
// or is absent from GET, HEAD and the listing.
func wholeOrAbsent(t *testing.T, cl *s3.Client, key string, data []byte, mustExist bool) {
	t.Helper()
	ctx := context.Background()
	got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("osdkill"), Key: aws.String(key)})
	if err != nil {
		if mustExist {
			t.Fatalf("GET %s: %v", key, err)
		}
		l, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("osdkill"), Prefix: aws.String(key)})
		if err != nil || len(l.Contents) != 0 {
			t.Fatalf("the failed PUT of %s: GET fails but the listing shows %d objects (%v)", key, len(l.Contents), err)
		}
		return
	}
	h := sha256.New()
	n, err := io.Copy(h, got.Body)
	got.Body.Close()
	if err != nil || [32]byte(h.Sum(nil)) != sha256.Sum256(data) {
		t.Fatalf("GET %s: %d bytes (want %d), %v, equal %v", key, n, len(data), err, [32]byte(h.Sum(nil)) == sha256.Sum256(data))
	}
}

// waitNoStripes waits until pool s3 holds no data stripe.
func waitNoStripes(t *testing.T, c *cluster, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for n := s3Stripes(t, c); n != 0; n = s3Stripes(t, c) {
		if time.Now().After(deadline) {
			t.Fatalf("%d stripes still in pool s3 after %v (grace 2 s, intent timeout 6 s):\n%s", n, timeout, c.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitDataBytes waits until every OSD's data files take what they took in
// base.
func waitDataBytes(t *testing.T, c *cluster, base map[string]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		now := osdDataBytes(t, c)
		same := true
		for osd, n := range base {
			same = same && now[osd] == n
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the OSDs' data files take %d bytes, %d before the uploads: %v, was %v", timeout, sumBytes(now), sumBytes(base), now, base)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// multipartUpload is an upload whose first parts are stored and whose
// last part the test sends itself.
type multipartUpload struct {
	cl      *s3.Client
	bucket  string
	key, id string
	parts   [][]byte
	last    []byte
}

// startMultipart creates an upload of key and stores n parts of 5 MiB;
// the last part (16 MiB + 1) is left to the caller.
func startMultipart(t *testing.T, cl *s3.Client, bucket, key string, n int) *multipartUpload {
	t.Helper()
	ctx := context.Background()
	up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	m := &multipartUpload{cl: cl, bucket: bucket, key: key, id: aws.ToString(up.UploadId), last: randomBytes(16<<20 + 1)}
	for i := 1; i <= n; i++ {
		m.parts = append(m.parts, randomBytes(5<<20))
		m.upload(t, i, m.parts[i-1])
	}
	return m
}

// complete lists the upload's parts and completes it with all of them.
func (m *multipartUpload) complete(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	l, err := m.cl.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(m.bucket), Key: aws.String(m.key), UploadId: aws.String(m.id)})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for _, p := range l.Parts {
		parts = append(parts, types.CompletedPart{PartNumber: p.PartNumber, ETag: p.ETag})
	}
	if len(parts) != len(m.parts)+1 {
		t.Fatalf("ListParts shows %d parts, want %d", len(parts), len(m.parts)+1)
	}
	if _, err := m.cl.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(m.bucket), Key: aws.String(m.key),
		UploadId: aws.String(m.id), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
}

// upload stores part n.
func (m *multipartUpload) upload(t *testing.T, n int, data []byte) {
	t.Helper()
	_, err := m.cl.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: aws.String(m.bucket), Key: aws.String(m.key),
		UploadId: aws.String(m.id), PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("part %d: %v", n, err)
	}
}

// data is the object the upload makes: its parts in order.
func (m *multipartUpload) data() []byte {
	return append(bytes.Join(m.parts, nil), m.last...)
}
