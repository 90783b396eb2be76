package objstore

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A checkpoint makes the deferred writes of the last interval durable in
// their data files. Random 4 KiB writes to a volume touch hundreds of files
// an interval, and one fdatasync per file cost an OSD much of its CPU
// under 4 KiB NBD writes: each wrote the file's changed extent blocks and
// inode one synchronous write at a time, and each ended in a cache flush of
// the disk. From syncfsMinFiles files on, a checkpoint syncs the whole
// filesystem of Dir instead (syncfs): the data of every file is written
// back at once and the metadata in one pass, and the disk is flushed once.
// An OSD owns its disk, so this writes back nothing it would not write
// anyway; where OSDs share a filesystem (a dev cluster), each one's syncfs
// also writes back the others' deferred writes a little sooner.
//
// syncfs alone is not enough on every filesystem: ext4 without a journal
// writes the metadata that writeback changed (the blocks it allocated for
// deferred writes into holes) after its cache flush, so a power cut could
// lose it. A
// fdatasync of the store's directory afterwards flushes the disk's cache
// once more; on a journaling filesystem it costs little.
//
// On some filesystems syncfs makes nothing durable: the kernel sends a FUSE
// filesystem no request for it (FUSE_SYNCFS goes to virtiofs servers only),
// so a FUSE server never learns that the data it holds must reach its disk.
// A store there syncs each file, always (syncfsForwarded).
const syncfsMinFiles = 4

// fuseSuperMagic is statfs's f_type of every FUSE filesystem (fuse and
// fuseblk alike).
const fuseSuperMagic = 0x65735546

// syncfsForwarded reports whether syncfs(2) on the filesystem of dir makes
// its files durable: not on FUSE, whose servers never hear of it.
func syncfsForwarded(dir string) (bool, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return false, fmt.Errorf("objstore: statfs %s: %w", dir, err)
	}
	return uint32(sfs.Type) != fuseSuperMagic, nil
}

// fsSyncer syncs the filesystem that holds a store's data files.
type fsSyncer struct {
	dir *os.File // any file on the filesystem; its descriptor names it to syncfs
}

// openFSSyncer returns nil where syncfs would make nothing durable
// (syncfsForwarded): checkpoints there sync each file.
func openFSSyncer(dir string) (*fsSyncer, error) {
	ok, err := syncfsForwarded(dir)
	if err != nil || !ok {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("objstore: open %s to sync its filesystem: %w", dir, err)
	}
	return &fsSyncer{dir: d}, nil
}

// sync returns once every write to the filesystem before the call is
// durable. Since Linux 5.8 syncfs also reports a writeback error of any
// file since the directory was opened, as fdatasync would have for its own.
func (f *fsSyncer) sync() error {
	fd := int(f.dir.Fd())
	if injectIO != nil {
		if err := injectIO(ioSyncFS, f.dir.Name()); err != nil {
			return fmt.Errorf("objstore: syncfs of %s: %w", f.dir.Name(), err)
		}
	}
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("objstore: syncfs of %s: %w", f.dir.Name(), err)
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("objstore: sync of %s after syncfs: %w", f.dir.Name(), err)
	}
	return nil
}

func (f *fsSyncer) close() { _ = f.dir.Close() }
