package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
// again and again (at least 4 versions, for about 15 s) through the AWS SDK's transfer manager (8 parts of
// 8 MiB each time) while three readers GET it whole in a loop. Every
// body must hash to exactly one of the versions written, never a mix,
// and carry the ETag of that version; the readers must see several
// versions, or the test proved nothing. The collector's grace is short,
// so replaced versions are reclaimed while the readers run.
func TestS3OverwriteWhileReading(t *testing.T) {
	const size, partSize = 64 << 20, 8 << 20
	c := startCluster(t, clusterOpts{s3: true, s3GCGrace: 10 * time.Second})
	cl := sdkClient(c.s3Info())
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
	for r := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads[r] = readUntil(t, cl, log, stop)
		}()
	}
	start := time.Now()
	gens := 1
	for ; gens < 10 && (gens < 4 || time.Since(start) < 15*time.Second); gens++ {
		write(gens)
	}
	stopReaders()
	checkOverwriteReads(t, log, reads, gens, time.Since(start))
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
