package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// expected tracks what every object must read back as: its content's
// digest, or absent after a delete.
type expected struct {
	mu   sync.Mutex
	objs map[string]*[32]byte // nil: deleted
	// maybe holds contents of writes that failed after the last
	// acknowledged one: they may or may not have landed.
	maybe map[string][][32]byte
	// acked holds every acknowledged content of each object, so a
	// mismatch tells a stale read from content never written.
	acked map[string][][32]byte
}

func newExpected() *expected {
	return &expected{objs: map[string]*[32]byte{}, maybe: map[string][][32]byte{}, acked: map[string][][32]byte{}}
}

func (e *expected) put(name string, data []byte, err error) {
	d := digest(data)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.maybe[name] = append(e.maybe[name], d)
		return
	}
	e.objs[name] = &d
	delete(e.maybe, name)
	e.acked[name] = append(e.acked[name], d)
}

func (e *expected) del(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.objs[name] = nil
	delete(e.maybe, name)
}

// verify reads every tracked object back through p.
func (e *expected) verify(t *testing.T, p *client.Pool, what string) {
	t.Helper()
	e.mu.Lock()
	names := make([]string, 0, len(e.objs))
	for n := range e.objs {
		names = append(names, n)
	}
	e.mu.Unlock()
	ctx := context.Background()
	parallel(t, names, 8, func(name string) error {
		e.mu.Lock()
		want, maybe, acked := e.objs[name], e.maybe[name], e.acked[name]
		e.mu.Unlock()
		got, err := p.Get(ctx, name)
		if want == nil {
			if !errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("%s: deleted %s reads back: %v", what, name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: acknowledged %s: %v", what, name, err)
		}
		d := digest(got)
		if d == *want {
			return nil
		}
		for _, m := range maybe {
			if d == m {
				return nil
			}
		}
		for i, a := range acked {
			if d == a {
				return fmt.Errorf("%s: acknowledged %s reads back an older acknowledged write (%d of %d; %d bytes)", what, name, i+1, len(acked), len(got))
			}
		}
		return fmt.Errorf("%s: acknowledged %s reads back content never acknowledged (%d bytes)", what, name, len(got))
	})
}

func (c *cluster) waitHealthy(timeout time.Duration, what string) {
	c.t.Helper()
	start := time.Now()
	c.waitStatus(timeout, "HEALTH_OK "+what, func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_OK"
	})
	c.t.Logf("HEALTH_OK %s after %.1f s", what, time.Since(start).Seconds())
}

// TestRestartedOSDCatchesUp: an OSD killed while writes, overwrites and
// deletes go on comes back and is brought up to date before it serves
// anything; then with the two others killed it alone serves every
// acknowledged write, and writes stop with a clear error (min_size 2)
// until one more copy returns.
func TestRestartedOSDCatchesUp(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1, downOut: 10 * time.Minute})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	r := rand.New(rand.NewPCG(1, 2))
	var names []string
	for i := range 200 {
		names = append(names, fmt.Sprintf("obj-%03d", i))
	}
	write := func(name string, gen int) {
		data := payload(name, gen, 1+logUniformSize(r, 256<<10))
		err := p.Put(ctx, name, data)
		if err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		exp.put(name, data, nil)
	}
	for _, n := range names {
		write(n, 1)
	}
	c.kill("osd.0")
	c.waitStatus(15*time.Second, "osd.0 down", func(st map[string]any, raw string) bool {
		return strings.Contains(raw, "osd.0 on host")
	})
	// While it is away: overwrite half, delete some, create new ones.
	for i, n := range names {
		switch {
		case i%2 == 0:
			write(n, 2)
		case i%7 == 1:
			if err := p.Delete(ctx, n); err != nil {
				t.Fatalf("delete %s: %v", n, err)
			}
			exp.del(n)
		}
	}
	for i := range 30 {
		write(fmt.Sprintf("new-%02d", i), 1)
	}
	c.restart("osd.0")
	c.waitHealthy(60*time.Second, "after osd.0 returned")

	// Only osd.0 left: everything it serves must be the newest.
	c.kill("osd.1")
	c.kill("osd.2")
	c.waitStatus(15*time.Second, "osd.1 and osd.2 down", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(1)
	})
	exp.verify(t, p, "osd.0 alone")
	wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
	err := p.Put(wctx, "blocked", []byte("x"))
	cancel()
	if err == nil || !strings.Contains(err.Error(), "min_size") {
		t.Fatalf("write with 1 of 3 copies up (min_size 2): want an error naming min_size, got %v", err)
	}
	t.Logf("write with one copy up: %v", err)
	c.restart("osd.1")
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	err = p.Put(wctx, "resumed", []byte("after osd.1 came back"))
	cancel()
	if err != nil {
		t.Fatalf("write after osd.1 returned: %v", err)
	}
	exp.put("resumed", []byte("after osd.1 came back"), nil)
	c.restart("osd.2")
	c.waitHealthy(60*time.Second, "after osd.1 and osd.2 returned")
	// osd.1 and osd.2 were stale for "resumed" (osd.2) and nothing else:
	// alone, each must now serve everything.
	for _, keep := range []string{"osd.1", "osd.2"} {
		for _, other := range []string{"osd.0", "osd.1", "osd.2"} {
			if other != keep {
				c.kill(other)
			}
		}
		c.waitStatus(15*time.Second, keep+" alone", func(st map[string]any, raw string) bool {
			return st["osds_up"] == float64(1)
		})
		exp.verify(t, p, keep+" alone")
		for _, other := range []string{"osd.0", "osd.1", "osd.2"} {
			if other != keep {
				c.restart(other)
			}
		}
		c.waitHealthy(60*time.Second, "with every OSD back")
	}
}

