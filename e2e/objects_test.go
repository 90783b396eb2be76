package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/placement"
)

const mib = 1 << 20

// TestObjectsSurviveRestart writes 1,000 objects of 0 B to 8 MiB through the
// client package and 100 more through the CLI, reads them all back, restarts
// the whole dev cluster and reads them all again.
func TestObjectsSurviveRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	cl := c.client()
	p, err := cl.Pool("default")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const n, nCLI = 1000, 100
	sizes := map[string]int{}
	for i := 0; i < n; i++ {
		size := logUniformSize(r, 8*mib)
		switch i {
		case 0:
			size = 0
		case 1:
			size = 8 * mib
		}
		sizes[fmt.Sprintf("obj-%04d", i)] = size
	}
	names := make([]string, 0, n)
	for name := range sizes {
		names = append(names, name)
	}
	sort.Strings(names)
	var total int64
	parallel(t, names, 8, func(name string) error {
		return p.Put(ctx, name, payload(name, 0, sizes[name]))
	})
	for _, s := range sizes {
		total += int64(s)
	}
	t.Logf("wrote %d objects, %.1f MiB, through client/", n, float64(total)/mib)
	// On one host the client and the OSDs reach the OSDs over their local
	// sockets: at least the client's connection to each OSD (each is some
	// PG's primary) and each OSD's to the peers it replicates to.
	if got, want := c.localConns(), c.hosts*c.perHost+2; got < want {
		t.Errorf("%d connections over the OSDs' local sockets, want at least %d", got, want)
	}

	// Through the CLI, from files and from stdin.
	tmp := t.TempDir()
	cliNames := make([]string, nCLI)
	for i := range cliNames {
		name := fmt.Sprintf("cli-%03d", i)
		cliNames[i] = name
		size := logUniformSize(r, 8*mib)
		sizes[name] = size
		data := payload(name, 0, size)
		if i%2 == 0 {
			f := filepath.Join(tmp, name)
			if err := os.WriteFile(f, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := c.cli(nil, "obj", "put", "default", name, f); err != nil {
				t.Fatal(err)
			}
		} else if _, err := c.cli(data, "obj", "put", "default", name); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(stage string, cl *client.Client) {
		p, err := cl.Pool("default")
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([]string{}, names...), cliNames...)
		parallel(t, all, 8, func(name string) error {
			got, err := p.Get(ctx, name)
			if err != nil {
				return fmt.Errorf("%s: %w", stage, err)
			}
			if want := payload(name, 0, sizes[name]); !bytes.Equal(got, want) {
				return fmt.Errorf("%s: %s: got %d bytes (sha %x), want %d (sha %x)", stage, name, len(got), digest(got), len(want), digest(want))
			}
			return nil
		})
		for _, name := range cliNames[:20] {
			out, err := c.cli(nil, "obj", "get", "default", name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, payload(name, 0, sizes[name])) {
				t.Fatalf("%s: cairn obj get %s returned different bytes", stage, name)
			}
		}
		out, err := c.cli(nil, "obj", "ls", "default")
		if err != nil {
			t.Fatal(err)
		}
		listed := strings.Fields(string(out))
		if len(listed) != len(all) {
			t.Fatalf("%s: obj ls lists %d objects, want %d", stage, len(listed), len(all))
		}
		out, err = c.cli(nil, "obj", "stat", "default", "obj-0001")
		if err != nil || !strings.Contains(string(out), fmt.Sprint(8*mib)) {
			t.Fatalf("%s: obj stat obj-0001: %q %v", stage, out, err)
		}
	}
	verify("before restart", cl)
	cl.Close()

	c.stop()
	c.start()
	verify("after restart", c.client())
}

// parallel runs fn over items with k workers and fails the test on the first error.
func parallel(t *testing.T, items []string, k int, fn func(string) error) {
	t.Helper()
	ch := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := fn(it); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d failed; first: %v", len(errs), len(items), errs[0])
	}
}

