package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/meta"
)

// Faults found by trying to break a dev cluster: each test here reproduces
// one with real processes.

// alive fails the test if any OSD of the cluster has exited, or any log
// shows a panic.
func (c *cluster) requireNoCrash(what string) {
	c.t.Helper()
	for name, p := range c.procs {
		if strings.HasPrefix(name, "osd.") && dead(p.PID) {
			c.t.Fatalf("%s: %s (pid %d) exited:\n%s", what, name, p.PID, c.logs())
		}
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if i := strings.Index(string(b), "panic:"); i >= 0 {
			c.t.Fatalf("%s: %s shows a panic:\n%s", what, f, b[i:min(len(b), i+3000)])
		}
	}
}

// logsContain counts the lines of all logs that contain s.
func (c *cluster) logsContain(s string) int {
	n := 0
	files, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		n += strings.Count(string(b), s)
	}
	return n
}

// metaStore connects to the cluster's etcd as the daemons do.
func (c *cluster) metaStore() *meta.Store {
	c.t.Helper()
	cf, err := conf.Load(c.conf)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := meta.ConnectConf(ctx, cf)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { ms.Close() })
	return ms
}

// TestPoolRemoveNeverCrashesOSDs: removing a pool whose data the OSDs hold
// (idle, recovering, or being scrubbed) frees it without any OSD crashing;
// pool rm asks for confirmation, and refuses a pool with volumes or with
// clones in other pools unless forced.
func TestPoolRemoveNeverCrashesOSDs(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	must := func(args ...string) string {
		t.Helper()
		out, err := c.cli(nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	fill := func(pool string, n int) {
		t.Helper()
		p := c.pool(pool)
		for i := range n {
			name := fmt.Sprintf("o%03d", i)
			if err := p.Put(ctx, name, payload(name, 0, 1+i*977)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, pool := range []string{"idle", "recovering", "scrubbed", "vols"} {
		must("pool", "create", pool)
	}
	fill("idle", 20)
	fill("scrubbed", 50)

	// A confirmation is asked for.
	if _, err := c.cli(nil, "pool", "rm", "idle"); err == nil || !strings.Contains(err.Error(), "--yes-i-really-mean-it") {
		t.Fatalf("pool rm without confirmation: want a refusal naming --yes-i-really-mean-it, got %v", err)
	}
	must("pool", "rm", "idle", "--yes-i-really-mean-it")

	// Volumes, and clones in another pool, need --force.
	must("volume", "create", "vols/vm1", "--size", "64M")
	must("volume", "create", "vols/vm2", "--size", "64M")
	must("volume", "snap", "create", "vols/vm1@s1")
	must("volume", "clone", "vols/vm1@s1", "scrubbed/c1")
	if _, err := c.cli(nil, "pool", "rm", "vols", "--yes-i-really-mean-it"); err == nil || !strings.Contains(err.Error(), "scrubbed/c1") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("pool rm of a pool whose snapshot has a clone elsewhere: want a refusal naming scrubbed/c1 and --force, got %v", err)
	}
	// One pool removed while its PGs recover, one while a deep scrub reads it.
	c.kill("osd.1")
	c.waitStatus(20*time.Second, "osd.1 down", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(5) })
	fill("recovering", 200)
	c.restart("osd.1")
	scrub := make(chan error, 1)
	go func() { _, err := c.cli(nil, "scrub", "--deep", "scrubbed"); scrub <- err }()
	time.Sleep(300 * time.Millisecond)
	must("pool", "rm", "recovering", "--yes-i-really-mean-it")
	must("pool", "rm", "scrubbed", "--yes-i-really-mean-it", "--force")
	<-scrub // it may fail: its pool went away under it

	// The clone went with its pool: its parent's snapshot can go now, and
	// then the parent's pool, whose volumes still need --force.
	must("volume", "snap", "rm", "vols/vm1@s1")
	if _, err := c.cli(nil, "pool", "rm", "vols", "--yes-i-really-mean-it"); err == nil || !strings.Contains(err.Error(), "vm1, vm2") {
		t.Fatalf("pool rm of a pool with volumes: want a refusal naming vm1, vm2, got %v", err)
	}
	must("pool", "rm", "vols", "--yes-i-really-mean-it", "--force")

	// Stray removal runs every 10 s: give it two passes.
	deadline := time.Now().Add(25 * time.Second)
	for time.Now().Before(deadline) && c.logsContain("its pool was removed") == 0 {
		time.Sleep(time.Second)
	}
	time.Sleep(12 * time.Second)
	c.requireNoCrash("after removing pools")
	if n := c.logsContain("its pool was removed"); n == 0 {
		t.Fatalf("no OSD removed the copies of the removed pools:\n%s", c.logs())
	}
	c.waitHealthy(60*time.Second, "after removing pools")
	if out := must("pool", "ls"); strings.Contains(out, "recovering") || strings.Contains(out, "scrubbed") {
		t.Fatalf("removed pools still listed:\n%s", out)
	}

	// An OSD removed from the map while it runs stops by itself, saying
	// why; every other OSD carries on.
	must("osd", "out", "5")
	c.waitStatus(60*time.Second, "osd.5 drained (only OSD_OUT left)", func(st map[string]any, raw string) bool {
		checks, _ := st["checks"].([]any)
		return len(checks) == 1 && strings.Contains(raw, `"OSD_OUT"`)
	})
	must("osd", "rm", "5")
	osd5 := c.procs["osd.5"]
	deadline = time.Now().Add(20 * time.Second)
	for !dead(osd5.PID) {
		if time.Now().After(deadline) {
			t.Fatalf("osd.5 still runs 20 s after it was removed from the map")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b, _ := os.ReadFile(osd5.Log); !strings.Contains(string(b), "was removed from the cluster map") {
		t.Fatalf("osd.5 stopped without saying it was removed:\n%s", b)
	}
	delete(c.procs, "osd.5")
	c.requireNoCrash("after removing osd.5")
	c.waitHealthy(30*time.Second, "without osd.5")
}

// TestReturnedOSDComesBackIn: an OSD marked out because it stayed down is
// marked in again when it returns, so the cluster does not stay one OSD
// short with HEALTH_OK; one marked out by a person stays out, and status
// says so.
func TestReturnedOSDComesBackIn(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{downOut: 3 * time.Second})
	osdsIn := func(n int) func(map[string]any, string) bool {
		return func(st map[string]any, raw string) bool {
			return st["osds_in"] == float64(n) && st["osds_up"] == float64(6)
		}
	}
	for round := range 3 {
		c.kill("osd.2")
		c.waitStatus(60*time.Second, "osd.2 marked out", func(st map[string]any, raw string) bool { return st["osds_in"] == float64(5) })
		c.restart("osd.2")
		c.waitStatus(60*time.Second, fmt.Sprintf("osd.2 back in (round %d)", round), osdsIn(6))
	}
	c.waitHealthy(60*time.Second, "with osd.2 back")

	if _, err := c.cli(nil, "osd", "out", "2"); err != nil {
		t.Fatal(err)
	}
	c.kill("osd.2")
	c.restart("osd.2")
	c.waitStatus(30*time.Second, "osd.2 up again", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(6) })
	time.Sleep(3 * time.Second) // the keeper had its chance
	c.waitStatus(30*time.Second, "osd.2 up but out, with a warning", func(st map[string]any, raw string) bool {
		return st["osds_in"] == float64(5) && st["health"] == "HEALTH_WARN" && strings.Contains(raw, "OSD_OUT") && strings.Contains(raw, "osd.2")
	})
}

// TestRecoveryConvergesWhileRecordsChange: two OSDs on different hosts
// killed and returned one after the other while clients keep overwriting
// objects (their writes recover objects too) and something else keeps
// rewriting the PG records (as a primary of an older map would): recovery
// retries until every PG is clean, instead of stalling until an unrelated
// map change.
func TestRecoveryConvergesWhileRecordsChange(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	for i := range 200 {
		name := fmt.Sprintf("obj-%03d", i)
		data := payload(name, 0, 1+(i*7919)%(96<<10))
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	stop := make(chan struct{})
	done := make(chan int, 5)
	for w := range 4 {
		go func() {
			n := 0
			defer func() { done <- n }()
			for gen := 1; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				// Each writer owns 50 objects, so the order of its
				// acknowledgements is the order of its writes.
				name := fmt.Sprintf("obj-%03d", w*50+(gen*37)%50)
				data := payload(name, gen*4+w, 1+(gen*7919)%(96<<10))
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				err := p.Put(wctx, name, data)
				cancel()
				exp.put(name, data, err)
				n++
			}
		}()
	}
	ms := c.metaStore()
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			recs, err := ms.PGRecords(ctx)
			if err != nil {
				continue
			}
			for pg := range recs {
				if r, rev, err := ms.PGRecord(ctx, pg); err == nil && r != nil {
					old := *r
					old.Epoch = max(r.Epoch, 1) - 1 // as written by an earlier interval's primary
					if _, err := ms.PutPGRecord(ctx, pg, old, rev); err == nil {
						n++
					}
				}
			}
		}
	}()
	time.Sleep(time.Second)
	c.kill("osd.0")
	c.kill("osd.3")
	c.waitStatus(20*time.Second, "two OSDs down", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(4) })
	time.Sleep(3 * time.Second)
	c.restart("osd.0")
	time.Sleep(1500 * time.Millisecond)
	c.restart("osd.3")
	time.Sleep(6 * time.Second)
	close(stop)
	writes := 0
	for range 4 {
		writes += <-done
	}
	t.Logf("%d writes; PG records rewritten %d times while the OSDs returned", writes, <-done)
	c.waitHealthy(60*time.Second, "after two OSDs returned")
	exp.verify(t, p, "after recovery")
	c.requireNoCrash("after recovery")
}

