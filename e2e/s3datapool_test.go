package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/devcluster"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/placement"
)

// TestS3ECDataPool: S3 buckets whose data lives in an erasure-coded pool.
// A bucket made while cairn dev's gateway keeps data in its pool s3
// (3 copies) keeps it there after the cluster restarts with
// --s3-data-pool s3ec --s3-data-ec 2+1; a bucket made after keeps its
// stripes in s3ec and its index in s3. aws-cli uploads a multi-stripe
// object with one PUT and one in parts, lists, gets whole and by range
// (checked by hash), copies both ways between the two buckets, deletes
// (the collector takes the stripes out of s3ec); then one OSD holding a
// shard is SIGKILLed and every object still reads back. cairn s3 refuses
// a --data-pool that does not exist.
func TestS3ECDataPool(t *testing.T) {
	t.Parallel()
	requireTool(t, "aws", "pip install awscli")
	c := startCluster(t, clusterOpts{s3: true, s3GCGrace: 2 * time.Second, metrics: true})
	info := c.s3Info()
	work := t.TempDir()
	files, write := localFiles(t, work)
	mustAWS(t, info, work, "s3", "mb", "s3://rep")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "rep", "--key", "before.bin", "--body", write("before.bin", 9<<20+3))

	c.stop()
	c.opts.s3DataPool, c.opts.s3DataEC = "s3ec", "2+1"
	c.start()
	if log, _ := os.ReadFile(filepath.Join(c.dir, "s3.log")); !strings.Contains(string(log), `new buckets keep their data in pool "s3ec" (erasure-coded 2+1, 256K chunks)`) {
		t.Fatalf("the gateway does not say where new buckets' data goes:\n%s", log)
	}
	mustAWS(t, info, work, "s3", "mb", "s3://ecb")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "ecb", "--key", "put.bin", "--body", write("put.bin", 10<<20+5))
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", write("mp.bin", 20<<20+7), "s3://ecb/dir/mp.bin")
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "rep", "--key", "after.bin", "--body", write("after.bin", 5<<20))
	ls := mustAWS(t, info, work, "s3", "ls", "--recursive", "s3://ecb/")
	if !strings.Contains(ls, "put.bin") || !strings.Contains(ls, "dir/mp.bin") {
		t.Fatalf("s3 ls of the bucket in the erasure-coded pool: %s", ls)
	}
	// Server-side copies both ways (aws-cli copies these sizes in parts:
	// UploadPartCopy from one pool into the other).
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://rep/before.bin", "s3://ecb/copied.bin")
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://ecb/put.bin", "s3://rep/fromec.bin")
	files["copied.bin"], files["fromec.bin"] = files["before.bin"], files["put.bin"]
	objects := map[string]string{"rep/before.bin": "before.bin", "rep/after.bin": "after.bin", "rep/fromec.bin": "fromec.bin",
		"ecb/put.bin": "put.bin", "ecb/dir/mp.bin": "mp.bin", "ecb/copied.bin": "copied.bin"}
	readBack := func(when string) {
		t.Helper()
		for obj, name := range objects {
			out := filepath.Join(work, "back")
			mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://"+obj, out)
			if sha256File(t, out) != digest(files[name]) {
				t.Fatalf("%s: s3://%s came back different", when, obj)
			}
		}
		bucket, key, _ := strings.Cut("ecb/dir/mp.bin", "/")
		out := filepath.Join(work, "range")
		from, to := 8<<20-100, 12<<20+50 // across parts and stripes
		mustAWS(t, info, work, "s3api", "get-object", "--bucket", bucket, "--key", key, "--range", "bytes="+strconv.Itoa(from)+"-"+strconv.Itoa(to), out)
		if got, _ := os.ReadFile(out); !bytes.Equal(got, files["mp.bin"][from:to+1]) {
			t.Fatalf("%s: a ranged GET of s3://ecb/dir/mp.bin differs (%d bytes)", when, len(got))
		}
	}
	readBack("written")
	settledReads(t, c, info, work, "put.bin", "", files["put.bin"]) // stripes of 4 MiB, 4 MiB and 2 MiB: each over several chunks
	// The gateway and the OSDs, all of this host, came over the OSDs' local
	// sockets, and the OSDs' metrics say so.
	if n := osdMetricSum(t, c, `cairn_osd_connections{osd="%s",transport="local"}`); n < float64(c.hosts*c.perHost) {
		t.Errorf("cairn_osd_connections: %v local connections over the OSDs, want at least one each", n)
	}
	ecStripes := checkDataPools(t, c)
	for _, tc := range []struct{ args, want string }{
		{"--pool s3 --data-pool nope", `data pool "nope" does not exist`},
	} {
		args := append([]string{"s3", "--listen", "127.0.0.1:0"}, strings.Fields(tc.args)...)
		if _, err := c.cli(nil, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairn s3 %s: want an error containing %q, got %v", tc.args, tc.want, err)
		}
	}
	// Neither pool goes without --force while buckets use it.
	for pool, want := range map[string]string{"s3ec": "(ecb)", "s3": "(ecb, rep)"} {
		_, err := c.cli(nil, "pool", "rm", pool, "--yes-i-really-mean-it")
		if err == nil || !strings.Contains(err.Error(), "S3 bucket(s) "+want) {
			t.Errorf("pool rm %s: want a refusal naming the buckets %s, got %v", pool, want, err)
		}
	}

	// A delete: the collector (grace 2 s) takes its 3 stripes out of s3ec.
	mustAWS(t, info, work, "s3", "rm", "--only-show-errors", "s3://ecb/put.bin")
	delete(objects, "ecb/put.bin")
	ecPool := c.pool("s3ec")
	waitFor(t, 30*time.Second, "the deleted object's stripes gone from s3ec", func() bool {
		return len(dataStripes(t, ecPool)) == len(ecStripes)-3
	})

	rotRead(t, c, info, work, write, files)
	objects["ecb/rot.bin"] = "rot.bin"
	victim := shardHolder(t, c, dataStripes(t, ecPool)[0])
	c.kill(victim)
	readBack(victim + " killed")
}

