package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/placement"
)

// checkECPools checks the CLI of erasure-coded pools: `pool create --ec`
// refuses unless the experimental switch is set (the OSDs serve only part
// of such a pool yet); with it, bad profiles are refused with the reason,
// a good one lands in the map with K+M shards and min_size K+1, and pool
// ls says what it is.
// createECPool creates pool name of erasure code profile with 8 PGs and
// more pool create args, with erasure coding turned on for that command
// alone, and returns it with the command's output.
func (c *cluster) createECPool(t *testing.T, name, profile string, args ...string) (*client.Pool, string) {
	t.Helper()
	cmd := exec.Command(cairnBin, append([]string{"--conf", c.conf, "pool", "create", name, "--ec", profile, "--pg-num", "8"}, args...)...)
	cmd.Env = append(os.Environ(), client.ExperimentalECEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pool create %s --ec %s %s: %v\n%s", name, profile, strings.Join(args, " "), err, out)
	}
	return c.pool(name), string(out)
}

// TestECPool runs its data path.
func checkECPools(t *testing.T, c *cluster) {
	if _, err := c.cli(nil, "pool", "create", "ecp", "--ec", "2+1"); err == nil || !strings.Contains(err.Error(), "erasure-coded pools are experimental in this version") {
		t.Fatalf("pool create --ec without %s: %v", client.ExperimentalECEnv, err)
	}
	t.Setenv(client.ExperimentalECEnv, "1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ec", "4"}, "write it as K+M"},
		{[]string{"--ec", "1+1"}, "at least 2 data"},
		{[]string{"--ec", "2+2"}, "wants 4 shards in distinct hosts, but the cluster has only 3 host(s)"},
		{[]string{"--ec", "2+1", "--stripe-unit", "1000"}, "stripe unit 1000"},
		{[]string{"--ec", "2+1", "--size", "4"}, "contradicts erasure code 2+1"},
		{[]string{"--ec", "2+1", "--min-size", "1"}, "min_size 1 is below K = 2"},
	} {
		args := append([]string{"pool", "create", "ecbad"}, tc.args...)
		if _, err := c.cli(nil, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairn %s: want an error containing %q, got %v", strings.Join(args, " "), tc.want, err)
		}
	}
	out, err := c.cli(nil, "pool", "create", "ecp", "--ec", "2+1", "--pg-num", "8")
	if err != nil || !strings.Contains(string(out), "erasure code 2+1, one shard per host, any 2 rebuild an object, writes need 3: can lose 1 host") {
		t.Fatalf("pool create --ec 2+1: %v\n%s", err, out)
	}
	out, err = c.cli(nil, "--json", "pool", "ls")
	var pools []client.PoolInfo
	if err == nil {
		err = json.Unmarshal(out, &pools)
	}
	if err != nil {
		t.Fatalf("pool ls: %v\n%s", err, out)
	}
	found := false
	for _, p := range pools {
		if p.Name == "ecp" {
			found = p.EC == "2+1" && p.Size == 3 && p.MinSize == 3 && p.StripeUnit == 16<<10
			if !found {
				t.Fatalf("pool ls shows %+v", p)
			}
		}
	}
	if !found {
		t.Fatalf("pool ls does not list ecp: %s", out)
	}
	// An erasure-coded pool holds no volumes and no bucket uses it: no
	// --force needed.
	if out, err := c.cli(nil, "pool", "rm", "ecp", "--yes-i-really-mean-it"); err != nil {
		t.Fatalf("pool rm ecp: %v\n%s", err, out)
	}
}

