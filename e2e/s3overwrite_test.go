package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// overwriteLog is what TestS3OverwriteWhileReading's writer published:
// the hash of every version it began to write, and the ETag of each
// version once written.
type overwriteLog struct {
	mu     sync.Mutex
	hashes map[[32]byte]int // version by the hash of its bytes
	etags  map[int]string   // version → ETag, once its upload completed
}

func (l *overwriteLog) begin(gen int, sum [32]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hashes[sum] = gen
}

func (l *overwriteLog) done(gen int, etag string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.etags[gen] = etag
}

func (l *overwriteLog) version(sum [32]byte) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gen, ok := l.hashes[sum]
	return gen, ok
}

// TestS3OverwriteWhileReading: one writer overwrites a 64 MiB object
// again and again (at least 4 versions, for about 15 s) through the AWS
// SDK's transfer manager (8 parts of 8 MiB each time) while two readers
// GET it whole in a loop and aws-cli downloads and copies it (see
// awsReadUntil). Every body must hash to exactly one of the versions
// written, never a mix, and carry the ETag of that version; the readers
// must see several versions, or the test proved nothing. The collector's
// grace is short, so replaced versions are reclaimed while they read.
func TestS3OverwriteWhileReading(t *testing.T) {
	t.Parallel()
	const size, partSize = 64 << 20, 8 << 20
	requireTool(t, "aws", "pip install awscli")
	c := startCluster(t, clusterOpts{s3: true, s3GCGrace: 10 * time.Second})
	info := c.s3Info()
	cl := sdkClient(info)
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("overwrite")}); err != nil {
		t.Fatal(err)
	}
	log := &overwriteLog{hashes: map[[32]byte]int{}, etags: map[int]string{}}
	up := manager.NewUploader(cl, func(u *manager.Uploader) { u.PartSize = partSize })
	write := func(gen int) {
		data := payload("overwrite", gen, size)
		log.begin(gen, sha256.Sum256(data))
		out, err := up.Upload(ctx, &s3.PutObjectInput{Bucket: aws.String("overwrite"), Key: aws.String("obj"), Body: bytes.NewReader(data)})
		if err != nil {
			t.Fatalf("version %d: %v", gen, err)
		}
		if !strings.HasSuffix(aws.ToString(out.ETag), `-8"`) {
			t.Fatalf("version %d: ETag %s, want one of 8 parts", gen, aws.ToString(out.ETag))
		}
		log.done(gen, aws.ToString(out.ETag))
	}
	write(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopReaders := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopReaders() // when a write fails
	reads := make([][]readSeen, 3)
	for r := range reads[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads[r] = readUntil(t, cl, log, stop)
		}()
	}
	var cli awsCLIReads
	wg.Add(1)
	go func() {
		defer wg.Done()
		cli = awsReadUntil(t, info, cl, log, stop)
	}()
	start := time.Now()
	gens := 1
	for ; gens < 10 && (gens < 4 || time.Since(start) < 15*time.Second); gens++ {
		write(gens)
	}
	stopReaders()
	checkOverwriteReads(t, log, reads, gens, time.Since(start))
	t.Logf("aws-cli: %d downloads and %d server-side copies were one version each, %d and %d refused with 412 (the object changed under them)",
		cli.downloads, cli.copies, cli.refusedDownloads, cli.refusedCopies)
	if cli.downloads == 0 || cli.copies == 0 {
		t.Errorf("aws-cli never downloaded or copied the object whole, not even once the writer stopped")
	}
}

// awsCLIReads counts aws-cli's downloads and copies during the overwrites.
type awsCLIReads struct {
	downloads, refusedDownloads, copies, refusedCopies int
}