// settledReads checks that the gateway reads the stripes of s3://ecb/key
// (bytes rng of it: "bytes=0-99"; "": all; each stripe read must span
// several chunks) from their positions, not through the PGs' primaries,
// once their writes are known complete everywhere
// (client.Pool.ReadSettledPieces): a GET then adds no read to any
// primary's count for pool s3ec, and brings want.
func settledReads(t *testing.T, c *cluster, info devcluster.S3Info, work, key, rng string, want []byte) {
	t.Helper()
	args := []string{"s3api", "get-object", "--bucket", "ecb", "--key", key, filepath.Join(work, "settled")}
	if rng != "" {
		args = slices.Insert(args, 6, "--range", rng)
	}
	waitFor(t, 30*time.Second, "GETs of s3://ecb/"+key+" served without their primaries", func() bool {
		before := primaryReads(t, c)
		mustAWS(t, info, work, args...)
		if got, _ := os.ReadFile(filepath.Join(work, "settled")); !bytes.Equal(got, want) {
			t.Fatalf("GET of s3://ecb/%s %s: %d bytes, not the %d put", key, rng, len(got), len(want))
		}
		return primaryReads(t, c) == before
	})
}

// primaryReads sums the reads of pool s3ec the OSDs served as primaries.
func primaryReads(t *testing.T, c *cluster) float64 {
	sum := 0.0
	for name, p := range c.devJSON() {
		if !strings.HasPrefix(name, "osd.") {
			continue
		}
		for _, line := range strings.Split(httpGet(t, "http://"+p.Metrics+"/metrics"), "\n") {
			if strings.HasPrefix(line, "cairn_osd_pool_client_requests_total{") && strings.Contains(line, `kind="read"`) && strings.Contains(line, `pool="s3ec"`) {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				sum += v
			}
		}
	}
	return sum
}

// rotRead puts rot.bin into bucket ecb and, once its first stripe's
// positions are read directly, flips a byte of its last stripe's shard at
// position 0 (a data position): the GET's read of the positions meets the
// bad block and goes to the primary, which serves the object rebuilt and
// reports the repair.
func rotRead(t *testing.T, c *cluster, info devcluster.S3Info, work string, write func(string, int) string, files map[string][]byte) {
	t.Helper()
	ecPool := c.pool("s3ec")
	before := dataStripes(t, ecPool)
	const size = 4<<20 + 303104 // a stripe of 4 MiB, then one of 74 blocks
	mustAWS(t, info, work, "s3api", "put-object", "--bucket", "ecb", "--key", "rot.bin", "--body", write("rot.bin", size))
	var last string
	for _, st := range dataStripes(t, ecPool) {
		if !slices.Contains(before, st) && strings.HasSuffix(st, ".1") {
			last = st
		}
	}
	settledReads(t, c, info, work, "rot.bin", "bytes=0-4194303", files["rot.bin"][:4<<20]) // the last stripe stays unread, out of the OSDs' caches
	m := currentMap(t, c)
	pool, _ := m.PoolByName("s3ec")
	_, pos := placement.NewTable(m).Positions(pool, placement.PGOf(pool, last))
	flipByteInDataFile(t, c.procs[pos[0].String()].Data, ec.LayoutOf(*pool.EC).ShardLen(size-4<<20, 0), 3000)
	reads := primaryReads(t, c)
	out := filepath.Join(work, "rot.back")
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", "s3://ecb/rot.bin", out)
	if sha256File(t, out) != digest(files["rot.bin"]) {
		t.Fatal("s3://ecb/rot.bin came back different after a byte of a data shard flipped")
	}
	if primaryReads(t, c) == reads {
		t.Fatal("the GET of a stripe whose data shard fails its checksums did not go to the primary")
	}
	c.waitStatus(20*time.Second, "the corrupt shard reported", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OBJECT_REPAIRED") && strings.Contains(raw, "shard at position 0")
	})
}