// TestECPool runs the first slice of the data path of erasure-coded pools
// on a dev cluster (3 hosts of 2 OSDs): a 2+1 pool takes objects of
// awkward sizes whole, lists them and reads them back whole and by range;
// deletes and exclusive puts behave, and a guarded omap transaction
// applies while one whose guard fails does not; a shard with a flipped byte is rebuilt on read and reported;
// after one OSD holding a data shard of the largest is
// SIGKILLed, every object still reads back (what it held rebuilt from the
// two other shards), both while the map still counts it up and once it
// is marked down.
// The switch reaches the CLI through its environment (no t.Setenv, so the
// test runs in parallel).
func TestECPool(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, _ := c.createECPool(t, "ec21", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stripe := 2 * clustermap.ECDefaultUnit
	sizes := map[string]int{"empty": 0, "one": 1, "page": 4096, "odd": 3*stripe + 5000, "big": 5 << 20}
	for name, size := range sizes {
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatalf("put %s (%d bytes): %v", name, size, err)
		}
	}
	readAll := func(when string) {
		t.Helper()
		for name, size := range sizes {
			want := payload(name, 0, size)
			got, err := p.Get(ctx, name)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: get %s: %v (%d bytes, want %d, same: %v)", when, name, err, len(got), size, bytes.Equal(got, want))
			}
			for _, r := range [][2]int{{0, 1}, {size / 3, size / 2}, {stripe - 7, 20}, {size - 1, 10}, {size + 5, 3}} {
				off, n := max(r[0], 0), max(r[1], 1)
				got, sz, err := p.ReadAt(ctx, name, uint64(off), uint64(n))
				lo, hi := min(off, size), min(off+n, size)
				if err != nil || sz != uint64(size) || !bytes.Equal(got, want[lo:hi]) {
					t.Fatalf("%s: read %s [%d, +%d): %v (size %d, %d bytes)", when, name, off, n, err, sz, len(got))
				}
			}
		}
	}
	readAll("written")
	var names []string
	if err := p.List(ctx, func(n string) error { names = append(names, n); return nil }); err != nil || len(names) != len(sizes) {
		t.Fatalf("list: %v %v", names, err)
	}

	// Writes before the kill: with one position down, a 2+1 pool (min_size
	// 3) takes none.
	if err := p.Put(ctx, "gone", []byte("soon")); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, "gone"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := p.Stat(ctx, "gone"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat after delete: %v", err)
	}
	if err := p.Delete(ctx, "gone"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("delete of a deleted object: %v", err)
	}
	if err := p.PutNew(ctx, "page", []byte("x")); !errors.Is(err, client.ErrExists) {
		t.Fatalf("exclusive put of an existing object: %v", err)
	}
	if err := p.OmapApply(ctx, "odd", client.OmapTxn{Set: map[string][]byte{"k": []byte("v")}}); err != nil {
		t.Fatalf("a guarded omap transaction on an erasure-coded pool: %v", err)
	}
	err := p.OmapApply(ctx, "odd", client.OmapTxn{If: []client.OmapCond{{Key: "k", Absent: true}}, Set: map[string][]byte{"k": []byte("w")}})
	if !errors.Is(err, client.ErrPrecondition) {
		t.Fatalf("a guard that fails (key k is present): %v", err)
	}
	if kv, err := p.OmapGet(ctx, "odd", "k"); err != nil || string(kv["k"]) != "v" {
		t.Fatalf("omap key k after the transactions: %q, %v; want the first one's v", kv["k"], err)
	}

	// A flipped byte in a shard on disk: the read is rebuilt from the
	// other shards, and status reports the corrupt shard.
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ec21")
	table := placement.NewTable(m)
	const rotSize = 1<<20 + 4096
	if err := p.Put(ctx, "rot", payload("rot", 0, rotSize)); err != nil {
		t.Fatal(err)
	}
	_, rotPos := table.Positions(pool, placement.PGOf(pool, "rot"))
	flipByteInDataFile(t, c.procs[rotPos[0].String()].Data, ec.LayoutOf(*pool.EC).ShardLen(rotSize, 0), 5000)
	if got, err := p.Get(ctx, "rot"); err != nil || !bytes.Equal(got, payload("rot", 0, rotSize)) {
		t.Fatalf("get of an object with a corrupt shard: %v", err)
	}
	c.waitStatus(10*time.Second, "the corrupt shard reported", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OBJECT_REPAIRED") && strings.Contains(raw, "shard at position 0")
	})
	if err := p.Delete(ctx, "rot"); err != nil {
		t.Fatal(err)
	}

	_, pos := table.Positions(pool, placement.PGOf(pool, "big"))
	victim := pos[1] // a data shard, not the primary: the primary rebuilds it
	c.kill(victim.String())
	readAll(victim.String() + " killed")
	c.waitStatus(20*time.Second, victim.String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, victim.String()+" on host")
	})
	readAll(victim.String() + " down")
	if log, err := os.ReadFile(c.procs[pos[0].String()].Log); err != nil || !strings.Contains(string(log), `object "big": shards at positions [1] failed`) {
		t.Fatalf("%s's log does not show the read of big rebuilt without position 1 (%v)", pos[0], err)
	}
	// Status and pool ls say what the 2+1 pool can lose: one host by
	// design, nothing more now in the PGs that had a shard on the victim.
	if out, err := c.cli(nil, "status"); err != nil || strings.Contains(string(out), "HEALTH_OK") ||
		!regexp.MustCompile(`ec21 +ec 2\+1 +can lose 1 host +now: \d+ of \d+ pg\(s\) can lose only 0 more OSD\(s\)`).Match(out) ||
		!strings.Contains(string(out), "down to their last copy, or their last K shards") {
		t.Fatalf("status with a position of an erasure-coded pool down: %v\n%s", err, out)
	}
	if out, err := c.cli(nil, "pool", "ls"); err != nil || !regexp.MustCompile(`ec21 +ec 2\+1 .* 1 host +\d+ of \d+ pg\(s\) can lose only 0 more OSD\(s\) +67% +\d`).Match(out) {
		t.Fatalf("pool ls with a position of an erasure-coded pool down: %v\n%s", err, out)
	}
}

