package powercut

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// at is the path of name on the mount as it is now (Dir changes at every
// remount).
func at(f *FS, name ...string) string {
	return filepath.Join(append([]string{f.Dir()}, name...)...)
}

func mount(t *testing.T) *FS {
	t.Helper()
	return ForTest(t, filepath.Join(t.TempDir(), "disk"), Options{})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func syncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	must(t, f.Sync())
}

// writeDurable writes a file and makes it and its name durable.
func writeDurable(t *testing.T, p string, data []byte) {
	t.Helper()
	must(t, os.WriteFile(p, data, 0o644))
	syncPath(t, p)
	syncPath(t, filepath.Dir(p))
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return b
}

func cut(t *testing.T, f *FS) {
	t.Helper()
	must(t, f.Cut())
	must(t, f.Remount())
}

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(seed))).Read(b)
	return b
}

func TestUnsyncedWriteIsLost(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "a") }
	writeDurable(t, P(), []byte("durable"))
	must(t, os.WriteFile(P(), []byte("volatile, longer"), 0o644))
	if got := readFile(t, P()); string(got) != "volatile, longer" {
		t.Fatalf("live read %q", got)
	}
	cut(t, f)
	if got := readFile(t, P()); string(got) != "durable" {
		t.Fatalf("after the cut %q, want the synced content", got)
	}
	if got := readFile(t, filepath.Join(f.Backing(), "a")); string(got) != "durable" {
		t.Fatalf("backing directory holds %q", got)
	}
}

func TestFsyncKeeps(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "a") }
	writeDurable(t, P(), []byte("one"))
	fh, err := os.OpenFile(P(), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = fh.Write([]byte(" two"))
	must(t, err)
	must(t, fh.Sync())
	fh.Close()
	cut(t, f)
	if got := readFile(t, P()); string(got) != "one two" {
		t.Fatalf("after the cut %q", got)
	}
}

// A new file's fsync makes its data durable but not its name: that takes
// the directory's fsync (ext4 would keep the name as a side effect of its
// journal commit; this filesystem does not, so a program that forgets the
// directory sync fails here).
func TestNewFileNeedsDirSync(t *testing.T) {
	f := mount(t)
	must(t, os.Mkdir(at(f, "d"), 0o755))
	syncPath(t, at(f))
	P := func() string { return at(f, "d", "new") }
	must(t, os.WriteFile(P(), []byte("data"), 0o644))
	syncPath(t, P())
	cut(t, f)
	if _, err := os.Stat(P()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file whose directory was never synced survived: %v", err)
	}
	must(t, os.WriteFile(P(), []byte("data"), 0o644))
	syncPath(t, P())
	syncPath(t, filepath.Dir(P()))
	cut(t, f)
	if got := readFile(t, P()); string(got) != "data" {
		t.Fatalf("synced file and directory: %q", got)
	}
	// A directory synced before its file: the name survives, the data
	// not.
	Q := func() string { return at(f, "d", "q") }
	must(t, os.WriteFile(Q(), []byte("data"), 0o644))
	syncPath(t, filepath.Dir(Q()))
	cut(t, f)
	if got := readFile(t, Q()); len(got) != 0 {
		t.Fatalf("unsynced data of a file whose name is durable: %q", got)
	}
	// A new directory's entries are lost with it unless its parent is
	// synced too.
	must(t, os.MkdirAll(at(f, "x", "y"), 0o755))
	writeDurable(t, at(f, "x", "y", "z"), []byte("z"))
	syncPath(t, at(f, "x"))
	cut(t, f)
	if _, err := os.Stat(at(f, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory whose parent was never synced survived: %v", err)
	}
}

func TestRenameNeedsDirSync(t *testing.T) {
	f := mount(t)
	P, TMP := func() string { return at(f, "a") }, func() string { return at(f, "a.tmp") }
	writeDurable(t, P(), []byte("old"))
	must(t, os.WriteFile(TMP(), []byte("new"), 0o644))
	syncPath(t, TMP())
	must(t, os.Rename(TMP(), P()))
	cut(t, f)
	if got := readFile(t, P()); string(got) != "old" {
		t.Fatalf("rename without a directory sync survived: %q", got)
	}
	if _, err := os.Stat(TMP()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary name came back: %v", err)
	}
	must(t, os.WriteFile(TMP(), []byte("new"), 0o644))
	syncPath(t, TMP())
	must(t, os.Rename(TMP(), P()))
	syncPath(t, at(f))
	cut(t, f)
	if got := readFile(t, P()); string(got) != "new" {
		t.Fatalf("synced rename: %q", got)
	}
	// Unlink without a directory sync: the file comes back.
	must(t, os.Remove(P()))
	cut(t, f)
	if got := readFile(t, P()); string(got) != "new" {
		t.Fatalf("unsynced unlink: %q", got)
	}
	// A rename across directories is atomic: syncing either directory
	// persists both ends.
	must(t, os.Mkdir(at(f, "d"), 0o755))
	syncPath(t, at(f))
	must(t, os.Rename(P(), at(f, "d", "b")))
	syncPath(t, at(f))
	cut(t, f)
	if _, err := os.Stat(P()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name of a synced rename: %v", err)
	}
	if got := readFile(t, at(f, "d", "b")); string(got) != "new" {
		t.Fatalf("the new name of a synced rename: %q", got)
	}
}

// alignedBuf returns n bytes at a 4 KiB-aligned address, as O_DIRECT wants.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)) % 4096
	return b[off : off+n]
}