// TestKillOSDDuringWrites runs 16 writers while one OSD is SIGKILLed: every
// acknowledged write must read back, writes must go on after the failure,
// and `cairn status` must name the down OSD within the lease TTL.
func TestKillOSDDuringWrites(t *testing.T) {
	t.Parallel()
	// Over TCP, as between hosts: the other tests run on local sockets.
	c := startCluster(t, clusterOpts{tcpOnly: true})
	ctx := context.Background()
	p := c.pool("default")
	type state struct {
		acked    map[string][32]byte   // last acknowledged content
		possible map[string][][32]byte // contents of failed writes after it: may or may not be there
	}
	var mu sync.Mutex
	st := state{acked: map[string][32]byte{}, possible: map[string][][32]byte{}}
	var ackedAfterKill, failed int
	killed := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for gen := 1; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%02d-%02d", w, r.IntN(40))
				size := 1 + r.IntN(128<<10)
				data := payload(name, gen, size)
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := p.Put(wctx, name, data)
				cancel()
				mu.Lock()
				if err == nil {
					st.acked[name] = digest(data)
					delete(st.possible, name)
					select {
					case <-killed:
						ackedAfterKill++
					default:
					}
				} else {
					failed++
					st.possible[name] = append(st.possible[name], digest(data))
					t.Logf("writer %d: %s: %v", w, name, err)
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(2 * time.Second)
	victim := fmt.Sprintf("osd.%d", rand.IntN(6))
	c.kill(victim)
	killedAt := time.Now()
	close(killed)
	const ttl = 3 * time.Second
	c.waitStatus(ttl+5*time.Second, victim+" down", func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_WARN" && strings.Contains(raw, victim+" on host")
	})
	noticed := time.Since(killedAt)
	t.Logf("cairn status named %s down %.1f s after SIGKILL (lease TTL %s)", victim, noticed.Seconds(), ttl)
	if noticed > ttl+2*time.Second {
		t.Errorf("status took %s to name the down OSD; lease TTL is %s", noticed, ttl)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if ackedAfterKill < 50 {
		t.Fatalf("only %d writes were acknowledged after %s was killed: IO did not go on", ackedAfterKill, victim)
	}
	t.Logf("%d objects acknowledged (%d after the kill), %d writes failed", len(st.acked), ackedAfterKill, failed)
	for name, want := range st.acked {
		got, err := p.Get(ctx, name)
		if err != nil {
			t.Fatalf("acknowledged %s: %v", name, err)
		}
		d := digest(got)
		if d == want {
			continue
		}
		ok := false
		for _, alt := range st.possible[name] {
			ok = ok || d == alt
		}
		if !ok {
			t.Fatalf("acknowledged %s reads back different content (%d bytes)", name, len(got))
		}
	}
}

// TestCorruptionServedFromReplica flips one byte in the primary's data file:
// the read returns the right bytes from a replica, the copy is repaired and
// `cairn status` reports it. With every copy corrupted, the read fails
// instead of returning bad bytes.
func TestCorruptionServedFromReplica(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	cl := c.client()
	p, err := cl.Pool("default")
	if err != nil {
		t.Fatal(err)
	}
	data := payload("victim", 0, mib)
	if err := p.Put(ctx, "victim", data); err != nil {
		t.Fatal(err)
	}
	acting := actingOf(t, c, "default", "victim")
	primary := fmt.Sprintf("osd.%d", acting[0])
	flipByteInDataFile(t, c.procs[primary].Data, mib, 12345)

	got, err := p.Get(ctx, "victim")
	if err != nil {
		t.Fatalf("read after corrupting the primary's copy: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read returned corrupted bytes")
	}
	c.waitStatus(10*time.Second, "the corruption report", func(st map[string]any, raw string) bool {
		return strings.Contains(raw, "OBJECT_REPAIRED") && strings.Contains(raw, primary) && strings.Contains(raw, "victim")
	})
	// The repaired copy serves the next read itself.
	if got, err := p.Get(ctx, "victim"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("second read: %v", err)
	}

	// Every copy corrupted: an error, never the bytes.
	data2 := payload("doomed", 0, mib)
	if err := p.Put(ctx, "doomed", data2); err != nil {
		t.Fatal(err)
	}
	for _, id := range actingOf(t, c, "default", "doomed") {
		flipByteInDataFile(t, c.procs[fmt.Sprintf("osd.%d", id)].Data, mib, 777)
	}
	got, err = p.Get(ctx, "doomed")
	if err == nil {
		t.Fatalf("read of an object corrupted on every copy returned %d bytes and no error", len(got))
	}
	if !errors.Is(err, client.ErrCorrupt) {
		t.Fatalf("want ErrCorrupt, got %v", err)
	}
	t.Logf("every copy corrupted: %v", err)

	// An object larger than a read repairs at once, corrupted in its second
	// 16 MiB chunk: the read is served from a replica, the repair is left
	// for scrub, and status says so as a warning, not as data lost.
	big := payload("large", 0, 20*mib)
	if err := p.Put(ctx, "large", big); err != nil {
		t.Fatal(err)
	}
	flipByteInDataFile(t, c.procs[fmt.Sprintf("osd.%d", actingOf(t, c, "default", "large")[0])].Data, 20*mib, 17*mib+5)
	if got, err := p.Get(ctx, "large"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read of a large object corrupted on its primary: %v", err)
	}
	c.waitStatus(10*time.Second, "the large object reported as left for scrub", func(st map[string]any, raw string) bool {
		return strings.Contains(raw, "left for scrub") && strings.Contains(raw, "large")
	})
	c.waitStatus(10*time.Second, "HEALTH_ERR for the unrepairable object", func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_ERR" && strings.Contains(raw, "OBJECT_CORRUPT") && strings.Contains(raw, "doomed")
	})
	// A deep scrub of the large object's PG repairs what the read left.
	pool, _ := currentMap(t, c).PoolByName("default")
	pg := placement.PGOf(pool, "large").String()
	out, err := c.cli(nil, "scrub", "--deep", "--json", pg)
	if err != nil {
		t.Fatalf("deep scrub of %s: %v", pg, err)
	}
	if !strings.Contains(string(out), `"repaired": 1`) {
		t.Fatalf("deep scrub of %s should repair the large object once:\n%s", pg, out)
	}
	out, err = c.cli(nil, "scrub", "--deep", "--json", pg)
	if err != nil || !strings.Contains(string(out), `"errors": 0`) {
		t.Fatalf("second deep scrub of %s should find nothing: %v\n%s", pg, err, out)
	}

	// Once the operator has seen them, the events are archived: status
	// is healthy again, and the history stays listed.
	if out, err := c.cli(nil, "health", "archive"); err != nil || !strings.Contains(string(out), "archived") {
		t.Fatalf("health archive: %v\n%s", err, out)
	}
	c.waitHealthy(10*time.Second, "after archiving the events")
	out, err = c.cli(nil, "health", "ls")
	if err != nil || !strings.Contains(string(out), "victim") || !strings.Contains(string(out), "doomed") {
		t.Fatalf("health ls should still list the archived events: %v\n%s", err, out)
	}
}

// flipByteInDataFile finds the one data file of the given size under dir
// (objects that large live in files) and inverts the byte at off.
func flipByteInDataFile(t *testing.T, dir string, size int64, off int64) {
	t.Helper()
	flipByte(t, newestDataFile(t, dir, size), off)
}

// newestDataFile is the newest data file of the given size under dir (the
// object just written), outside its meta dir.
func newestDataFile(t *testing.T, dir string, size int64) string {
	t.Helper()
	var found []string
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() == size && !strings.Contains(path, string(filepath.Separator)+"meta"+string(filepath.Separator)) {
			found = append(found, path)
		}
		return nil
	})
	if len(found) == 0 {
		t.Fatalf("no data file of %d bytes under %s", size, dir)
	}
	sort.Slice(found, func(i, j int) bool {
		a, _ := os.Stat(found[i])
		b, _ := os.Stat(found[j])
		return a.ModTime().After(b.ModTime())
	})
	return found[0]
}