// TestECPoolRecovery: a 2+1 pool with min_size 2 takes writes and a
// delete while one OSD holding a position is down; once it is back,
// recovery rebuilds the shards it missed and deletes the one it kept of
// the deleted object (HEALTH_OK, never before). Then a different OSD is
// killed: every object reads back, which needs the returned OSD's rebuilt
// shards, and the deleted object stays deleted.
func TestECPoolRecovery(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	p, out := c.createECPool(t, "ecr", "2+1", "--min-size", "2")
	if !strings.Contains(out, "writes go on without redundancy") {
		t.Fatalf("pool create --ec 2+1 --min-size 2 does not warn:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := currentMap(t, c)
	pool, _ := m.PoolByName("ecr")
	table := placement.NewTable(m)
	positions := func(name string) []clustermap.OSDID {
		_, pos := table.Positions(pool, placement.PGOf(pool, name))
		return pos
	}
	sizes := []int{0, 1, 4096, 70001, 1<<20 + 3}
	objs := map[string]int{}
	for i := range 6 {
		objs[fmt.Sprintf("old%d", i)] = sizes[i%len(sizes)]
	}
	for name, size := range objs {
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	victim := positions("old0")[1] // holds a shard of the object deleted below
	c.kill(victim.String())
	c.waitStatus(20*time.Second, victim.String()+" down", func(_ map[string]any, raw string) bool {
		return strings.Contains(raw, "OSD_DOWN") && strings.Contains(raw, victim.String()+" on host")
	})
	// New objects: a large one in old0's PG, three more in PGs the victim
	// holds a position of, four elsewhere.
	oldPG := placement.PGOf(pool, "old0")
	var inVictim, others []string
	for i := 0; len(inVictim) < 4 || len(others) < 4; i++ {
		name := fmt.Sprintf("new%d", i)
		in := slices.Contains(positions(name), victim)
		switch {
		case len(inVictim) == 0:
			if placement.PGOf(pool, name) != oldPG {
				continue
			}
			inVictim = append(inVictim, name)
			objs[name] = 1<<20 + 12345 // large enough to live in a file of its own on each position
		case in && len(inVictim) < 4:
			inVictim = append(inVictim, name)
			objs[name] = sizes[i%len(sizes)] + i
		case !in && len(others) < 4:
			others = append(others, name)
			objs[name] = sizes[i%len(sizes)] + i
		default:
			continue
		}
		if err := p.Put(ctx, name, payload(name, 1, objs[name])); err != nil {
			t.Fatalf("put %s with %s down: %v", name, victim, err)
		}
	}
	if err := p.Delete(ctx, "old0"); err != nil {
		t.Fatalf("delete old0 with %s down: %v", victim, err)
	}
	delete(objs, "old0")
	if out, err := c.cli(nil, "status"); err != nil || strings.Contains(string(out), "HEALTH_OK") {
		t.Fatalf("status with a position down: %v\n%s", err, out)
	}

	restarted := time.Now()
	c.restart(victim.String())
	c.waitHealthy(30*time.Second, "with "+victim.String()+" back and its shards rebuilt")

	// The victim holds its rebuilt shard of the large object, on disk.
	big := inVictim[0]
	vpos := slices.Index(positions(big), victim)
	if want := ec.LayoutOf(*pool.EC).ShardLen(int64(objs[big]), vpos); !hasDataFile(c.procs[victim.String()].Data, want, restarted) {
		t.Fatalf("%s holds no data file of %d bytes written since it restarted: its shard %d of %s was not rebuilt", victim, want, vpos, big)
	}

	// A different OSD holding a position of old0's PG: its objects now
	// need the victim's shards, and old0 stays deleted only if the
	// victim's old shard of it was deleted.
	var second clustermap.OSDID = placement.NoOSD
	for _, o := range positions(inVictim[0]) {
		if o != victim {
			second = o
		}
	}
	c.kill(second.String())
	for name, size := range objs {
		gen := 0
		if strings.HasPrefix(name, "new") {
			gen = 1
		}
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, payload(name, gen, size)) {
			t.Fatalf("get %s with %s killed after %s came back: %v (%d bytes, want %d)", name, second, victim, err, len(got), size)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if _, err := p.Stat(sctx, "old0"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("old0, deleted while %s was down, after it came back and %s was killed: %v", victim, second, err)
	}
}

// hasDataFile says whether a data file of size bytes (its length may be
// rounded up to whole 4 KiB blocks) written since since lies under dir
// (objects that large live in files).
func hasDataFile(dir string, size int64, since time.Time) bool {
	found := false
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() >= size && fi.Size() <= (size+4095)/4096*4096 && fi.ModTime().After(since) &&
			!strings.Contains(path, string(filepath.Separator)+"meta"+string(filepath.Separator)) {
			found = true
		}
		return nil
	})
	return found
}