// TestFrozenOSDDoesNotHangIO: an OSD that stops answering without dying
// (SIGSTOP: a hung disk, a stalled VM) is marked down when its lease runs
// out; from then on no client write waits for it, whether it was the
// write's primary or one of its replicas, and every write succeeds.
func TestFrozenOSDDoesNotHangIO(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	frozen := c.procs["osd.1"]
	t.Cleanup(func() { syscall.Kill(frozen.PID, syscall.SIGCONT) })

	stop := make(chan struct{})
	type stat struct {
		n, failed int
		worst     time.Duration
		lastErr   error
	}
	stats := make(chan stat, 16)
	for w := range 16 {
		go func() {
			var st stat
			defer func() { stats <- st }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%02d-%03d", w, i%100)
				data := payload(name, i, 4096)
				wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
				start := time.Now()
				err := p.Put(wctx, name, data)
				cancel()
				st.worst = max(st.worst, time.Since(start))
				st.n++
				if err != nil {
					st.failed++
					st.lastErr = err
				}
				exp.put(name, data, err)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	if err := syscall.Kill(frozen.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(20*time.Second, "osd.1 marked down", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(5) })
	time.Sleep(20 * time.Second)
	syscall.Kill(frozen.PID, syscall.SIGCONT)
	time.Sleep(3 * time.Second)
	close(stop)
	var total stat
	for range 16 {
		st := <-stats
		total.n += st.n
		total.failed += st.failed
		total.worst = max(total.worst, st.worst)
		if st.lastErr != nil {
			total.lastErr = st.lastErr
		}
	}
	t.Logf("%d writes, %d failed, slowest %v", total.n, total.failed, total.worst.Round(time.Millisecond))
	if total.failed > 0 {
		t.Fatalf("%d of %d writes failed while osd.1 was frozen; last: %v", total.failed, total.n, total.lastErr)
	}
	// Detection is the 3 s lease plus the keeper's reaction; then one retry.
	if total.worst > 12*time.Second {
		t.Fatalf("a write waited %v: longer than failure detection plus one retry", total.worst)
	}
	c.waitHealthy(60*time.Second, "after osd.1 resumed")
	exp.verify(t, p, "after osd.1 resumed")
	c.requireNoCrash("after the freeze")
}

// TestRecoveryGoesOnWhileAnOSDIsFrozen: an OSD frozen while other OSDs
// copy objects to it is marked down and then out; recovery and backfill
// of every PG go on without it (no copy waits for it), and the cluster is
// healthy again while it is still frozen.
func TestRecoveryGoesOnWhileAnOSDIsFrozen(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{downOut: 5 * time.Second})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	c.kill("osd.1")
	c.waitStatus(20*time.Second, "osd.1 down", func(st map[string]any, raw string) bool { return st["osds_up"] == float64(5) })
	for i := range 300 {
		name := fmt.Sprintf("o%03d", i)
		data := payload(name, 0, 64<<10+i*1024)
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	c.restart("osd.1")
	frozen := c.procs["osd.1"]
	t.Cleanup(func() { syscall.Kill(frozen.PID, syscall.SIGCONT) })
	// Freeze it as soon as the others start copying objects to it.
	deadline := time.Now().Add(30 * time.Second)
	for c.logsContain("objects to recover") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery towards osd.1 started:\n%s", c.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(frozen.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(30*time.Second, "osd.1 marked down and out", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(5) && st["osds_in"] == float64(5)
	})
	c.waitHealthy(60*time.Second, "with osd.1 frozen and out")
	exp.verify(t, p, "with osd.1 frozen")
	syscall.Kill(frozen.PID, syscall.SIGCONT)
	c.waitStatus(60*time.Second, "osd.1 back in", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(6) && st["osds_in"] == float64(6) && st["health"] == "HEALTH_OK"
	})
	exp.verify(t, p, "with osd.1 back")
	c.requireNoCrash("after the freeze")
}