func TestDirectIO(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "data") }
	writeDurable(t, P(), make([]byte, 64<<10))
	fd, err := unix.Open(P(), unix.O_RDWR|unix.O_DIRECT, 0)
	must(t, err)
	defer unix.Close(fd)
	buf := alignedBuf(16 << 10)
	copy(buf, pattern(1, len(buf)))
	// Fresh extent, preallocated as objstore does.
	must(t, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 64<<10, 16<<10))
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, buf, 64<<10); err != nil {
		t.Fatal(err)
	}
	st := f.Stats()
	if st.DirectOpens == 0 || st.DirectWrites < 2 {
		t.Fatalf("O_DIRECT did not reach the filesystem: %+v", st)
	}
	got := alignedBuf(16 << 10)
	if _, err := unix.Pread(fd, got, 64<<10); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("O_DIRECT read back: %v", err)
	}
	unix.Close(fd)
	cut(t, f)
	if got := readFile(t, P()); !bytes.Equal(got, make([]byte, 64<<10)) {
		t.Fatalf("O_DIRECT writes without fdatasync survived the cut (%d bytes)", len(got))
	}

	// fdatasync, RWF_DSYNC and O_DSYNC each make them durable.
	fd, err = unix.Open(P(), unix.O_RDWR|unix.O_DIRECT, 0)
	must(t, err)
	_, err = unix.Pwrite(fd, buf, 0)
	must(t, err)
	must(t, unix.Fdatasync(fd))
	_, err = unix.Pwritev2(fd, [][]byte{buf}, 16<<10, unix.RWF_DSYNC)
	must(t, err)
	fd2, err := unix.Open(P(), unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC, 0)
	must(t, err)
	_, err = unix.Pwrite(fd2, buf, 32<<10)
	must(t, err)
	unix.Close(fd2)
	_, err = unix.Pwrite(fd, buf, 48<<10) // not synced: lost
	must(t, err)
	if f.Stats().SyncWrites < 2 {
		t.Fatalf("RWF_DSYNC or O_DSYNC not seen: %+v", f.Stats())
	}
	cut(t, f)
	want := append(bytes.Repeat(buf, 3), make([]byte, 16<<10)...)
	if got := readFile(t, P()); !bytes.Equal(got, want) {
		t.Fatal("synced O_DIRECT writes lost, or the unsynced one kept")
	}
}

