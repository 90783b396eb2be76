package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/volume"
)

// volumeSum is the SHA-256 of a volume's content, now or at a snapshot.
func volumeSum(t *testing.T, p *client.Pool, name, snap string) string {
	t.Helper()
	ctx := context.Background()
	v, err := volume.OpenSnap(ctx, p, name, snap)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, v.Size)
	if err := v.ReadAt(ctx, buf, 0); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(buf))
}

// TestVolumeSnapshots goes through what a backup of a VM disk does:
//   - a snapshot taken while fio writes through NBD stays fixed while
//     fio goes on writing;
//   - export at a snapshot, import, export-diff, import-diff: the copy is
//     identical to the source at each snapshot (qemu-img compare), and a
//     damaged diff is refused with the copy rolled back to where it was;
//   - a clone reads its parent snapshot, and its writes do not leak into
//     the parent; flatten detaches it;
//   - removing snapshots leaves no clone object behind.
func TestVolumeSnapshots(t *testing.T) {
	t.Parallel()
	needTools(t, "qemu-img", "qemu-io", "fio")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	volumeSnapshots(t, c, "default")
}

// TestVolumeSnapshotsEC runs TestVolumeSnapshots on a 2+1 pool, whose
// clones are erasure-coded objects of their own.
func TestVolumeSnapshotsEC(t *testing.T) {
	t.Parallel()
	needTools(t, "qemu-img", "qemu-io", "fio")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	c.createECPool(t, "ec", "2+1")
	volumeSnapshots(t, c, "ec")
}

// snapTest is a volume snapshot scenario on one pool of a cluster.
type snapTest struct {
	t    *testing.T
	c    *cluster
	p    *client.Pool
	pool string
}

func (st *snapTest) vol(name string) string { return st.pool + "/" + name }

