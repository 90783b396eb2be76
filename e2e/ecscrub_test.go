package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/placement"
)

// TestECScrub: scrub and deep scrub of a 2+1 pool. A healthy pool, whose
// shards differ in length and bytes by position but not in version or
// keys, scrubs clean. A flipped byte in a data shard and a parity shard
// file put back to its content before a write (its checksums in the index
// are the write's) are found by deep scrub, named by position, rebuilt
// from the other two shards and reported; a second deep scrub finds
// nothing, and every object reads back.
func TestECScrub(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, _ := c.createECPool(t, "ecs", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stripe := 2 * clustermap.ECDefaultUnit
	sizes := map[string]int{"flip": 1<<20 + 4096, "old": 8*stripe + 8192, "keys": 5000}
	for name, size := range sizes {
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetXattr(ctx, "keys", "color", []byte("blue")); err != nil {
		t.Fatal(err)
	}
	if err := p.OmapSet(ctx, "keys", map[string][]byte{"a": []byte("1"), "b": []byte("2")}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"scrub", "--json", "ecs"}, {"scrub", "--deep", "--json", "ecs"}} {
		if out, err := c.cli(nil, args...); err != nil || !strings.Contains(string(out), `"errors": 0`) || strings.Contains(string(out), `"errors": 1`) {
			t.Fatalf("%v of a healthy erasure-coded pool: %v\n%s", args, err, out)
		}
	}
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ecs")
	l := ec.LayoutOf(*pool.EC)
	table := placement.NewTable(m)

	_, flipPos := table.Positions(pool, placement.PGOf(pool, "flip"))
	flipByteInDataFile(t, c.procs[flipPos[1].String()].Data, l.ShardLen(int64(sizes["flip"]), 1), 3000)

	// The parity shard of "old" before a write at an offset, put back over
	// the file once the write reached it.
	_, oldPos := table.Positions(pool, placement.PGOf(pool, "old"))
	parityLen := l.ShardLen(int64(sizes["old"]), 2)
	parity := newestDataFile(t, c.procs[oldPos[2].String()].Data, parityLen)
	before, err := os.ReadFile(parity)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteAt(ctx, "old", 100, payload("old", 1, 5000)); err != nil {
		t.Fatal(err)
	}
	want := payload("old", 0, sizes["old"])
	copy(want[100:], payload("old", 1, 5000))
	time.Sleep(2 * time.Second) // the journaled write reaches the data file
	if err := os.WriteFile(parity, before, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"flip", "old"} {
		id := placement.PGOf(pool, name).String()
		out, err := c.cli(nil, "scrub", "--deep", "--json", id)
		if err != nil || !strings.Contains(string(out), `"repaired": 1`) {
			t.Fatalf("deep scrub of %s (object %s): want one object repaired: %v\n%s", id, name, err, out)
		}
		if out, err := c.cli(nil, "scrub", "--deep", "--json", id); err != nil || !strings.Contains(string(out), `"errors": 0`) {
			t.Fatalf("second deep scrub of %s: want nothing found: %v\n%s", id, err, out)
		}
	}
	c.waitStatus(10*time.Second, "both repairs reported by position", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "position 1 checksum error") && strings.Contains(raw, "position 2 checksum error")
	})
	sizes["old"] = -1
	for name, size := range sizes {
		exp := want
		if size >= 0 {
			exp = payload(name, 0, size)
		}
		if got, err := p.Get(ctx, name); err != nil || !bytes.Equal(got, exp) {
			t.Fatalf("get %s after the repairs: %v", name, err)
		}
	}
}

