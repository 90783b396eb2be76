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

// TestSharedFlashKeepsCopiesApart adds two nvme OSDs on host4 whose indexes
// share one flash device (--flash-device) and one on host5 with its own. A
// 2-copy pool of class nvme at failure domain osd then has two domains,
// not three: every object has a copy on osd.8 and one on osd.6 or osd.7,
// never both of those (losing the flash device would lose both copies);
// a third copy is refused, and osd tree names the device.
func TestSharedFlashKeepsCopiesApart(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	dirs := make([]string, 3)
	for i, host := range []string{"host4", "host4", "host5"} {
		dirs[i] = t.TempDir()
		args := []string{"--data", filepath.Join(dirs[i], "data"), "--meta-dir", filepath.Join(dirs[i], "meta"), "--host", host, "--class", "nvme"}
		if host == "host4" {
			args = append(args, "--flash-device", "nvme-shared")
		}
		startOSDProcess(t, c, dirs[i], fmt.Sprintf("127.0.0.%d", 4+i), args...)
		c.waitStatus(30*time.Second, fmt.Sprintf("osd.%d up", 6+i), func(st map[string]any, raw string) bool {
			return st["osds_up"] == float64(7+i)
		})
	}
	tree, err := c.cli(nil, "osd", "tree")
	if err != nil || strings.Count(string(tree), "nvme-shared") != 2 {
		t.Fatalf("osd tree should name the flash device of osd.6 and osd.7: %v\n%s", err, tree)
	}
	if _, err := c.cli(nil, "pool", "create", "fast3", "--size", "3", "--class", "nvme", "--failure-domain", "osd"); err == nil || !strings.Contains(err.Error(), "flash device") {
		t.Fatalf("3 copies over 2 flash domains: want a refusal naming the shared flash device, got %v", err)
	}
	if _, err := c.cli(nil, "pool", "create", "fast", "--size", "2", "--class", "nvme", "--failure-domain", "osd", "--pg-num", "16"); err != nil {
		t.Fatal(err)
	}
	p := c.pool("fast")
	const objects = 24
	for i := range objects {
		name := fmt.Sprintf("f%02d", i)
		if err := p.Put(context.Background(), name, payload(name, 0, 100<<10+i)); err != nil {
			t.Fatal(err)
		}
	}
	held := make([]int, 3)
	for i, d := range dirs {
		held[i] = countDataFiles(filepath.Join(d, "data", "data"), 100<<10)
	}
	if held[2] != objects || held[0]+held[1] != objects {
		t.Fatalf("data files on osd.6, osd.7, osd.8: %v; want osd.8 to hold all %d and osd.6 and osd.7 one copy between them", held, objects)
	}
	if held[0] == 0 || held[1] == 0 {
		t.Fatalf("data files on osd.6, osd.7: %v; want both to take a share", held[:2])
	}
	for i := range objects {
		name := fmt.Sprintf("f%02d", i)
		if got, err := p.Get(context.Background(), name); err != nil || !bytes.Equal(got, payload(name, 0, 100<<10+i)) {
			t.Fatalf("read %s: %v", name, err)
		}
	}
}

// countDataFiles counts the regular files of at least min bytes under dir.
func countDataFiles(dir string, min int64) int {
	n := 0
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() >= min {
			n++
		}
		return nil
	})
	return n
}