// run runs the cairn CLI and fails the test if it fails.
func (st *snapTest) run(args ...string) string {
	st.t.Helper()
	out, err := st.c.cli(nil, args...)
	if err != nil {
		st.t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// qemuIO runs qemu-io commands on an export (read-only for a snapshot).
func (st *snapTest) qemuIO(export string, cmds ...string) {
	st.t.Helper()
	args := []string{"-f", "raw"}
	if strings.Contains(export, "@") {
		args = append(args, "-r") // snapshots are exported read-only
	}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out := runTool(st.t, "qemu-io", append(args, st.c.nbdURI(export))...)
	if strings.Contains(out, "fail") || strings.Contains(out, "error") {
		st.t.Fatalf("qemu-io %v on %s:\n%s", cmds, export, out)
	}
}

// identical checks with qemu-img that two exports read the same.
func (st *snapTest) identical(a, b string) {
	st.t.Helper()
	out := runTool(st.t, "qemu-img", "compare", "-f", "raw", "-F", "raw", st.c.nbdURI(a), st.c.nbdURI(b))
	if !strings.Contains(out, "identical") {
		st.t.Fatalf("qemu-img compare %s %s:\n%s", a, b, out)
	}
}

func volumeSnapshots(t *testing.T, c *cluster, pool string) {
	st := &snapTest{t: t, c: c, p: c.pool(pool), pool: pool}
	s1 := st.underFio()
	st.sendReceive()
	st.cloneAndFlatten(s1)
	st.noClonesLeft()
}

// underFio takes s1 while fio writes the volume through NBD, and s2 after
// more writes; it returns s1's sum.
func (st *snapTest) underFio() string {
	t, c, p := st.t, st.c, st.p
	st.run("volume", "create", st.vol("vm"), "--size", "64M", "--object-size", "1M")
	st.qemuIO(st.vol("vm"), "write -P 0x11 0 64M")

	// A snapshot while fio writes the first 8 MiB through NBD.
	fio := exec.Command("fio", "--name=snap", "--ioengine=nbd", "--uri="+c.nbdURI(st.vol("vm")),
		"--rw=randwrite", "--bs=4k", "--iodepth=8", "--size=8M", "--time_based", "--runtime=6s")
	fioOut := &strings.Builder{}
	fio.Stdout, fio.Stderr = fioOut, fioOut
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	st.run("volume", "snap", "create", st.vol("vm@s1"))
	s1 := volumeSum(t, p, "vm", "s1")
	time.Sleep(2 * time.Second)
	if again := volumeSum(t, p, "vm", "s1"); again != s1 {
		t.Fatal("snapshot s1 changed while fio kept writing")
	}
	if err := fio.Wait(); err != nil {
		t.Fatalf("fio: %v\n%s", err, fioOut)
	}
	if volumeSum(t, p, "vm", "s1") != s1 || volumeSum(t, p, "vm", "") == s1 {
		t.Fatal("after fio: the snapshot must be unchanged and the head changed")
	}
	st.qemuIO(st.vol("vm@s1"), "read -P 0x11 8M 56M") // beyond fio's range: as first written

	// More writes, one object zeroed whole, then s2.
	st.qemuIO(st.vol("vm"), "write -P 0x22 20M 64k", "write -P 0x23 40M 1M", "write -z -u 50M 1M")
	st.run("volume", "snap", "create", st.vol("vm@s2"))
	st.qemuIO(st.vol("vm"), "write -P 0x33 0 1M") // after s2: in neither diff
	st.qemuIO(st.vol("vm@s2"), "read -P 0x22 20M 64k", "read -P 0 50M 1M")
	if out, err := exec.Command("qemu-io", "-f", "raw", "-c", "write 0 4k", c.nbdURI(st.vol("vm@s2"))).CombinedOutput(); err == nil && !strings.Contains(string(out), "failed") {
		t.Fatalf("a write to a snapshot export succeeded:\n%s", out)
	}

	return s1
}

// sendReceive exports, imports and sends diffs between the snapshots.
func (st *snapTest) sendReceive() {
	t, c := st.t, st.c
	// Send and receive.
	dir := t.TempDir()
	full, diff := filepath.Join(dir, "s1.cvol"), filepath.Join(dir, "s1-s2.cvol")
	st.run("volume", "export", st.vol("vm@s1"), full)
	st.run("volume", "import", full, st.vol("backup"))
	st.identical(st.vol("vm@s1"), st.vol("backup"))
	st.identical(st.vol("vm@s1"), st.vol("backup@s1"))
	st.run("volume", "export-diff", "--from-snap", "s1", st.vol("vm@s2"), diff)
	fi, _ := os.Stat(diff)
	t.Logf("diff s1→s2 of a 64 MiB volume: %d bytes", fi.Size())
	if fi.Size() > 16<<20 {
		t.Errorf("the diff (%d bytes) should hold only the objects changed since s1 (at most 11 of 64)", fi.Size())
	}
	good, _ := os.ReadFile(diff)
	bad := append([]byte(nil), good...)
	bad[len(bad)*3/4] ^= 0x40
	badFile := filepath.Join(dir, "bad.cvol")
	os.WriteFile(badFile, bad, 0o644)
	if out, err := c.cli(nil, "volume", "import-diff", badFile, st.vol("backup")); err == nil || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("import-diff of a damaged stream: want it refused and rolled back, got %v\n%s", err, out)
	}
	st.identical(st.vol("vm@s1"), st.vol("backup"))
	if strings.Contains(st.run("volume", "snap", "ls", st.vol("backup")), "s2") {
		t.Fatal("a refused diff created its snapshot")
	}
	st.run("volume", "import-diff", diff, st.vol("backup"))
	st.identical(st.vol("vm@s2"), st.vol("backup"))
	st.identical(st.vol("vm@s2"), st.vol("backup@s2"))
	// The same diff again is refused: the copy already has s2.
	if _, err := c.cli(nil, "volume", "import-diff", diff, st.vol("backup")); err == nil {
		t.Fatal("a diff applied twice")
	}
	// Rollback, then a diff from the rolled-back state applies again.
	st.run("volume", "snap", "rollback", st.vol("backup@s1"))
	st.identical(st.vol("vm@s1"), st.vol("backup"))
	st.run("volume", "snap", "rm", st.vol("backup@s2"))
	st.run("volume", "import-diff", diff, st.vol("backup"))
	st.identical(st.vol("vm@s2"), st.vol("backup"))

}

// cloneAndFlatten clones s1, writes the clone and flattens it.
func (st *snapTest) cloneAndFlatten(s1 string) {
	t, c, p := st.t, st.c, st.p
	// A clone of s1.
	headBefore := volumeSum(t, p, "vm", "")
	st.run("volume", "clone", st.vol("vm@s1"), st.vol("cl"))
	st.identical(st.vol("vm@s1"), st.vol("cl"))
	st.qemuIO(st.vol("cl"), "write -P 0x77 0 4k", "write -P 0x78 33M 2M", "write -z -u 60M 1M")
	st.qemuIO(st.vol("cl"), "read -P 0x77 0 4k", "read -P 0x78 33M 2M", "read -P 0 60M 1M", "read -P 0x11 36M 4M")
	if volumeSum(t, p, "vm", "s1") != s1 || volumeSum(t, p, "vm", "") != headBefore {
		t.Fatal("writes to the clone leaked into its parent")
	}
	clSum := volumeSum(t, p, "cl", "")
	if _, err := c.cli(nil, "volume", "snap", "rm", st.vol("vm@s1")); err == nil {
		t.Fatal("a snapshot with a clone was removed")
	}
	st.run("volume", "flatten", st.vol("cl"))
	if strings.Contains(st.run("volume", "info", st.vol("cl")), "parent") {
		t.Fatal("flatten left the parent")
	}
	st.run("volume", "snap", "rm", st.vol("vm@s1"))
	if volumeSum(t, p, "cl", "") != clSum {
		t.Fatal("the flattened clone changed when its parent snapshot went")
	}

}

// noClonesLeft removes the snapshots and checks no clone outlives them.
func (st *snapTest) noClonesLeft() {
	t, c, p := st.t, st.c, st.p
	ctx := context.Background()
	// No clone object outlives the snapshots.
	if _, err := c.cli(nil, "volume", "rm", st.vol("vm")); err == nil {
		t.Fatal("a volume with snapshots was removed")
	}
	st.run("volume", "snap", "rm", st.vol("vm@s2"))
	info, err := volume.Stat(ctx, p, "vm")
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 64; i++ {
		set, _, err := p.Snaps(ctx, fmt.Sprintf("vol.%s.%016x", info.ID, i))
		if errors.Is(err, client.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(set.Clones) > 0 {
			t.Fatalf("object %d keeps %d clones after every snapshot was removed", i, len(set.Clones))
		}
	}
	st.run("volume", "rm", st.vol("vm"))
}

// TestSnapshotsRecoverWithTheirOSD: an OSD killed while the first writes
// after a snapshot make clones comes back and is brought up to date, clones
// and snapshot state included: left alone, it serves the snapshot and the
// head exactly.
func TestSnapshotsRecoverWithTheirOSD(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1, downOut: 10 * time.Minute})
	snapshotsRecover(t, c, "default", "osd.1", "osd.2")
}

