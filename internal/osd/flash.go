package osd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// flashNone, given as --flash-device, says the meta dir shares no device
// with other OSDs' indexes whatever detection finds.
const flashNone = "none"

// resolveFlash is the OSD's clustermap.OSD.Flash: the operator's name for
// its meta device, or the one detectFlash finds.
func resolveFlash(given, metaDir, dataDir string) string {
	switch given {
	case flashNone:
		return ""
	case "":
		return detectFlash("/sys", metaDir, dataDir)
	}
	return given
}

// detectFlash names the block device holding metaDir when it is not the one
// holding dataDir: the whole disk (a partition's parent, the one disk under
// a device-mapper or md device), by its WWID or serial number where the
// kernel knows one, so that a reboot that renames disks moves no data. It
// returns "" when both are on one device or the device has no name in sys
// (tmpfs, overlay): such an OSD is its own failure domain.
func detectFlash(sys, metaDir, dataDir string) string {
	var ms, ds unix.Stat_t
	if metaDir == "" || statUp(metaDir, &ms) != nil || statUp(dataDir, &ds) != nil || ms.Dev == ds.Dev {
		return ""
	}
	return diskName(sys, unix.Major(uint64(ms.Dev)), unix.Minor(uint64(ms.Dev)))
}

// diskName is deviceName of the disk under block device major:minor, or ""
// for an anonymous device (major 0) or one sys does not know.
func diskName(sys string, major, minor uint32) string {
	if major == 0 {
		return ""
	}
	num := strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10)
	dir, err := filepath.EvalSymlinks(filepath.Join(sys, "dev", "block", num))
	if err != nil {
		return ""
	}
	return deviceName(wholeDisk(sys, dir))
}

// statUp stats dir or, before the OSD first creates it, its nearest
// existing parent: the filesystem it will be made on.
func statUp(dir string, st *unix.Stat_t) error {
	dir = filepath.Clean(dir)
	for {
		err := unix.Stat(dir, st)
		if err == nil || dir == filepath.Dir(dir) {
			return err
		}
		dir = filepath.Dir(dir)
	}
}

// wholeDisk walks from a block device's sys dir to the disk under it:
// a partition's parent, a stacked device's only lower device.
func wholeDisk(sys, dir string) string {
	for range 4 { // dm on md on a partition is as deep as it gets
		if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
			dir = filepath.Dir(dir)
			continue
		}
		lower, _ := os.ReadDir(filepath.Join(dir, "slaves"))
		if len(lower) != 1 {
			return dir
		}
		next, err := filepath.EvalSymlinks(filepath.Join(sys, "class", "block", lower[0].Name()))
		if err != nil {
			return dir
		}
		dir = next
	}
	return dir
}

// deviceName is a disk's stable name: its WWID or serial, else its kernel
// name, cut to what the map accepts.
func deviceName(dir string) string {
	name := filepath.Base(dir)
	for _, f := range []string{"wwid", "device/wwid", "serial", "device/serial"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			name = strings.TrimSpace(string(b))
			break
		}
	}
	clean := []byte(name)
	for i, c := range clean {
		if c <= ' ' || c > '~' || c == '/' {
			clean[i] = '_'
		}
	}
	return string(clean[:min(len(clean), clustermap.MaxFlashLen)])
}
