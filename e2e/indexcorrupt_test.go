package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// flipIndexBytes inverts n bytes spread over the sstables of an OSD's
// index, in the first 90% of each (their blocks, not the footer), and
// returns the files it damaged.
func flipIndexBytes(t *testing.T, metaDir string, n int) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(metaDir, "*.sst"))
	if len(files) == 0 {
		t.Fatalf("no sstables in %s", metaDir)
	}
	for i := 0; i < n; i++ {
		f := files[i%len(files)]
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		k := i / len(files)
		off := len(b) * 9 / 10 * (k + 1) / (n/len(files) + 2)
		b[off] ^= 0xff
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestDamagedIndexRefusesToStart flips 20 bytes in one OSD's index files
// while it is down. Restarted, the OSD refuses to start with a message that
// names it, the damaged file and what to do, instead of panicking; the
// cluster keeps serving every object from the other copies.
func TestDamagedIndexRefusesToStart(t *testing.T) {
	t.Parallel()
	c, p := startWith40Objects(t)
	ctx := context.Background()
	victim := c.procs["osd.1"]
	c.kill("osd.1")
	files := flipIndexBytes(t, filepath.Join(victim.Data, "meta"), 20)
	logStart := fileSize(victim.Log)

	log := restartRefused(t, c, "osd.1", "a damaged index", logStart)
	named := false
	for _, f := range files {
		named = named || strings.Contains(log, filepath.Base(f))
	}
	for _, want := range []string{"osd.1", "index is damaged", "cairn osd out 1", "other copies"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}
	if !named || strings.Contains(log, "panic") {
		t.Errorf("the refusal should name a damaged file (%v) and not panic:\n%s", files, log)
	}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("o%02d", i)
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, payload(name, 0, 1000+i*3000)) {
			t.Fatalf("%s with osd.1 refusing to start: %v", name, err)
		}
	}
}

// restartRefused restarts an OSD that must refuse to start (on what, as
// the messages say), waits for it to exit with an error, and returns what
// it logged from logStart on.
func restartRefused(t *testing.T, c *cluster, name, on string, logStart int64) string {
	t.Helper()
	c.restart(name)
	cmd := c.extra[len(c.extra)-1]
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("%s on %s exited without an error", name, on)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s on %s still runs after 60 s:\n%s", name, on, logSince(c.procs[name].Log, logStart))
	}
	c.extra = c.extra[:len(c.extra)-1]
	log := logSince(c.procs[name].Log, logStart)
	t.Logf("%s on %s:\n%s", name, on, log)
	return log
}

// TestWipedMetaRefusesToStart wipes one OSD's index (its meta directory,
// as a replaced or wiped flash device would) while it is down. Restarted,
// the OSD refuses to open its data directory under the new, empty index,
// saying why and what to do, and leaves its data files in place (an empty
// index used to take them all for orphans and delete them); the cluster
// keeps serving every object from the other copies.
func TestWipedMetaRefusesToStart(t *testing.T) {
	t.Parallel()
	c, p := startWith40Objects(t)
	victim := c.procs["osd.1"]
	c.kill("osd.1")
	dataFiles := func() []string {
		f, _ := filepath.Glob(filepath.Join(victim.Data, "data", "*", "*"))
		return f
	}
	before := dataFiles()
	if len(before) == 0 {
		t.Fatal("osd.1 holds no data files: the test needs objects larger than the inline limit on it")
	}
	if err := os.RemoveAll(filepath.Join(victim.Data, "meta")); err != nil {
		t.Fatal(err)
	}
	log := restartRefused(t, c, "osd.1", "a wiped index", fileSize(victim.Log))
	for _, want := range []string{"do not belong to one store", "meta device replaced or wiped", "empty both"} {
		if !strings.Contains(log, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, log)
		}
	}
	if after := dataFiles(); len(after) != len(before) {
		t.Errorf("osd.1 had %d data files, %d after the refused start", len(before), len(after))
	}
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("o%02d", i)
		if got, err := p.Get(context.Background(), name); err != nil || !bytes.Equal(got, payload(name, 0, 1000+i*3000)) {
			t.Fatalf("%s with osd.1 refusing to start: %v", name, err)
		}
	}
}

// startWith40Objects starts a cluster of three OSDs and writes objects
// o00 to o39 of 1000+3000i bytes to its pool default.
func startWith40Objects(t *testing.T) (*cluster, *client.Pool) {
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	p := c.pool("default")
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("o%02d", i)
		if err := p.Put(context.Background(), name, payload(name, 0, 1000+i*3000)); err != nil {
			t.Fatal(err)
		}
	}
	return c, p
}

// fileSize returns the size of a file (0 if it does not exist).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns what was appended to a log from offset on.
func logSince(path string, offset int64) string {
	b, _ := os.ReadFile(path)
	if int64(len(b)) < offset {
		return string(b)
	}
	return string(b[offset:])
}

// TestIndexCheckFindsDamageWhileRunning: damage to a running OSD's index is
// found by its periodic index check (with deep scrub's interval) before
// any read or restart trips on it, and status says what to do.
func TestIndexCheckFindsDamageWhileRunning(t *testing.T) {
	t.Parallel()
	c, _ := startWith40Objects(t)
	victim := c.procs["osd.1"]
	c.kill("osd.1")
	c.restart("osd.1", "--deep-scrub-interval", "3s")
	c.waitHealthy(60*time.Second, "with osd.1 back")
	if !strings.Contains(logSince(victim.Log, 0), "every block of the index verified") {
		time.Sleep(4 * time.Second) // one check, on the intact index
	}
	flipIndexBytes(t, filepath.Join(victim.Data, "meta"), 20)
	c.waitStatus(30*time.Second, "OSD_INDEX_DAMAGED naming osd.1", func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_ERR" && strings.Contains(raw, "OSD_INDEX_DAMAGED") && strings.Contains(raw, "osd.1:") && strings.Contains(raw, "cairn osd out N")
	})
	if !strings.Contains(logSince(victim.Log, 0), "every block of the index verified") {
		t.Errorf("the index check never passed on the intact index:\n%s", logSince(victim.Log, 0))
	}
}
