package osd

import (
	"os"
	"path/filepath"
	"testing"
)

// fakeSys builds the parts of /sys that diskName reads: a partition of an
// NVMe disk with a serial, a device-mapper volume on one SCSI disk with a
// WWID, and a loop device with neither.
func fakeSys(t *testing.T) string {
	sys := t.TempDir()
	mk := func(rel, file, body string) {
		t.Helper()
		dir := filepath.Join(sys, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if file != "" {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := func(target, rel string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(sys, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(sys, target), filepath.Join(sys, rel)); err != nil {
			t.Fatal(err)
		}
	}
	mk("devices/pci0/nvme/nvme0n1", "serial", "S4EW NX0/1\n")
	mk("devices/pci0/nvme/nvme0n1/nvme0n1p2", "partition", "2\n")
	link("devices/pci0/nvme/nvme0n1/nvme0n1p2", "dev/block/259:2")
	mk("devices/pci0/scsi/sdb/device", "wwid", "naa.5000c500a1b2c3d4\n")
	link("devices/pci0/scsi/sdb", "class/block/sdb")
	mk("devices/virtual/block/dm-0/slaves/sdb", "", "")
	link("devices/virtual/block/dm-0", "dev/block/253:0")
	mk("devices/virtual/block/loop3", "", "")
	link("devices/virtual/block/loop3", "dev/block/7:3")
	return sys
}

func TestDiskName(t *testing.T) {
	sys := fakeSys(t)
	for _, c := range []struct {
		major, minor uint32
		want         string
	}{
		{259, 2, "S4EW_NX0_1"},           // a partition: its disk's serial, cleaned
		{253, 0, "naa.5000c500a1b2c3d4"}, // device-mapper over one disk: that disk
		{7, 3, "loop3"},                  // no serial: the kernel name
		{0, 41, ""},                      // anonymous (tmpfs, overlay)
		{8, 99, ""},                      // unknown to sys
	} {
		if got := diskName(sys, c.major, c.minor); got != c.want {
			t.Errorf("diskName(%d:%d) = %q, want %q", c.major, c.minor, got, c.want)
		}
	}
}

// Two dirs of one filesystem have no flash device of their own; the
// operator's name wins over detection, and "none" turns it off.
func TestResolveFlash(t *testing.T) {
	dir := t.TempDir()
	meta := filepath.Join(dir, "meta")
	if err := os.Mkdir(meta, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := resolveFlash("", meta, dir); got != "" {
		t.Fatalf("meta dir on the data dir's device: flash %q, want none", got)
	}
	if got := resolveFlash("nvme-a", meta, dir); got != "nvme-a" {
		t.Fatalf("given name: %q", got)
	}
	if got := resolveFlash(flashNone, meta, dir); got != "" {
		t.Fatalf("none: %q", got)
	}
	if _, err := os.Stat("/dev/shm"); err == nil {
		if got := resolveFlash("", "/dev/shm", dir); got != "" {
			t.Fatalf("tmpfs meta dir: flash %q, want none (no block device)", got)
		}
	}
}
