package powercut

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Options configure a mount.
type Options struct {
	// MaxVolatileBytes bounds the data held in the volatile layer
	// (default 256 MiB). Past it the files with the most volatile data
	// are written back (made durable), as a page cache under memory
	// pressure and a full disk cache do; Stats counts it.
	MaxVolatileBytes int64
	// Logf, if set, receives the seed of every harsh cut and errors
	// the filesystem met on its backing directory.
	Logf func(format string, args ...any)
	// Debug logs every FUSE request.
	Debug bool
}

// Stats count what reached the filesystem since it was mounted (across
// remounts).
type Stats struct {
	Writes, DirectWrites, SyncWrites int64 // WRITE requests; of O_DIRECT handles; with O_SYNC/O_DSYNC
	DirectOpens                      int64 // opens with O_DIRECT
	Fsyncs, DirSyncs, SyncFSs        int64 // FSYNC, FSYNCDIR, SyncFS calls
	Punches, Allocs, Truncates       int64 // PUNCH_HOLE or ZERO_RANGE, preallocations, size changes
	ForcedWritebacks                 int64 // files made durable because the volatile layer was full
	Cuts                             int64
	Errors                           int64 // failed operations on the backing directory
}

// FS is a mounted power-cut filesystem.
type FS struct {
	backing, stage string
	mnt0, mnt      string // the first mount point, and the current one
	gen            int    // mounts so far
	opts           Options

	mu    sync.Mutex
	raw   *raw
	srv   *fuse.Server
	conn  uint32 // the FUSE connection's number (fusectl), 0 if unknown
	stats Stats
	cut   bool
}

// Available reports why FUSE mounts cannot work here, nil if they can.
func Available() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("powercut: no /dev/fuse (%v): the power-cut filesystem needs FUSE (apt-get install fuse3, and a kernel with FUSE)", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return fmt.Errorf("powercut: no fusermount3 in PATH: apt-get install fuse3")
	}
	return nil
}

// Mount mounts the power-cut filesystem of backing (a directory, whose
// content is the durable state) at mountpoint (an empty directory).
func Mount(backing, mountpoint string, o Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.MaxVolatileBytes <= 0 {
		o.MaxVolatileBytes = 256 << 20
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	f := &FS{
		backing: backing,
		mnt0:    mountpoint,
		stage:   filepath.Join(filepath.Dir(backing), "."+filepath.Base(backing)+".powercut-stage"),
		opts:    o,
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FS) mount() error {
	mnt := f.mnt0
	if f.gen > 0 {
		mnt = fmt.Sprintf("%s-%d", f.mnt0, f.gen)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			return fmt.Errorf("powercut: %w", err)
		}
	}
	f.gen++
	st, err := newState(f.backing, f.stage, f.opts.MaxVolatileBytes, &f.stats)
	if err != nil {
		return fmt.Errorf("powercut: load %s: %w", f.backing, err)
	}
	f.mu.Lock()
	f.raw = &raw{RawFileSystem: fuse.NewDefaultRawFileSystem(), fs: f, st: st, handles: map[uint64]*handle{}}
	f.cut = false
	f.mnt = mnt
	f.mu.Unlock()
	srv, err := fuse.NewServer(f.raw, f.mnt, &fuse.MountOptions{
		FsName:             "powercut:" + f.backing,
		Name:               "powercut",
		DirectMount:        os.Geteuid() == 0,
		DisableReadDirPlus: true,
		DisableXAttrs:      true,
		MaxWrite:           1 << 20,
		Debug:              f.opts.Debug,
	})
	if err != nil {
		st.close()
		return fmt.Errorf("powercut: mount %s: %w", f.mnt, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return fmt.Errorf("powercut: mount %s: %w", f.mnt, err)
	}
	f.srv = srv
	var sb unix.Stat_t
	if unix.Stat(f.mnt, &sb) == nil {
		f.conn = unix.Minor(sb.Dev)
	}
	return nil
}

// fusectl is where the kernel lists FUSE connections, and lets one be
// aborted.
const fusectl = "/sys/fs/fuse/connections"

// abort ends FUSE connection conn: every request on it fails from then on,
// without its server. A mount detached while a program still holds files
// on it needs this, or the program's exit (which flushes those files)
// waits forever for a server that has exited with it.
func abort(conn uint32) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(fusectl, &sfs); err != nil {
		return err
	}
	if sfs.Type != 0x65735543 { // FUSE_CTL_SUPER_MAGIC: not mounted yet
		if err := unix.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(fusectl, fmt.Sprint(conn), "abort"), []byte("1"), 0)
}

// Dir is the mount point. It changes at every Remount (a sibling of the
// first one, numbered), and the old one is removed: a program left running
// on the dead mount cannot reach the new one by its paths.
func (f *FS) Dir() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mnt
}