// TestQuickRestartBeginsNewInterval: an OSD killed and started again before
// its lease ran out (so the keeper never marked it down) still changes the
// map when it comes back, with a new up-since time: each of its PGs begins
// a new interval, and members refuse the messages of its previous life
// that may still be on their way (the pool simulation in internal/pg shows
// the acknowledged write they could otherwise undo). Every object written
// before and after reads back.
func TestQuickRestartBeginsNewInterval(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{leaseTTL: 30 * time.Second})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	for i := range 50 {
		name, data := fmt.Sprintf("before-%02d", i), payload("before", i, 4096)
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	ms := c.metaStore()
	upSince := func() (time.Time, clustermap.Epoch) {
		m, _, err := ms.Map(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := m.OSD(1)
		if !ok || !o.Up {
			t.Fatalf("osd.1 is not up in map epoch %d", m.Epoch)
		}
		return o.UpSince, m.Epoch
	}
	before, epoch := upSince()
	c.kill("osd.1")
	c.restart("osd.1")
	deadline := time.Now().Add(15 * time.Second) // half the lease: the keeper cannot have seen it gone
	for {
		now, e := upSince()
		if now.After(before) {
			t.Logf("osd.1 up since %s at epoch %d (was %s at epoch %d)", now.Format(time.RFC3339Nano), e, before.Format(time.RFC3339Nano), epoch)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("osd.1 restarted but the map still says it is up since %s (epoch %d): its PGs did not begin a new interval", before, e)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 50 {
		name, data := fmt.Sprintf("after-%02d", i), payload("after", i, 4096)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.Put(wctx, name, data)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	c.waitHealthy(60*time.Second, "after osd.1 came back")
	exp.verify(t, p, "after the quick restart")
	c.requireNoCrash("after the quick restart")
}
