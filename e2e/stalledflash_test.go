package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
)

// blkioWriteIOPS is the cgroup v1 block throttle of writes, in IOPS per
// device ("MAJ:MIN N"; N 0 removes the rule).
const blkioWriteIOPS = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device"

// flashDevice is a loop device with ext4, mounted where an OSD keeps its
// index and commit log.
type flashDevice struct {
	t      *testing.T
	dev    string // /dev/loopN
	majMin string
	mount  string
}

// newFlashDevice makes a 256 MiB loop device with ext4 and mounts it at
// mount; it skips the test where that or the block throttle cannot be done.
// Everything is undone when the test ends.
func newFlashDevice(t *testing.T, mount string) *flashDevice {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a loop device, a mount and the cgroup v1 block throttle")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to make a loop device with ext4", tool)
		}
	}
	if f, err := os.OpenFile(blkioWriteIOPS, os.O_WRONLY, 0); err != nil {
		t.Skipf("no cgroup v1 block throttle (%v)", err)
	} else {
		f.Close()
	}
	img := filepath.Join(t.TempDir(), "flash.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 256<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, out)
	}
	d := &flashDevice{t: t, dev: strings.TrimSpace(string(out)), mount: mount}
	t.Cleanup(d.remove)
	mm, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.dev), "dev"))
	if err != nil {
		t.Fatal(err)
	}
	d.majMin = strings.TrimSpace(string(mm))
	runTool(t, "mkfs.ext4", "-q", "-F", d.dev)
	if err := os.MkdirAll(mount, 0o755); err != nil {
		t.Fatal(err)
	}
	runTool(t, "mount", d.dev, mount)
	os.Remove(filepath.Join(mount, "lost+found")) // an index directory as a fresh OSD has it: empty
	return d
}

// throttle caps the device's writes at iops (0: no cap).
func (d *flashDevice) throttle(iops int) error {
	return os.WriteFile(blkioWriteIOPS, []byte(fmt.Sprintf("%s %d\n", d.majMin, iops)), 0o644)
}

// remove lifts the throttle, unmounts the file system lazily (a process
// may still hold it) and detaches the device; it may run more than once.
func (d *flashDevice) remove() {
	if d.dev == "" {
		return
	}
	d.throttle(0)
	exec.Command("umount", "-l", d.mount).Run()
	if out, err := exec.Command("losetup", "-d", d.dev).CombinedOutput(); err != nil {
		d.t.Logf("losetup -d %s: %v: %s", d.dev, err, out)
	}
	d.dev = ""
}

// TestStalledFlashStopsOnlyItsOSD: osd.0 keeps its index, its commit log
// and its read cache on a flash device of its own (a loop device with
// ext4), the others on the plain disk; the cache serves reads first. Mid-run, under writes, that device is throttled to 1 write
// a second, so it answers no commit within osd.0's stall timeout (5 s):
// osd.0 stops, saying that its meta device stopped answering and what to
// do, and the map marks it down; the other OSDs go on taking writes and
// serving reads. Then the device is removed: started again, osd.0 refuses
// to open its data directory without its index; marked out, its data is
// copied back onto the others until the cluster is healthy, and every
// acknowledged write reads back. Serial: it bounds the time osd.0 takes to
// go down, and a loaded machine could stall the device of a healthy OSD
// for that long too.
func TestStalledFlashStopsOnlyItsOSD(t *testing.T) {
	const stall = 5 * time.Second
	dir := filepath.Join(t.TempDir(), "dev")
	flash := newFlashDevice(t, filepath.Join(dir, "osd.0", "meta"))
	c := startCluster(t, clusterOpts{dir: dir, hosts: 4, perHost: 1, downOut: 10 * time.Minute, flashCache: "16M"})
	t.Cleanup(func() { flash.throttle(0) }) // before the cluster stops: nothing waits on the device then
	victim := c.procs["osd.0"]
	c.kill("osd.0")
	c.restart("osd.0", "--stall-timeout", stall.String())
	osd0 := c.extra[len(c.extra)-1]
	exited := make(chan error, 1)
	go func() { exited <- osd0.Wait() }()
	c.waitHealthy(60*time.Second, "with osd.0 on its flash device")
	cl := c.client()
	p := c.pool("default")

	readThroughFlashCache(t, c, p, 0)

	w := startStallWriters(p, 2)
	defer w.stop()
	time.Sleep(time.Second)
	before := w.count()
	if !osdUp(cl, 0) {
		t.Fatal("osd.0 is down before its flash device was throttled")
	}
	logStart := fileSize(victim.Log)
	throttled := time.Now()
	if err := flash.throttle(1); err != nil {
		t.Fatalf("throttle %s: %v", flash.dev, err)
	}
	t.Logf("%d writes acknowledged; %s (%s) throttled to 1 write IOPS", before, flash.dev, flash.majMin)

	waitFor(t, stall+15*time.Second, "osd.0 marked down after its flash device stalled", func() bool {
		return !osdUp(cl, 0)
	})
	down := time.Since(throttled)
	t.Logf("osd.0 down %.1f s after the throttle", down.Seconds())
	if down < stall-time.Second {
		t.Errorf("osd.0 went down %v after the throttle, before its stall timeout of %v", down, stall)
	}
	waitLog(t, victim.Log, "osd.0 stopped because its store failed", 30*time.Second)
	t.Logf("osd.0 said why it stopped %.1f s after the throttle", time.Since(throttled).Seconds())
	log := logSince(victim.Log, logStart)
	for _, want := range []string{"stopped answering", "has not completed for", filepath.Join(dir, "osd.0", "meta"),
		"check or replace the device", "other copies"} {
		if !strings.Contains(log, want) {
			t.Errorf("osd.0's log does not say %q:\n%s", want, log)
		}
	}

	// The three others go on taking writes.
	atDown := w.count()
	time.Sleep(3 * time.Second)
	if n := w.count() - atDown; n < 30 {
		t.Errorf("only %d writes acknowledged in the 3 s after osd.0 went down", n)
	}
	acked := w.stop()
	checkStallAcked(t, p, acked, "with osd.0 down")
	// Threads of osd.0 blocked in the kernel on the throttled device hold
	// its exit back until their IO completes.
	select {
	case err := <-exited:
		if err == nil {
			t.Error("osd.0 exited without an error after its flash device stalled")
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("osd.0 still runs 60 s after it was marked down:\n%s", logSince(victim.Log, logStart))
	}
	t.Logf("osd.0 exited %.1f s after the throttle; it logged:\n%s", time.Since(throttled).Seconds(), logSince(victim.Log, logStart))

	// The flash device is gone: osd.0 must not serve its data disk without
	// its index.
	flash.remove()
	refusal := restartRefused(t, c, "osd.0", "a removed flash device", fileSize(victim.Log))
	for _, want := range []string{"do not belong to one store", "meta device replaced or wiped", "empty both"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, refusal)
		}
	}
	if _, err := c.cli(nil, "osd", "out", "0"); err != nil {
		t.Fatal(err)
	}
	c.waitHealthy(60*time.Second, "with osd.0 out, its data copied back")
	checkStallAcked(t, p, acked, "after recovery without osd.0")
}

