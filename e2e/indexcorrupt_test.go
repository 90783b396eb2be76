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
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	p := c.pool("default")
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("o%02d", i)
		if err := p.Put(ctx, name, payload(name, 0, 1000+i*3000)); err != nil {
			t.Fatal(err)
		}
	}
	victim := c.procs["osd.1"]
	c.kill("osd.1")
	files := flipIndexBytes(t, filepath.Join(victim.Data, "meta"), 20)
	logStart := fileSize(victim.Log)

	c.restart("osd.1")
	cmd := c.extra[len(c.extra)-1]
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("osd.1 on a damaged index exited without an error")
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("osd.1 on a damaged index still runs after 60 s:\n%s", logSince(victim.Log, logStart))
	}
	c.extra = c.extra[:len(c.extra)-1]
	log := logSince(victim.Log, logStart)
	t.Logf("osd.1 on its damaged index:\n%s", log)
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