// TestECScrubParity: shards that pass their checksums but do not code
// together (the skew failpoint inverts a byte of one position's shard as
// it is put). In a 4+2 pool (one shard per OSD) deep scrub places the bad
// shard by the folds alone and rebuilds it; in a 2+1 pool it finds the
// mismatch, cannot place it, and reports the object inconsistent. Light
// scrub finds neither.
func TestECScrubParity(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{env: []string{osd.FailpointECSkewShard + "=1"}})
	p42, _ := c.createECPool(t, "ec42", "4+2", "--failure-domain", "osd")
	p21, _ := c.createECPool(t, "ec21", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := payload("skewed", 0, 300<<10+77)
	for _, p := range []*client.Pool{p42, p21} {
		if err := p.Put(ctx, "skewed", want); err != nil {
			t.Fatal(err)
		}
	}
	m := currentMap(t, c)
	scrub := func(pool string, deep bool) string {
		t.Helper()
		mp, _ := m.PoolByName(pool)
		args := []string{"scrub", "--json", placement.PGOf(mp, "skewed").String()}
		if deep {
			args = append(args, "--deep")
		}
		out, err := c.cli(nil, args...)
		if err != nil {
			t.Fatalf("scrub of %s: %v\n%s", pool, err, out)
		}
		return string(out)
	}
	for _, pool := range []string{"ec42", "ec21"} {
		if out := scrub(pool, false); !strings.Contains(out, `"errors": 0`) {
			t.Fatalf("light scrub of %s found the skewed shard, which passes its checksums:\n%s", pool, out)
		}
	}
	if out := scrub("ec42", true); !strings.Contains(out, `"repaired": 1`) {
		t.Fatalf("deep scrub of ec42: want the skewed shard placed and rebuilt:\n%s", out)
	}
	if out := scrub("ec42", true); !strings.Contains(out, `"errors": 0`) {
		hl, _ := c.cli(nil, "health", "ls")
		t.Fatalf("second deep scrub of ec42: want nothing found:\n%s\n%s", out, hl)
	}
	if out := scrub("ec21", true); !strings.Contains(out, `"errors": 1`) || !strings.Contains(out, `"repaired": 0`) {
		t.Fatalf("deep scrub of ec21: want the mismatch found and left unrepaired:\n%s", out)
	}
	c.waitStatus(10*time.Second, "both findings reported", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "position 1 passed its checksums but did not code") && strings.Contains(raw, "cannot tell which shard is wrong")
	})
	if got, err := p42.Get(ctx, "skewed"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get from ec42 after the repair: %v", err)
	}
}

// TestECDeepScrubReadsOnce: a deep scrub of a 2+1 pool reads each shard
// once. The bytes its OSDs read while it runs (their read calls,
// /proc/PID/io rchar) come to the shard bytes the pool holds, not twice
// them, and the scrub finds nothing.
func TestECDeepScrubReadsOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, _ := c.createECPool(t, "ecr", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pool, _ := currentMap(t, c).PoolByName("ecr")
	l := ec.LayoutOf(*pool.EC)
	var shardBytes int64
	for i := range 8 {
		name, size := fmt.Sprintf("r%d", i), 4<<20+i*12345
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatal(err)
		}
		for pos := range l.K + l.M {
			shardBytes += l.ShardLen(int64(size), pos)
		}
	}
	before := osdReadBytes(t, c)
	out, err := c.cli(nil, "scrub", "--deep", "--json", "ecr")
	if err != nil || !strings.Contains(string(out), `"errors": 0`) || strings.Contains(string(out), `"errors": 1`) {
		t.Fatalf("deep scrub of a healthy erasure-coded pool: %v\n%s", err, out)
	}
	read := osdReadBytes(t, c) - before
	t.Logf("deep scrub: the OSDs read %d bytes for %d bytes of shards (%.2fx)", read, shardBytes, float64(read)/float64(shardBytes))
	if read < shardBytes*8/10 || read > shardBytes*3/2 {
		t.Fatalf("deep scrub: the OSDs read %d bytes for %d bytes of shards; want each shard read once", read, shardBytes)
	}
}

// osdReadBytes sums the bytes every OSD process of c has read by read
// calls (files and sockets alike: /proc/PID/io rchar).
func osdReadBytes(t *testing.T, c *cluster) int64 {
	t.Helper()
	var sum int64
	for name, proc := range c.devJSON() {
		if !strings.HasPrefix(name, "osd.") {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", proc.PID))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "rchar: "); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: /proc/%d/io: %q", name, proc.PID, line)
				}
				sum += n
			}
		}
	}
	return sum
}
