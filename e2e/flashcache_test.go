package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFlashReadCache: OSDs with a read cache on their meta devices serve a
// block read before from it (osd df shows hits); with every byte of every
// cache file then rotted, each block still reads back as written (from the
// data disks), and an overwrite is what the next read returns.
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
	var hits float64
	waitFor(t, 30*time.Second, "osd df showing flash cache hits", func() bool {
		out, err := c.cli(nil, "osd", "df", "--json")
		var rows []map[string]any
		if err != nil || json.Unmarshal(out, &rows) != nil {
			return false
		}
		hits = 0
		for _, r := range rows {
			if r["reported"] == true && r["flash_cache_bytes"] != float64(16<<20) {
				t.Fatalf("osd df: an OSD without its 16 MiB flash cache: %v", r)
			}
			hits += r["flash_cache_hit_rate"].(float64)
		}
		return hits > 0
	})
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