// Backing is the backing directory: the durable state.
func (f *FS) Backing() string { return f.backing }

// Stats returns the counters so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *FS) logf(format string, args ...any) {
	if f.opts.Logf != nil {
		f.opts.Logf(format, args...)
	}
}

// SyncFS makes everything durable, as syncfs(2) on a disk filesystem does.
// The kernel sends a FUSE filesystem nothing for syncfs(2) or sync(2)
// (FUSE_SYNCFS goes to virtiofs servers only), so on this mount, as on
// every FUSE mount, syncfs itself makes nothing durable: a test of a
// program that relies on syncfs calls SyncFS when the program calls
// syncfs (before it, as syncfs persists what was written before the call).
func (f *FS) SyncFS() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raw.st == nil {
		return syscall.EIO
	}
	f.stats.SyncFSs++
	return f.raw.st.syncAll()
}

// Cut cuts the power: everything volatile is lost, the backing directory
// holds exactly the durable state, and the mount answers every request
// with EIO until Remount.
func (f *FS) Cut() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.raw.st
	if st == nil {
		return errors.New("powercut: the power is already cut")
	}
	f.raw.st, f.cut = nil, true
	f.stats.Cuts++
	return st.cut()
}

// CutHarsh cuts the power as Cut does, but first lets a random part of the
// volatile state reach the disk (see the package doc), chosen by seed, which
// it logs so a failure replays.
func (f *FS) CutHarsh(seed int64) (CutReport, error) {
	f.logf("powercut: harsh cut with seed %d", seed)
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.raw.st
	if st == nil {
		return CutReport{}, errors.New("powercut: the power is already cut")
	}
	f.raw.st, f.cut = nil, true
	f.stats.Cuts++
	return st.cutHarsh(seed)
}

// Remount brings the disk back: the mount is replaced by a new one of the
// surviving state, at a new Dir. Without a cut before, it is a clean
// unmount (everything becomes durable) and mount. Files still open on the
// old mount keep failing (EIO, then ENOTCONN).
func (f *FS) Remount() error {
	if err := f.unmount(); err != nil {
		return err
	}
	return f.mount()
}

// Unmount unmounts cleanly: everything volatile becomes durable first
// (unless the power was cut), as umount writes everything back.
func (f *FS) Unmount() error {
	return f.unmount()
}

func (f *FS) unmount() error {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	var err error
	if st := f.raw.st; st != nil {
		err = st.syncAll()
		st.close()
		os.RemoveAll(st.stage)
		f.raw.st = nil
	}
	f.mu.Unlock()
	if srv == nil {
		return err
	}
	defer func() {
		if f.mnt != f.mnt0 {
			os.Remove(f.mnt)
		}
	}()
	if e := syscall.Unmount(f.mnt, 0); e != nil {
		// Busy (a program still holds files): detach. The old
		// connection answers EIO until its files are closed, then
		// its server ends.
		if e = syscall.Unmount(f.mnt, syscall.MNT_DETACH); e != nil {
			if out, e2 := exec.Command("fusermount3", "-u", "-z", f.mnt).CombinedOutput(); e2 != nil {
				return fmt.Errorf("powercut: unmount %s: %v, %s", f.mnt, e, out)
			}
		}
		if e := abort(f.conn); e != nil {
			f.logf("powercut: abort the detached mount of %s: %v (files still open on it will hang this process's exit)", f.mnt, e)
			return err
		}
	}
	srv.Wait()
	return err
}

// ForTest mounts a power-cut filesystem over backing (created if missing)
// on a fresh mount point for the test, and unmounts it (lazily, if busy)
// when the test ends, even if it fails. The test fails at once, saying what
// to install, where FUSE is not available.
func ForTest(t testing.TB, backing string, o Options) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	f, err := Mount(backing, mnt, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.opts.Logf = nil // the test is over
		if err := f.Unmount(); err != nil && !f.cut {
			t.Errorf("powercut: unmount: %v", err)
		}
	})
	return f
}