// TestOSDLostForGood: a writer keeps writing and verifying while one OSD is
// killed for good. It is marked out after the down-out interval, its
// placement groups are backfilled onto the other OSDs, and the cluster
// returns to HEALTH_OK by itself; then a whole host is lost and every
// acknowledged object still reads back.
func TestOSDLostForGood(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{downOut: 4 * time.Second})
	ctx := context.Background()
	p := c.pool("default")
	exp := newExpected()
	for i := range 300 {
		name := fmt.Sprintf("base-%03d", i)
		data := payload(name, 0, 1+logUniformSize(rand.New(rand.NewPCG(uint64(i), 0)), 512<<10))
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acked, failed int
	var mu sync.Mutex
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for gen := 1; ; gen++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%02d", w, r.IntN(30))
				data := payload(name, gen, 1+r.IntN(64<<10))
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := p.Put(wctx, name, data)
				cancel()
				exp.put(name, data, err)
				mu.Lock()
				if err == nil {
					acked++
				} else {
					failed++
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	victim := "osd.3"
	killedAt := time.Now()
	c.kill(victim)
	c.waitStatus(30*time.Second, victim+" out", func(st map[string]any, raw string) bool {
		return st["osds_in"] == float64(5)
	})
	c.waitHealthy(180*time.Second, "after backfill")
	t.Logf("%s killed: marked out and backfilled to HEALTH_OK in %.1f s", victim, time.Since(killedAt).Seconds())
	close(stop)
	wg.Wait()
	t.Logf("writer: %d acknowledged, %d failed during the failure", acked, failed)
	if acked < 50 {
		t.Fatalf("only %d writes acknowledged while the OSD was lost: IO did not go on", acked)
	}
	exp.verify(t, p, "after backfill")

	// The lost OSD can now be removed; one that is in cannot.
	if _, err := c.cli(nil, "osd", "rm", "0"); err == nil || !strings.Contains(err.Error(), "osd out 0") {
		t.Fatalf("osd rm of an OSD that is in: want a refusal saying to mark it out, got %v", err)
	}
	if out, err := c.cli(nil, "osd", "rm", "3"); err != nil {
		t.Fatalf("osd rm of the backfilled-away osd.3: %v\n%s", err, out)
	}
	if tree, _ := c.cli(nil, "osd", "tree"); strings.Contains(string(tree), "osd.3") {
		t.Fatalf("osd.3 still in the tree after rm:\n%s", tree)
	}

	// Full redundancy again: losing a whole other host (osd.0 and osd.1)
	// leaves two copies of everything.
	c.kill("osd.0")
	c.kill("osd.1")
	c.waitStatus(15*time.Second, "host1 down", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(3)
	})
	exp.verify(t, p, "host1 lost too")
}

// TestDeepScrubRepairsCorruption flips a byte in 5% of the objects' data
// files on one OSD: a deep scrub finds every one and repairs it from the
// other copies, and a second deep scrub finds nothing.
func TestDeepScrubRepairsCorruption(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	p := c.pool("default")
	const n, size = 200, 192 << 10 // large enough to live in data files
	exp := newExpected()
	for i := range n {
		name := fmt.Sprintf("s-%03d", i)
		data := payload(name, 0, size)
		if err := p.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
		exp.put(name, data, nil)
	}
	// Every object has a copy on osd.1 (3 hosts, 3 copies).
	var files []string
	filepath.Walk(c.procs["osd.1"].Data, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() == size {
			files = append(files, path)
		}
		return nil
	})
	if len(files) != n {
		t.Fatalf("found %d data files of %d bytes on osd.1, want %d", len(files), size, n)
	}
	r := rand.New(rand.NewPCG(5, 5))
	r.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	bad := files[:n*5/100]
	for _, f := range bad {
		flipByte(t, f, int64(r.IntN(size)))
	}
	scrub := func() map[string]any {
		out, err := c.cli(nil, "scrub", "--deep", "--json", "default")
		if err != nil {
			t.Fatalf("deep scrub: %v\n%s", err, out)
		}
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("scrub --json: %v: %s", err, out)
		}
		return res
	}
	res := scrub()
	t.Logf("first deep scrub: %v objects, %v inconsistent, %v repaired", res["objects"], res["errors"], res["repaired"])
	if res["objects"] != float64(n) {
		t.Errorf("scrub compared %v objects, want %d", res["objects"], n)
	}
	if res["errors"] != float64(len(bad)) || res["repaired"] != float64(len(bad)) {
		t.Fatalf("deep scrub found %v and repaired %v inconsistencies; %d copies were corrupted", res["errors"], res["repaired"], len(bad))
	}
	res = scrub()
	if res["errors"] != float64(0) {
		t.Fatalf("second deep scrub found %v inconsistencies, want 0", res["errors"])
	}
	c.waitStatus(10*time.Second, "the repairs reported", func(st map[string]any, raw string) bool {
		return strings.Contains(raw, "OBJECT_REPAIRED") && strings.Contains(raw, "scrub found")
	})
	// The repaired copies are good: osd.1 alone serves them.
	c.kill("osd.0")
	c.kill("osd.2")
	c.waitStatus(15*time.Second, "osd.1 alone", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(1)
	})
	exp.verify(t, p, "osd.1 alone after the scrub")
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