// TestSnapshotsRecoverWithTheirOSDEC is TestSnapshotsRecoverWithTheirOSD
// on a 2+1 pool: the OSD back must serve its rebuilt shards of heads and
// clones, and the heads' snapshot state, with one other OSD down.
func TestSnapshotsRecoverWithTheirOSDEC(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1, downOut: 10 * time.Minute})
	c.createECPool(t, "ec", "2+1", "--min-size", "2")
	snapshotsRecover(t, c, "ec", "osd.1")
}

// snapshotsRecover makes clones of every object of a volume in pool while
// osd.0 is down, brings it back, then kills lose and reads the volume at
// the snapshot and now.
func snapshotsRecover(t *testing.T, c *cluster, pool string, lose ...string) {
	ctx := context.Background()
	p := c.pool(pool)
	if out, err := c.cli(nil, "volume", "create", pool+"/v", "--size", "16M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v, err := volume.Open(ctx, p, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.WriteAt(ctx, payload("before", 0, 16<<20), 0); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(nil, "volume", "snap", "create", pool+"/v@s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	snapSum := volumeSum(t, p, "v", "s")
	c.kill("osd.0")
	c.waitStatus(15*time.Second, "osd.0 down", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(2)
	})
	// Every object gets its clone while osd.0 is away; half are then
	// zeroed whole (the head is kept, empty, for its clone).
	if err := v.WriteAt(ctx, payload("after", 0, 16<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Zero(ctx, 8<<20, 8<<20, true); err != nil {
		t.Fatal(err)
	}
	headSum := volumeSum(t, p, "v", "")
	c.restart("osd.0")
	c.waitHealthy(60*time.Second, "osd.0 back")
	for _, osd := range lose {
		c.kill(osd)
	}
	c.waitStatus(15*time.Second, "osd.0 with the others down", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(3-len(lose))
	})
	if got := volumeSum(t, p, "v", "s"); got != snapSum {
		t.Fatal("osd.0 back, " + strings.Join(lose, " and ") + " down: the snapshot reads differently")
	}
	if got := volumeSum(t, p, "v", ""); got != headSum {
		t.Fatal("osd.0 back, " + strings.Join(lose, " and ") + " down: the head reads differently")
	}
}

// TestECSnapshotCutShort: the first write after a snapshot to a volume on
// a 2+1 pool first puts the object's clone; the primary dies as that put
// reaches every position, before it is answered (osd.FailpointECPartialPut)
// and before the head's snapshot state names the clone. The snapshot and
// the head read as they should, deep scrub finds every shard consistent,
// and once the snapshot and the volume are removed the pool holds no more
// objects than before it was made: the clone no state named went too.
func TestECSnapshotCutShort(t *testing.T) {
	t.Parallel()
	trigger := filepath.Join(t.TempDir(), "clone-put")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1, downOut: 10 * time.Minute, env: []string{osd.FailpointECPartialPut + "=" + trigger}})
	p, _ := c.createECPool(t, "ecs", "2+1", "--min-size", "2")
	ctx := context.Background()
	before := scrubObjects(t, c, "ecs")
	if out, err := c.cli(nil, "volume", "create", "ecs/v", "--size", "4M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v, err := volume.Open(ctx, p, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.WriteAt(ctx, payload("before", 0, 4<<20), 0); err != nil {
		t.Fatal(err)
	}
	if out, err := c.cli(nil, "volume", "snap", "create", "ecs/v@s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	snapSum := volumeSum(t, p, "v", "s")
	if err := os.WriteFile(trigger, []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The write gives up before the PG has a new primary (as a rule), so
	// nothing puts the clone again: it stays, named by no snapshot state.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	wrote := v.WriteAt(wctx, payload("after", 0, 4096), 0) == nil
	cancel()
	v.Close()
	fired := false
	for name, proc := range c.procs {
		if log, _ := os.ReadFile(proc.Log); strings.Contains(string(log), "failpoint "+osd.FailpointECPartialPut) {
			fired = true
			c.restart(name)
		}
	}
	if !fired {
		t.Fatal("no OSD fired the failpoint")
	}
	c.waitHealthy(60*time.Second, "the primary back")
	if got := volumeSum(t, p, "v", "s"); got != snapSum {
		t.Fatal("the snapshot reads differently after the cut clone put")
	}
	want := payload("before", 0, 4<<20)
	if wrote {
		copy(want, payload("after", 0, 4096))
	}
	if got := volumeSum(t, p, "v", ""); got != fmt.Sprintf("%x", sha256.Sum256(want)) {
		t.Fatalf("the head does not read as it should (the write acknowledged: %v)", wrote)
	}
	if out, err := c.cli(nil, "scrub", "--deep", "--json", "ecs"); err != nil || !strings.Contains(string(out), `"errors": 0`) {
		t.Fatalf("deep scrub: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"volume", "snap", "rm", "ecs/v@s"}, {"volume", "rm", "ecs/v"}} {
		if out, err := c.cli(nil, args...); err != nil {
			t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// What stays is the pool's directory of volumes; deletes' tombstones
	// go once their trims land.
	deadline := time.Now().Add(20 * time.Second)
	for after := scrubObjects(t, c, "ecs"); after != before+1; after = scrubObjects(t, c, "ecs") {
		if time.Now().After(deadline) {
			ls, _ := c.cli(nil, "obj", "ls", "ecs")
			sc, _ := c.cli(nil, "scrub", "--json", "ecs")
			t.Fatalf("the pool held %d objects before the volume and holds %d after it was removed (its directory of volumes stays); listed:\n%s\n%s", before, after, ls, sc)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// scrubObjects counts the objects of pool, clones included, as scrub
// finds them.
func scrubObjects(t *testing.T, c *cluster, pool string) int {
	t.Helper()
	out, err := c.cli(nil, "scrub", "--json", pool)
	if err != nil {
		t.Fatalf("scrub %s: %v\n%s", pool, err, out)
	}
	var res struct {
		Objects int `json:"objects"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("scrub %s --json: %v\n%s", pool, err, out)
	}
	return res.Objects
}

// TestECSnapshotsUnderFaults: snapshots of a volume on a 2+1 pool taken
// while fio writes it through NBD and one OSD is SIGKILLed and restarted
// read the same from the moment they are taken: after the writes, after
// the OSD is back and rebuilt, after an older snapshot is removed, and
// with a different OSD down (its shards rebuilt from the others').
func TestECSnapshotsUnderFaults(t *testing.T) {
	t.Parallel()
	needTools(t, "fio")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1, downOut: 10 * time.Minute})
	p, _ := c.createECPool(t, "ecf", "2+1", "--min-size", "2")
	if out, err := c.cli(nil, "volume", "create", "ecf/vm", "--size", "32M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uri := c.nbdURI("ecf/vm")
	fio := exec.Command("fio", "--name=faults", "--ioengine=nbd", "--uri="+uri, "--rw=randwrite", "--bs=4k",
		"--iodepth=8", "--size=32M", "--time_based", "--runtime=10s")
	out := &strings.Builder{}
	fio.Stdout, fio.Stderr = out, out
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	snap := func(name string) string {
		t.Helper()
		if out, err := c.cli(nil, "volume", "snap", "create", "ecf/vm@"+name); err != nil {
			t.Fatalf("snap create %s: %v\n%s", name, err, out)
		}
		return volumeSum(t, p, "vm", name)
	}
	time.Sleep(2 * time.Second)
	s1 := snap("s1")
	c.kill("osd.2")
	time.Sleep(2 * time.Second)
	s2 := snap("s2") // taken with osd.2 down: its clones miss that position
	time.Sleep(time.Second)
	c.restart("osd.2")
	if err := fio.Wait(); err != nil {
		t.Fatalf("fio across the SIGKILL: %v\n%s", err, out)
	}
	check := func(when string) {
		t.Helper()
		if volumeSum(t, p, "vm", "s1") != s1 || volumeSum(t, p, "vm", "s2") != s2 {
			t.Fatalf("%s: a snapshot reads differently than when it was taken", when)
		}
	}
	check("after the writes")
	if s1 == s2 {
		t.Fatal("fio wrote nothing between the snapshots")
	}
	c.waitHealthy(60*time.Second, "osd.2 back")
	check("osd.2 back and rebuilt")
	if out, err := c.cli(nil, "volume", "snap", "rm", "ecf/vm@s1"); err != nil {
		t.Fatalf("snap rm s1: %v\n%s", err, out)
	}
	if volumeSum(t, p, "vm", "s2") != s2 {
		t.Fatal("s2 changed when s1 was removed")
	}
	c.kill("osd.0")
	c.waitStatus(15*time.Second, "osd.0 down", func(st map[string]any, _ string) bool { return st["osds_up"] == float64(2) })
	if volumeSum(t, p, "vm", "s2") != s2 {
		t.Fatal("s2 reads differently with osd.0 down: the shards osd.2 got back do not rebuild it")
	}
}