func TestPunchHoleAndPreallocate(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "data") }
	data := pattern(2, 64<<10)
	writeDurable(t, P(), data)
	fh, err := os.OpenFile(P(), os.O_RDWR, 0)
	must(t, err)
	must(t, unix.Fallocate(int(fh.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8192, 16384))
	must(t, unix.Fallocate(int(fh.Fd()), 0, 64<<10, 64<<10)) // extends the size
	want := append(append([]byte{}, data...), make([]byte, 64<<10)...)
	clear(want[8192 : 8192+16384])
	if got := readFile(t, P()); !bytes.Equal(got, want) {
		t.Fatal("live view of punch and preallocation wrong")
	}
	fh.Close()
	cut(t, f)
	if got := readFile(t, P()); !bytes.Equal(got, data) {
		t.Fatal("an unsynced punch or preallocation survived the cut")
	}
	fh, err = os.OpenFile(P(), os.O_RDWR, 0)
	must(t, err)
	must(t, unix.Fallocate(int(fh.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8192, 16384))
	must(t, unix.Fallocate(int(fh.Fd()), 0, 64<<10, 64<<10))
	must(t, fh.Sync())
	fh.Close()
	cut(t, f)
	if got := readFile(t, P()); !bytes.Equal(got, want) {
		t.Fatal("a synced punch or preallocation was lost")
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(f.Backing(), "data"), &st))
	if st.Blocks*512 > int64(len(want))-16384+4096 {
		t.Fatalf("the punched range is still allocated in the backing file: %d blocks", st.Blocks)
	}
}

// The kernel tells a FUSE filesystem nothing of syncfs(2), so syncfs on the
// mount makes nothing durable, as on any FUSE mount; SyncFS is how a test
// models it.
func TestSyncFS(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "a") }
	must(t, os.WriteFile(P(), []byte("x"), 0o644))
	d, err := os.Open(at(f))
	must(t, err)
	must(t, unix.Syncfs(int(d.Fd())))
	d.Close()
	cut(t, f)
	if _, err := os.Stat(P()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("syncfs made a FUSE file durable (the kernel now sends FUSE_SYNCFS? model it): %v", err)
	}
	must(t, os.WriteFile(P(), []byte("x"), 0o644))
	must(t, f.SyncFS())
	cut(t, f)
	if got := readFile(t, P()); string(got) != "x" {
		t.Fatalf("after SyncFS: %q", got)
	}
}

func TestDeadAfterCut(t *testing.T) {
	f := mount(t)
	P := func() string { return at(f, "a") }
	writeDurable(t, P(), []byte("x"))
	fh, err := os.OpenFile(P(), os.O_RDWR, 0)
	must(t, err)
	defer fh.Close()
	must(t, f.Cut())
	if _, err := fh.WriteAt([]byte("y"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after the cut: %v", err)
	}
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync after the cut: %v", err)
	}
	if err := os.WriteFile(at(f, "b"), nil, 0o644); err == nil {
		t.Fatal("create after the cut succeeded")
	}
	must(t, f.Remount())
	if got := readFile(t, P()); string(got) != "x" {
		t.Fatalf("after remount: %q", got)
	}
}

// harshRun writes 64 durable 4 KiB blocks, overwrites them all without a
// sync and cuts harshly with seed; it returns the old and new blocks and
// what survived.
func harshRun(t *testing.T, seed int64) (old, new, got []byte, rep CutReport) {
	f := mount(t)
	P := func() string { return at(f, "data") }
	old, new = pattern(3, 64*4096), pattern(4, 64*4096)
	writeDurable(t, P(), old)
	fh, err := os.OpenFile(P(), os.O_RDWR, 0)
	must(t, err)
	for i := 0; i < 64; i++ {
		_, err := fh.WriteAt(new[i*4096:(i+1)*4096], int64(i)*4096)
		must(t, err)
	}
	fh.Close()
	rep, err = f.CutHarsh(seed)
	must(t, err)
	must(t, f.Remount())
	return old, new, readFile(t, P()), rep
}

