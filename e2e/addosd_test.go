package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAddOSDWithMetaDirAndClass adds an OSD by hand: no --id (it gets the
// next one), its journal and index on a separate --meta-dir (as on an NVMe
// device), device class nvme, on a fourth host. A pool restricted to class
// nvme places every object on it, and its index lives in the meta dir while
// the bulk data lives in the data dir.
func TestAddOSDWithMetaDirAndClass(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	dir := t.TempDir()
	data, metaDir := filepath.Join(dir, "hdd"), filepath.Join(dir, "nvme")
	startOSDProcess(t, c, dir, "127.0.0.4", "--data", data, "--meta-dir", metaDir, "--host", "host4", "--class", "nvme")
	c.waitStatus(30*time.Second, "osd.6 up", func(st map[string]any, raw string) bool {
		return st["osds"] == float64(7) && st["osds_up"] == float64(7)
	})
	tree, err := c.cli(nil, "osd", "tree")
	if err != nil || !strings.Contains(string(tree), "host host4") || !strings.Contains(string(tree), "6   nvme") {
		t.Fatalf("osd tree should show osd.6, class nvme, on host4: %v\n%s", err, tree)
	}
	if _, err := c.cli(nil, "pool", "create", "fast", "--size", "1", "--class", "nvme", "--pg-num", "8"); err != nil {
		t.Fatal(err)
	}
	// A class with too few hosts is refused, naming the class.
	if _, err := c.cli(nil, "pool", "create", "fast2", "--size", "2", "--class", "nvme"); err == nil || !strings.Contains(err.Error(), "of class nvme") {
		t.Fatalf("size 2 on one nvme host: want a refusal naming the class, got %v", err)
	}
	p := c.pool("fast")
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("f%02d", i)
		if err := p.Put(ctx, name, payload(name, 0, 100<<10+i)); err != nil {
			t.Fatal(err)
		}
		if acting := actingOf(t, c, "fast", name); len(acting) != 1 || acting[0] != 6 {
			t.Fatalf("%s placed on %v, want only osd.6 (the one nvme OSD)", name, acting)
		}
	}
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("f%02d", i)
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, payload(name, 0, 100<<10+i)) {
			t.Fatalf("read %s from the nvme OSD: %v", name, err)
		}
	}
	// The index and journal are in the meta dir; the data files in the data dir.
	if ents, _ := filepath.Glob(filepath.Join(metaDir, "MANIFEST-*")); len(ents) == 0 {
		t.Errorf("no index (pebble MANIFEST) in --meta-dir %s", metaDir)
	}
	if ents, _ := filepath.Glob(filepath.Join(data, "MANIFEST-*")); len(ents) != 0 {
		t.Errorf("the index is in the data dir %s, not the meta dir", data)
	}
	if dataFiles := countDataFiles(filepath.Join(data, "data"), 100<<10); dataFiles != 20 {
		t.Errorf("found %d object data files under %s, want 20", dataFiles, data)
	}
}

// startOSDProcess starts `cairn osd` with args on a free port of ip, its log
// in dir/osd.log, stopped when the test ends.
func startOSDProcess(t *testing.T, c *cluster, dir, ip string, args ...string) {
	t.Helper()
	port := freePorts(t, 1)
	logf, err := os.Create(filepath.Join(dir, "osd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args = append([]string{"osd", "--conf", c.conf, "--listen", fmt.Sprintf("%s:%d", ip, port), "--lease-ttl", "3s"}, args...)
	cmd := exec.Command(cairnBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
}
