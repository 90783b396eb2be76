package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
)

// devDirWithSmallOSD0 returns a dev cluster directory whose osd.0 lives on
// a tmpfs of its own of the given size (mount's size=), unmounted when the
// test ends; it skips the test where that cannot be done.
func devDirWithSmallOSD0(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "dev")
	small := filepath.Join(dir, "osd.0")
	if err := os.MkdirAll(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", small).Run() })
	return dir
}

// startWithSmallOSD0 starts a dev cluster whose osd.0 has a disk of 160
// MiB (devDirWithSmallOSD0) and a small reserve, so the 95% full mark is
// what stops writes.
func startWithSmallOSD0(t *testing.T) *cluster {
	t.Helper()
	c := startCluster(t, clusterOpts{dir: devDirWithSmallOSD0(t, "160m")})
	c.kill("osd.0")
	c.restart("osd.0", "--reserve", fmt.Sprint(2<<20))
	c.waitHealthy(60*time.Second, "with osd.0 back")
	return c
}

// TestDiskFull gives osd.0 a small filesystem of its own (tmpfs) and fills
// it: writes that need osd.0 fail with an error that says the disk is full,
// the OSD keeps serving reads, nothing acknowledged is lost, and writes work
// again once space is freed.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	c := startWithSmallOSD0(t)
	ctx := context.Background()
	p := c.pool("default")
	index := indexOnOSD0(t, c, p)

	acked, onOSD0 := fillOSD0(t, c, p, "default", 600)
	// Smaller writes still fit, until the disk is 95% used and osd.0 is
	// flagged full.
	for i := 0; i < 400; i++ {
		name := fmt.Sprintf("top-%04d", i)
		if !slices.Contains(actingOf(t, c, "default", name), 0) {
			continue
		}
		err := p.Put(ctx, name, payload(name, 0, 128<<10))
		if err == nil {
			acked = append(acked, name)
			continue
		}
		if strings.Contains(err.Error(), "is full (over 95%") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.waitStatus(10*time.Second, "OSD_FULL", func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_ERR" && strings.Contains(raw, "OSD_FULL") && strings.Contains(raw, "osd.0 is")
	})
	// Once flagged full in the map, primaries refuse new data for osd.0's
	// PGs before any copy is touched, saying why.
	for i := 0; ; i++ {
		name := fmt.Sprintf("refused-%04d", i)
		if !slices.Contains(actingOf(t, c, "default", name), 0) {
			continue
		}
		err := p.Put(ctx, name, payload(name, 0, 4<<10))
		if !errors.Is(err, client.ErrNoSpace) || !strings.Contains(err.Error(), "osd.0 is full (over 95%") || !strings.Contains(err.Error(), "reads and deletes go on") {
			t.Fatalf("write to a full OSD's PG: want the full-flag refusal, got %v", err)
		}
		break
	}

	checkIndexDeleteWhenFull(t, p, index)

	// Reads keep working, from osd.0 too, and nothing acknowledged is lost.
	for _, name := range acked {
		got, err := p.Get(ctx, name)
		if err != nil {
			t.Fatalf("read %s after the disk filled: %v", name, err)
		}
		if want := payload(name, 0, len(got)); !bytes.Equal(got, want) || len(got) != 2<<20 && len(got) != 128<<10 {
			t.Fatalf("%s reads back wrong after the disk filled", name)
		}
	}
	// Free space on osd.0 by deleting, then writes that need it succeed again.
	freeOSD0(t, c, p, "default", onOSD0[:len(onOSD0)/2], 64<<10)
}