func TestHarshCutTearsAtSectors(t *testing.T) {
	seed := int64(rand.Uint32())
	t.Logf("seed %d", seed)
	old, new, got, rep := harshRun(t, seed)
	t.Logf("%+v", rep)
	if len(got) != len(old) {
		t.Fatalf("size %d", len(got))
	}
	var whole, none, torn int
	for b := 0; b < 64; b++ {
		n := 0
		for s := b * 8; s < b*8+8; s++ {
			sec := got[s*sector : (s+1)*sector]
			switch {
			case bytes.Equal(sec, new[s*sector:(s+1)*sector]):
				n++
			case !bytes.Equal(sec, old[s*sector:(s+1)*sector]):
				t.Fatalf("sector %d is neither old nor new: torn inside a sector", s)
			}
		}
		switch n {
		case 8:
			whole++
		case 0:
			none++
		default:
			torn++
		}
	}
	t.Logf("blocks: %d new, %d old, %d torn", whole, none, torn)
	if whole == 0 || none == 0 || torn == 0 {
		t.Fatalf("64 unsynced 4 KiB writes should land whole, not at all and torn (seed %d)", seed)
	}
	// The same seed gives the same disk.
	_, _, again, _ := harshRun(t, seed)
	if !bytes.Equal(got, again) {
		t.Fatalf("seed %d did not replay", seed)
	}
	_, _, other, _ := harshRun(t, seed+1)
	if bytes.Equal(got, other) {
		t.Fatal("another seed gave the same disk")
	}
}

// Metadata in a harsh cut: each directory with pending entries persists
// them all or none.
func TestHarshCutDirectories(t *testing.T) {
	kept := map[bool]int{}
	for seed := int64(0); seed < 8; seed++ {
		f := mount(t)
		P := func() string { return at(f, "a") }
		writeDurable(t, P(), []byte("old"))
		must(t, os.WriteFile(P()+".tmp", []byte("new"), 0o644))
		syncPath(t, P()+".tmp")
		must(t, os.Rename(P()+".tmp", P()))
		must(t, os.WriteFile(at(f, "b"), nil, 0o644))
		_, err := f.CutHarsh(seed)
		must(t, err)
		must(t, f.Remount())
		got := string(readFile(t, P()))
		_, errB := os.Stat(at(f, "b"))
		_, errTmp := os.Stat(P() + ".tmp")
		if errTmp == nil || (got == "new") != (errB == nil) || (got != "new" && got != "old") {
			t.Fatalf("seed %d: a=%q, b: %v, a.tmp: %v", seed, got, errB, errTmp)
		}
		kept[got == "new"]++
	}
	if kept[true] == 0 || kept[false] == 0 {
		t.Fatalf("8 seeds always gave the same outcome: %v", kept)
	}
}

// Past MaxVolatileBytes the files with the most volatile data are written
// back, as a page cache under pressure would: memory stays bounded, and what
// was written back survives a cut.
func TestVolatileBound(t *testing.T) {
	f := ForTest(t, filepath.Join(t.TempDir(), "disk"), Options{MaxVolatileBytes: 1 << 20})
	data := pattern(5, 3<<20)
	must(t, os.WriteFile(at(f, "big"), data, 0o644))
	syncPath(t, at(f))
	if f.Stats().ForcedWritebacks == 0 {
		t.Fatal("3 MiB of unsynced writes under a 1 MiB bound forced no writeback")
	}
	cut(t, f)
	got := readFile(t, at(f, "big"))
	if len(got) == 0 || len(got) >= len(data) || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("after the cut %d bytes: want a prefix written back, not all of it", len(got))
	}
}
