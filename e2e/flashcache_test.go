package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFlashReadCache: OSDs with a read cache on their meta devices serve a
// block read before from it (osd df shows hits); with every byte of every
// cache file then rotted, each block still reads back as written (from the
// data disks), and an overwrite is what the next read returns. An OSD
// stopped cleanly (SIGTERM) and started again finds its cache's blocks
// again (the index its stop saved).
func TestFlashReadCache(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{flashCache: "16M"})
	p := c.pool("default")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	model := map[string][]byte{}
	for i := range 3 {
		name := fmt.Sprintf("disk%d", i)
		model[name] = payload(name, 0, 1<<20)
		if err := p.Put(ctx, name, model[name]); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(when string) {
		t.Helper()
		for name, want := range model {
			for off := uint64(0); off < uint64(len(want)); off += 4096 {
				got, _, err := p.ReadAt(ctx, name, off, 4096)
				if err != nil || !bytes.Equal(got, want[off:off+4096]) {
					t.Fatalf("%s: %s at %d: %v (equal %v)", when, name, off, err, bytes.Equal(got, want[off:off+4096]))
				}
			}
		}
	}
	readAll("first pass")
	readAll("second pass")
	flashHits(t, c)
	// An OSD stopped cleanly finds its cache again when it starts.
	c.terminate("osd.0")
	c.restart("osd.0")
	waitFor(t, 20*time.Second, "osd.0 back with its flash cache", func() bool {
		log, _ := os.ReadFile(c.procs["osd.0"].Log)
		return strings.Contains(string(log), "back from the index its last clean stop saved")
	})
	c.waitHealthy(30*time.Second, "osd.0 back")
	readAll("osd.0 restarted")
	rotted := invertFiles(t, c.dir, "flashcache")
	if rotted != 6 {
		t.Fatalf("found %d flash cache files, want one for each of 6 OSDs", rotted)
	}
	readAll("with every cache file rotted")
	blk := payload("disk1", 1, 4096)
	if err := p.WriteAt(ctx, "disk1", 8192, blk); err != nil {
		t.Fatal(err)
	}
	copy(model["disk1"][8192:], blk)
	readAll("after an overwrite")
}

// flashHits waits until osd df shows flash read cache hits, checking that
// every OSD reporting has its 16 MiB cache.
func flashHits(t *testing.T, c *cluster) {
	t.Helper()
	waitFor(t, 30*time.Second, "osd df showing flash cache hits", func() bool {
		out, err := c.cli(nil, "osd", "df", "--json")
		var rows []map[string]any
		if err != nil || json.Unmarshal(out, &rows) != nil {
			return false
		}
		hits := 0.0
		for _, r := range rows {
			if r["reported"] == true && r["flash_cache_bytes"] != float64(16<<20) {
				t.Fatalf("osd df: an OSD without its 16 MiB flash cache: %v", r)
			}
			hits += r["flash_cache_hit_rate"].(float64)
		}
		return hits > 0
	})
}

// TestFlashReadCacheEC: a volume on a 2+1 pool over OSDs with flash read
// caches. fio writes it at random and checks every block; a second check
// reads from flash (osd df shows hits); with every cache file's bytes
// inverted, a third check still reads every block right; more random
// writes of other data (whose reads of old bytes use the cache but fill
// nothing) and a last check show no stale block is served from flash.
func TestFlashReadCacheEC(t *testing.T) {
	t.Parallel()
	needTools(t, "fio")
	c := startCluster(t, clusterOpts{flashCache: "16M", downOut: 10 * time.Minute})
	c.createECPool(t, "ecflash", "2+1")
	if out, err := c.cli(nil, "volume", "create", "ecflash/disk", "--size", "32M", "--object-size", "256K"); err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	uri := c.nbdURI("ecflash/disk")
	const size = 8 << 20
	fioVerifyAt(t, uri, size, false, nil)
	fioVerifyAt(t, uri, size, true, nil)
	flashHits(t, c)
	if n := invertFiles(t, c.dir, "flashcache"); n != 6 {
		t.Fatalf("found %d flash cache files, want one for each of 6 OSDs", n)
	}
	fioVerifyAt(t, uri, size, true, nil)
	fioVerifySeed(t, uri, size, 8, false, nil) // other data over the cached blocks
	fioVerifySeed(t, uri, size, 8, true, nil)
}

// invertFiles inverts every byte of every file named name under dir and
// returns how many there were.
func invertFiles(t *testing.T, dir, name string) int {
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != name {
			return nil
		}
		n++
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range data {
			data[i] = ^data[i]
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	return n
}