// freeOSD0 deletes objects with a copy or shard on osd.0's full disk, and
// waits until a put of size bytes that needs osd.0 succeeds again.
func freeOSD0(t *testing.T, c *cluster, p *client.Pool, pool string, objects []string, size int) {
	t.Helper()
	ctx := context.Background()
	for _, name := range objects {
		if err := p.Delete(ctx, name); err != nil {
			t.Fatalf("delete %s with osd.0's disk full: %v", name, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("after-%04d", i)
		if !slices.Contains(actingOf(t, c, pool, name), 0) {
			continue
		}
		err := p.Put(ctx, name, payload(name, 0, size))
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("puts to osd.0 still fail after deleting %d of its objects: %v", len(objects), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// fillOSD0 puts objects of 2 MiB into pool (p) until one fails for want
// of space on osd.0, at most max: the error must say so, naming it. It
// returns the acknowledged objects and those of them osd.0 holds a copy
// or shard of.
func fillOSD0(t *testing.T, c *cluster, p *client.Pool, pool string, max int) (acked, onOSD0 []string) {
	t.Helper()
	var fullErr error
	for i := 0; i < max && fullErr == nil; i++ {
		name := fmt.Sprintf("fill-%04d", i)
		err := p.Put(context.Background(), name, payload(name, 0, 2<<20))
		switch {
		case err == nil:
			acked = append(acked, name)
			if slices.Contains(actingOf(t, c, pool, name), 0) {
				onOSD0 = append(onOSD0, name)
			}
		case errors.Is(err, client.ErrNoSpace):
			fullErr = err
		default:
			t.Fatalf("put %s: want success or ErrNoSpace, got %v", name, err)
		}
	}
	if fullErr == nil {
		t.Fatalf("put %d MiB into pool %s without filling osd.0's small disk", 2*len(acked), pool)
	}
	if !strings.Contains(fullErr.Error(), "osd.0") || !strings.Contains(fullErr.Error(), "full") {
		t.Errorf("the disk-full error should name the OSD and say full: %v", fullErr)
	}
	t.Logf("after %d acknowledged puts (%d on osd.0): %v", len(acked), len(onOSD0), fullErr)
	return acked, onOSD0
}

// TestBackfillStopsBeforeFull: osd.1 is taken out, and its data moves to
// osd.0 (the other OSD of its host), whose small disk cannot hold both.
// Backfill stops at the backfill-full mark, counted against the space the
// store's reserve leaves, and status says so; client writes meanwhile
// succeed or fail at once naming the full OSD, never hang; deleting data
// frees osd.0 and backfill completes.
func TestBackfillStopsBeforeFull(t *testing.T) {
	t.Parallel()
	dir := devDirWithSmallOSD0(t, "320m")
	c := startCluster(t, clusterOpts{dir: dir})
	ctx := context.Background()
	p := c.pool("default")
	ms := c.metaStore()
	ratio := func() float64 {
		st, err := ms.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st[0].UsedRatio
	}

	// Fill until osd.0 is a bit over half full: it cannot take osd.1's share too.
	var names []string
	for i := 0; ratio() < 0.55; i++ {
		if i == 400 {
			t.Fatalf("osd.0 only %.0f%% full after %d objects", ratio()*100, i)
		}
		name := fmt.Sprintf("fill-%04d", i)
		if err := p.Put(ctx, name, payload(name, 0, 2<<20)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
		if i%10 == 9 {
			time.Sleep(2 * time.Second) // stats are published every 2 s
		}
	}
	t.Logf("%d objects of 2 MiB: osd.0 %.0f%% full", len(names), ratio()*100)

	c.kill("osd.1")
	if _, err := c.cli(nil, "osd", "out", "1"); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	deadline := time.Now().Add(90 * time.Second)
	c.waitStatus(90*time.Second, "OSD_BACKFILLFULL naming osd.0", func(st map[string]any, raw string) bool {
		worst = max(worst, ratio())
		return strings.Contains(raw, "OSD_BACKFILLFULL") && strings.Contains(raw, "osd.0 is")
	})
	// Backfill has stopped, well before the store's reserve.
	time.Sleep(5 * time.Second)
	worst = max(worst, ratio())
	if worst >= clustermap.FullRatio {
		t.Fatalf("backfill filled osd.0 to %.1f%%, past the full mark", worst*100)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "osd.0.log")); strings.Contains(string(b), "osd disk full") {
		t.Fatalf("backfill made osd.0's store refuse a write for lack of space:\n%s", b)
	}
	// Overwrites of objects osd.0 lacks copy them there first: allowed
	// until osd.0 is full, then refused at once with a reason.
	var refused error
	for i, name := range names {
		if time.Now().After(deadline) || refused != nil {
			break
		}
		if !slices.Contains(actingOf(t, c, "default", name), 0) {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := p.Put(wctx, name, payload(name, i, 2<<20))
		cancel()
		if took := time.Since(start); took > 15*time.Second {
			t.Fatalf("a write waited %v with osd.0 nearly full: %v", took, err)
		}
		switch {
		case err == nil:
		case errors.Is(err, client.ErrNoSpace) && strings.Contains(err.Error(), "osd.0") && strings.Contains(err.Error(), "full"):
			refused = err
		default:
			t.Fatalf("write %s with osd.0 nearly full: want success or a refusal naming osd.0 as full, got %v", name, err)
		}
		worst = max(worst, ratio())
	}
	t.Logf("osd.0 at most %.0f%% full during backfill; client write refused: %v", worst*100, refused)

	// Deleting most data frees osd.0 and backfill completes.
	for _, name := range names[:len(names)*3/4] {
		if err := p.Delete(ctx, name); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	c.waitHealthy(120*time.Second, "after deleting data")
	if r := ratio(); r >= 0.85 {
		t.Fatalf("osd.0 still %.0f%% full after deleting three quarters of the data", r*100)
	}
}

// indexOnOSD0 makes an omap object with two keys, like an S3 bucket index,
// in a PG that osd.0 holds.
func indexOnOSD0(t *testing.T, c *cluster, p *client.Pool) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("index-%04d", i)
		if !slices.Contains(actingOf(t, c, "default", name), 0) {
			continue
		}
		err := p.OmapApply(context.Background(), name, client.OmapTxn{Create: true, Set: map[string][]byte{"a": []byte("entry a"), "b": []byte("entry b")}})
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
}

// checkIndexDeleteWhenFull: on a full OSD a guarded transaction that removes
// a key and records one small key (an S3 DELETE: the entry goes, a record
// of its data for the collector comes) is allowed, so a full cluster can
// be emptied through S3; one that adds keys is refused as full.
func checkIndexDeleteWhenFull(t *testing.T, p *client.Pool, index string) {
	ctx := context.Background()
	err := p.OmapApply(ctx, index, client.OmapTxn{If: []client.OmapCond{{Key: "a", Value: []byte("entry a")}}, Rm: []string{"a"},
		Set: map[string][]byte{"\x00g\x00a": []byte("data of a")}})
	if err != nil {
		t.Fatalf("an S3-style delete from an index on a full OSD: %v", err)
	}
	err = p.OmapApply(ctx, index, client.OmapTxn{Set: map[string][]byte{"c": []byte("entry c"), "d": []byte("entry d")}})
	if !errors.Is(err, client.ErrNoSpace) {
		t.Fatalf("adding keys to an index on a full OSD: want ErrNoSpace, got %v", err)
	}
}

// TestECDiskFull fills osd.0's small disk through a 2+1 pool: puts whose
// shards need osd.0 fail with an error naming it and saying full, every
// acknowledged object reads back whole, deletes go on with the disk full,
// and puts work again once the deletes' trims have freed the space.
func TestECDiskFull(t *testing.T) {
	t.Parallel()
	c := startWithSmallOSD0(t)
	ctx := context.Background()
	p, _ := c.createECPool(t, "ecfull", "2+1")

	acked, onOSD0 := fillOSD0(t, c, p, "ecfull", 1000)
	for _, name := range acked {
		if got, err := p.Get(ctx, name); err != nil || !bytes.Equal(got, payload(name, 0, 2<<20)) {
			t.Fatalf("read %s after the disk filled: %v", name, err)
		}
	}
	freeOSD0(t, c, p, "ecfull", onOSD0[:len(onOSD0)/2], 2<<20)
	for _, name := range onOSD0[len(onOSD0)/2:] {
		if got, err := p.Get(ctx, name); err != nil || !bytes.Equal(got, payload(name, 0, 2<<20)) {
			t.Fatalf("read %s after the deletes: %v", name, err)
		}
	}
}
