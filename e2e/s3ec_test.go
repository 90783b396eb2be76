package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestS3WhollyOnEC: a gateway whose registry, indexes and data all live in
// an erasure-coded 2+1 pool (their guarded omap transactions run on it).
// aws-cli makes a bucket and puts a small object (kept in its index), one
// of 10 MiB and one in parts, lists, reads back by hash and deletes; 64
// racers with If-None-Match: * each round get exactly one winner and 16
// If-Match writers lose no update; with an OSD holding a shard of the
// bucket's index SIGKILLed, everything still lists and reads back, and a
// new object goes in (once cairn dev has restarted the OSD: the pool's
// min_size is K+1).
func TestS3WhollyOnEC(t *testing.T) {
	t.Parallel()
	requireTool(t, "aws", "pip install awscli")
	c := startCluster(t, clusterOpts{s3: true, s3DataPool: "s3ec", s3DataEC: "2+1"})
	info := c.s3Info()
	info.Endpoint = "http://" + startGateway(t, c, "--pool", "s3ec", "--data-pool", "s3ec")
	work := t.TempDir()
	files, write := localFiles(t, work)
	mustAWS(t, info, work, "s3", "mb", "s3://allec")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "allec", "--key", "small.txt", "--body", write("small.txt", 4096))
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "allec", "--key", "big.bin", "--body", write("big.bin", 10<<20+5))
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", write("mp.bin", 20<<20+7), "s3://allec/dir/mp.bin")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "allec", "--key", "gone.txt", "--body", write("gone.txt", 100))
	mustAWS(t, info, work, "s3", "rm", "--only-show-errors", "s3://allec/gone.txt")
	check := func(when string) {
		t.Helper()
		ls := mustAWS(t, info, work, "s3", "ls", "--recursive", "s3://allec/")
		for _, name := range []string{"small.txt", "big.bin", "dir/mp.bin"} {
			if !strings.Contains(ls, name) {
				t.Fatalf("%s: s3 ls lacks %s:\n%s", when, name, ls)
			}
			out := filepath.Join(work, "back")
			mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://allec/"+name, out)
			if sha256File(t, out) != digest(files[filepath.Base(name)]) {
				t.Fatalf("%s: s3://allec/%s came back different", when, name)
			}
		}
		if strings.Contains(ls, "gone.txt") {
			t.Fatalf("%s: the deleted object is listed:\n%s", when, ls)
		}
	}
	check("written")
	for _, obj := range []string{"s3.buckets", "s3i." + bucketIDsIn(t, c, "s3ec")["allec"] + ".0"} {
		if _, err := c.pool("s3ec").Stat(context.Background(), obj); err != nil {
			t.Fatalf("%s is not in the erasure-coded pool: %v", obj, err)
		}
	}

	cl := sdkClient(info)
	if _, err := cl.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("race")}); err != nil {
		t.Fatal(err)
	}
	t.Run("creators", func(t *testing.T) { conditionalCreators(t, cl) })
	t.Run("if-match", func(t *testing.T) { ifMatchWriters(t, cl) })

	victim := shardHolder(t, c, "s3i."+bucketIDsIn(t, c, "s3ec")["allec"]+".0")
	c.kill(victim)
	c.waitStatus(30*time.Second, victim+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, victim+" on host")
	})
	check(victim + " killed")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "allec", "--key", "after.txt", "--body", write("after.txt", 3000))
	out := filepath.Join(work, "back")
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://allec/after.txt", out)
	if sha256File(t, out) != digest(files["after.txt"]) {
		t.Fatal("an object written with an OSD down came back different")
	}
}