// readThroughFlashCache reads objects of which osd id is the primary
// twice, in 4 KiB reads, until osd df shows it has served some from its
// flash read cache.
func readThroughFlashCache(t *testing.T, c *cluster, p *client.Pool, id int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := currentMap(t, c)
	pool, _ := m.PoolByName("default")
	tab := placement.NewTable(m)
	for i, n := 0, 0; n < 2; i++ {
		name := fmt.Sprintf("cached-%d", i)
		if _, acting := tab.Locate(pool, name); len(acting) == 0 || acting[0] != clustermap.OSDID(id) {
			continue
		}
		n++
		want := payload(name, 0, 1<<20)
		if err := p.Put(ctx, name, want); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for off := uint64(0); off < 1<<20; off += 4096 {
				if got, _, err := p.ReadAt(ctx, name, off, 4096); err != nil || !bytes.Equal(got, want[off:off+4096]) {
					t.Fatalf("%s at %d: %v", name, off, err)
				}
			}
		}
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("osd df showing osd.%d's flash cache hits", id), func() bool {
		out, err := c.cli(nil, "osd", "df", "--json")
		var rows []map[string]any
		if err != nil || json.Unmarshal(out, &rows) != nil {
			return false
		}
		for _, r := range rows {
			if r["id"] == float64(id) && r["flash_cache_hit_rate"] != nil {
				return r["flash_cache_hit_rate"].(float64) > 0
			}
		}
		return false
	})
	t.Logf("osd.%d serves reads from its flash read cache", id)
}

// osdUp reports whether the map has osd id up.
func osdUp(cl *client.Client, id int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, st := range cl.OSDStatuses(ctx) {
		if st.ID == id {
			return st.Up
		}
	}
	return false
}

// stallWriters put objects of 1 to 61 KiB, each goroutine its own names,
// and keep what was acknowledged.
type stallWriters struct {
	mu    sync.Mutex
	acked []string
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

func startStallWriters(p *client.Pool, n int) *stallWriters {
	w := &stallWriters{done: make(chan struct{})}
	for g := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-w.done:
					return
				default:
				}
				time.Sleep(20 * time.Millisecond) // about 80 writes a second: enough to see, little to recover
				name := fmt.Sprintf("stall-%d-%05d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				err := p.Put(ctx, name, payload(name, 0, 1024+(i*7919)%(60<<10)))
				cancel()
				if err == nil {
					w.mu.Lock()
					w.acked = append(w.acked, name)
					w.mu.Unlock()
				}
			}
		}()
	}
	return w
}

func (w *stallWriters) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// stop ends the writers and returns the names acknowledged.
func (w *stallWriters) stop() []string {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// checkStallAcked reads back every acknowledged write.
func checkStallAcked(t *testing.T, p *client.Pool, acked []string, when string) {
	t.Helper()
	for _, name := range acked {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		got, err := p.Get(ctx, name)
		cancel()
		var i int
		fmt.Sscanf(name[strings.LastIndexByte(name, '-')+1:], "%d", &i)
		if err != nil || !bytes.Equal(got, payload(name, 0, 1024+(i*7919)%(60<<10))) {
			t.Fatalf("%s: acknowledged %s does not read back (%v)", when, name, err)
		}
	}
	t.Logf("%s: all %d acknowledged writes read back", when, len(acked))
}