// dataStripes lists the S3 data stripes in pool.
func dataStripes(t *testing.T, pool *client.Pool) []string {
	t.Helper()
	var names []string
	err := pool.ListPrefix(context.Background(), "s3d.", func(n string) error { names = append(names, n); return nil })
	if err != nil {
		t.Fatalf("listing pool %s: %v", pool.Name(), err)
	}
	return names
}

// checkDataPools checks where everything is: cairn s3 bucket ls names
// each bucket's data pool; s3ec holds the stripes of bucket ecb and
// nothing else, s3 the registry, both indexes and the stripes of rep.
// It returns the stripes in s3ec.
func checkDataPools(t *testing.T, c *cluster) []string {
	t.Helper()
	out, err := c.cli(nil, "--json", "s3", "bucket", "ls")
	var stats []struct {
		Name     string `json:"name"`
		DataPool string `json:"data_pool"`
		Objects  int    `json:"objects"`
	}
	if err == nil {
		err = json.Unmarshal(out, &stats)
	}
	if err != nil || len(stats) != 2 || stats[0].Name != "ecb" || stats[0].DataPool != "s3ec" || stats[0].Objects != 3 ||
		stats[1].Name != "rep" || stats[1].DataPool != "s3" || stats[1].Objects != 3 {
		t.Fatalf("cairn s3 bucket ls: %v\n%s", err, out)
	}
	ids := bucketIDs(t, c)
	ec, rep := dataStripes(t, c.pool("s3ec")), dataStripes(t, c.pool("s3"))
	for _, n := range ec {
		if !strings.HasPrefix(n, "s3d."+ids["ecb"]+".") {
			t.Fatalf("s3ec holds %s, not a stripe of bucket ecb (%s)", n, ids["ecb"])
		}
	}
	for _, n := range rep {
		if !strings.HasPrefix(n, "s3d."+ids["rep"]+".") {
			t.Fatalf("s3 holds %s, not a stripe of bucket rep (%s)", n, ids["rep"])
		}
	}
	// ecb: 10 MiB in one PUT (3 stripes), 20 MiB in 8 MiB parts (6), 9 MiB copied in parts (3);
	// rep: 9 MiB (3) and 5 MiB (2) in one PUT each, 10 MiB copied in parts (3).
	if len(ec) < 12 || len(rep) < 8 {
		t.Fatalf("%d stripes in s3ec, %d in s3: too few", len(ec), len(rep))
	}
	var other []string
	c.pool("s3ec").List(context.Background(), func(n string) error {
		if !strings.HasPrefix(n, "s3d.") {
			other = append(other, n)
		}
		return nil
	})
	if len(other) > 0 {
		t.Fatalf("s3ec holds more than data stripes: %q", other)
	}
	if _, err := c.pool("s3").Stat(context.Background(), "s3i."+ids["ecb"]+".0"); err != nil {
		t.Fatalf("the index of bucket ecb is not in pool s3: %v", err)
	}
	t.Logf("%d stripes of ecb in s3ec, %d of rep in s3", len(ec), len(rep))
	return ec
}

// bucketIDs reads the bucket registry in pool s3: name → id.
func bucketIDs(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	return bucketIDsIn(t, c, "s3")
}

// bucketIDsIn reads the bucket registry in pool: name → id.
func bucketIDsIn(t *testing.T, c *cluster, pool string) map[string]string {
	t.Helper()
	kvs, _, err := c.pool(pool).OmapList(context.Background(), "s3.buckets", "\x01", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, kv := range kvs {
		var rec struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatalf("registry record %q: %v", kv.Key, err)
		}
		ids[kv.Key] = rec.ID
	}
	return ids
}

// shardHolder names the OSD at position 1 of obj's PG in s3ec: it holds a
// shard of obj and is not the PG's primary, which rebuilds what it lacks.
func shardHolder(t *testing.T, c *cluster, obj string) string {
	t.Helper()
	m := currentMap(t, c)
	pool, ok := m.PoolByName("s3ec")
	if !ok {
		t.Fatal("no pool s3ec in the map")
	}
	_, pos := placement.NewTable(m).Positions(pool, placement.PGOf(pool, obj))
	return pos[1].String()
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// localFiles gives a test files of random bytes in dir: write makes one of
// n bytes and returns its path; files keeps what each holds, by name.
func localFiles(t *testing.T, dir string) (files map[string][]byte, write func(name string, n int) string) {
	files = map[string][]byte{}
	return files, func(name string, n int) string {
		t.Helper()
		files[name] = randomBytes(n)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