// awsReadUntil downloads the object with aws-cli (ranged GETs in
// parallel, each with If-Match of the ETag its HEAD saw) and copies it
// server-side (UploadPartCopy with x-amz-copy-source-if-match), until stop
// closes, and once more after. Each download and each copy must be
// exactly one version written, or be refused with 412 because the object
// changed: never a mix.
func awsReadUntil(t *testing.T, info devcluster.S3Info, cl *s3.Client, log *overwriteLog, stop chan struct{}) awsCLIReads {
	var r awsCLIReads
	work := t.TempDir()
	file := filepath.Join(work, "obj")
	check := func(what string, out string, err error, sum [32]byte, ok, refused *int) bool {
		switch _, known := log.version(sum); {
		case err == nil && known:
			*ok++
		case err == nil:
			t.Errorf("aws-cli's %s is no version written: a mix of versions?", what)
			return false
		case strings.Contains(out, "did not match expected ETag"): // s3transfer's words for a 412
			*refused++
		default:
			t.Errorf("aws-cli's %s: %v\n%s", what, err, out)
			return false
		}
		return true
	}
	for last := false; !last; {
		select {
		case <-stop:
			last = true // a last round, with no writer, must succeed
		default:
		}
		out, err := runAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://overwrite/obj", file)
		var sum [32]byte
		if err == nil {
			sum = sha256File(t, file)
		}
		os.Remove(file)
		if !check("download", out, err, sum, &r.downloads, &r.refusedDownloads) {
			return r
		}
		out, err = runAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://overwrite/obj", "s3://overwrite/copy")
		if err == nil {
			sum = getHash(t, cl, "copy")
		}
		if !check("copy", out, err, sum, &r.copies, &r.refusedCopies) {
			return r
		}
	}
	return r
}

// getHash is the SHA-256 of an object of bucket overwrite.
func getHash(t *testing.T, cl *s3.Client, key string) [32]byte {
	got, err := cl.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("overwrite"), Key: aws.String(key)})
	if err != nil {
		t.Errorf("GET %s: %v", key, err)
		return [32]byte{}
	}
	defer got.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, got.Body); err != nil {
		t.Errorf("GET %s: %v", key, err)
	}
	return [32]byte(h.Sum(nil))
}

// readSeen is one GET: the version its body hashed to, and its ETag.
type readSeen struct {
	gen  int
	etag string
}

// readUntil GETs the object whole until stop closes, failing on a body
// that is no version written.
func readUntil(t *testing.T, cl *s3.Client, log *overwriteLog, stop chan struct{}) []readSeen {
	var seen []readSeen
	for {
		select {
		case <-stop:
			return seen
		default:
		}
		got, err := cl.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("overwrite"), Key: aws.String("obj")})
		if err != nil {
			t.Errorf("GET: %v", err)
			return seen
		}
		h := sha256.New()
		n, err := io.Copy(h, got.Body)
		got.Body.Close()
		if err != nil {
			t.Errorf("GET: reading the body after %d bytes: %v", n, err)
			return seen
		}
		gen, ok := log.version([32]byte(h.Sum(nil)))
		if !ok {
			t.Errorf("GET: a body of %d bytes (ETag %s) that is no version written: a mix of versions?", n, aws.ToString(got.ETag))
			return seen
		}
		seen = append(seen, readSeen{gen, aws.ToString(got.ETag)})
	}
}

// checkOverwriteReads fails unless every read's ETag is its version's and
// the readers saw more than one version.
func checkOverwriteReads(t *testing.T, log *overwriteLog, reads [][]readSeen, gens int, took time.Duration) {
	versions := map[int]int{}
	total := 0
	for _, rs := range reads {
		for _, r := range rs {
			if want := log.etags[r.gen]; r.etag != want {
				t.Errorf("a GET of version %d carried ETag %s, that version's is %s", r.gen, r.etag, want)
			}
			versions[r.gen]++
			total++
		}
	}
	t.Logf("%d versions written in %.1f s; %d GETs saw %d distinct versions: %v", gens, took.Seconds(), total, len(versions), versions)
	if len(versions) < 2 {
		t.Fatalf("the readers saw %d distinct versions: they did not read during the overwrites", len(versions))
	}
}
