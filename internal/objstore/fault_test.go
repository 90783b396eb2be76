package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func flipByte(t *testing.T, fs vfs.FS, path string, off int64) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := pattern(1, 1<<20)
	other := pattern(2, 200<<10)
	apply(t, s, func(tx *Txn) {
		tx.Put("c", "victim", big)
		tx.Put("c", "other", other)
		tx.Put("c", "small", []byte("inline data"))
	})
	path, ok := s.DataPath("c", "victim")
	if !ok {
		t.Fatal("no data path")
	}
	flipByte(t, s.fs, path, 5*blockSize+17)

	got, err := s.Read("c", "victim", 0, 0)
	if !IsCorruption(err) || got != nil {
		t.Fatalf("corrupt read returned %d bytes, err %v", len(got), err)
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != 5*blockSize || ce.Name != "victim" || ce.Coll != "c" {
		t.Fatalf("corruption error %+v", ce)
	}
	if _, err := s.Read("c", "victim", 5*blockSize+100, 10); !IsCorruption(err) {
		t.Fatalf("small read of bad block: %v", err)
	}
	// Blocks around the damage and other objects still read.
	if b := mustRead(t, s, "c", "victim", 0, 5*blockSize); !bytes.Equal(b, big[:5*blockSize]) {
		t.Fatal("good prefix mismatch")
	}
	if b := mustRead(t, s, "c", "other", 0, 0); !bytes.Equal(b, other) {
		t.Fatal("other object mismatch")
	}
	// A partial overwrite must not launder the bad block with a fresh checksum.
	var tx Txn
	tx.Write("c", "victim", 5*blockSize+1, []byte("x"))
	if err := s.Apply(&tx); !IsCorruption(err) {
		t.Fatalf("read-modify-write over corrupt block: %v", err)
	}
	// A full-block overwrite repairs it (what recovery from a replica does).
	apply(t, s, func(tx *Txn) { tx.Write("c", "victim", 5*blockSize, big[5*blockSize:6*blockSize]) })
	if b := mustRead(t, s, "c", "victim", 0, 0); !bytes.Equal(b, big) {
		t.Fatal("repaired object mismatch")
	}

	// Inline data is checksummed too: damage the record inside pebble.
	damageInline(t, s, "c", "small")
	if _, err := s.Read("c", "small", 0, 0); !IsCorruption(err) {
		t.Fatalf("inline corruption: %v", err)
	}
	var tx2 Txn
	tx2.Write("c", "small", 0, []byte("I"))
	if err := s.Apply(&tx2); !IsCorruption(err) {
		t.Fatalf("partial write over corrupt inline data: %v", err)
	}
	// Repair by replacing the whole object, as recovery from a replica does.
	apply(t, s, func(tx *Txn) { tx.Put("c", "small", []byte("inline data")) })
	if b := mustRead(t, s, "c", "small", 0, 0); string(b) != "inline data" {
		t.Fatalf("repaired inline object: %q", b)
	}
	flipByte(t, s.fs, path, 7*blockSize)
	apply(t, s, func(tx *Txn) { tx.Put("c", "victim", big) })
	if b := mustRead(t, s, "c", "victim", 0, 0); !bytes.Equal(b, big) {
		t.Fatal("object replaced by put still bad")
	}
	if IsCorruption(ErrNotFound) || IsCorruption(fmt.Errorf("x: %w", ErrNoSpace)) {
		t.Fatal("IsCorruption too broad")
	}
}

func TestReserveNoSpace(t *testing.T) {
	old := spaceCacheValidity
	spaceCacheValidity = time.Hour
	defer func() { spaceCacheValidity = old }()
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 100 << 20})
	s, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	obj := pattern(1, 1<<20)
	var stored []string
	var lastErr error
	for i := 0; i < 10; i++ {
		var tx Txn
		tx.Put("c", fmt.Sprint(i), obj)
		if lastErr = s.Apply(&tx); lastErr != nil {
			break
		}
		stored = append(stored, fmt.Sprint(i))
	}
	if !errors.Is(lastErr, ErrNoSpace) || len(stored) == 0 || len(stored) > 3 {
		t.Fatalf("after %d puts: %v", len(stored), lastErr)
	}
	for _, n := range stored {
		if b := mustRead(t, s, "c", n, 0, 0); !bytes.Equal(b, obj) {
			t.Fatalf("object %s lost", n)
		}
	}
	if _, err := s.Stat("c", fmt.Sprint(len(stored))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused put left an object: %v", err)
	}
	// Deletions are admitted even when full.
	apply(t, s, func(tx *Txn) { tx.Delete("c", stored[0]) })
	u, err := s.Usage()
	if err != nil || u.TotalBytes != 100<<20 || u.FreeBytes != 10<<20 {
		t.Fatalf("usage %+v %v", u, err)
	}
}

// TestRealDiskFull fills a small tmpfs until the store refuses writes, then
// checks that nothing acknowledged was lost and that deleting makes room.
func TestRealDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := tmpfs(t, "24m") // without one, TestReserveNoSpace covers the reserve path
	old := spaceCacheValidity
	spaceCacheValidity = 0 // statfs every time: tmpfs is the real oracle here
	defer func() { spaceCacheValidity = old }()

	s, err := Open(Options{Dir: dir, ReserveBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stored []string
	var lastErr error
	for i := 0; i < 200; i++ {
		var tx Txn
		name := fmt.Sprint(i)
		tx.Put("c", name, pattern(i, 512<<10))
		tx.OmapSet("c", "index", []byte(name), nil)
		if lastErr = s.Apply(&tx); lastErr != nil {
			break
		}
		stored = append(stored, name)
	}
	if !errors.Is(lastErr, ErrNoSpace) {
		t.Fatalf("filling tmpfs ended with %v after %d objects", lastErr, len(stored))
	}
	t.Logf("disk full after %d objects: %v", len(stored), lastErr)
	// A small overwrite of an existing object is refused cleanly as well or succeeds; never corrupts.
	var tx Txn
	tx.Write("c", stored[0], 100, []byte("patch"))
	patched := s.Apply(&tx) == nil
	for i, n := range stored {
		want := pattern(i, 512<<10)
		if i == 0 && patched {
			copy(want[100:], "patch")
		}
		if b := mustRead(t, s, "c", n, 0, 0); !bytes.Equal(b, want) {
			t.Fatalf("object %s damaged after ENOSPC", n)
		}
	}
	for _, n := range stored[:len(stored)/2] {
		apply(t, s, func(tx *Txn) { tx.Delete("c", n) })
	}
	apply(t, s, func(tx *Txn) { tx.Put("c", "after", pattern(7, 512<<10)) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, ReserveBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if b := mustRead(t, s, "c", "after", 0, 0); !bytes.Equal(b, pattern(7, 512<<10)) {
		t.Fatal("object written after freeing space lost")
	}
	s.Close()
}

// TestRealENOSPC disables the reserve so a data-file write itself hits
// ENOSPC: the Apply must fail with ErrNoSpace and change nothing.
func TestRealENOSPC(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := tmpfs(t, "24m")
	// The index lives elsewhere, as on an OSD with a separate DB device,
	// so only the bulk data device fills up.
	s, err := Open(Options{Dir: dir, MetaDir: t.TempDir(), ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	var stored int
	var lastErr error
	for ; stored < 200; stored++ {
		var tx Txn
		tx.Put("c", fmt.Sprint(stored), pattern(stored, 1<<20))
		tx.SetXattr("c", "meta", fmt.Sprint(stored), []byte("x"))
		if lastErr = s.Apply(&tx); lastErr != nil {
			break
		}
	}
	if !errors.Is(lastErr, ErrNoSpace) {
		t.Fatalf("after %d objects: %v", stored, lastErr)
	}
	if _, err := s.Stat("c", fmt.Sprint(stored)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed put visible: %v", err)
	}
	if _, err := s.GetXattr("c", "meta", fmt.Sprint(stored)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed txn partly applied: %v", err)
	}
	// Filling a hole in an existing file needs new blocks: refused up front.
	apply(t, s, func(tx *Txn) { tx.Truncate("c", "0", 4<<20) })
	var tx Txn
	tx.Write("c", "0", 3<<20, pattern(99, 512<<10))
	if err := s.Apply(&tx); err != nil && !errors.Is(err, ErrNoSpace) {
		t.Fatalf("hole fill: %v", err)
	}
	// Small writes into holes are deferred, their fresh blocks written to
	// the page cache before the commit: with 1 MiB freed, some fit, and the
	// one that finds the disk full is refused and leaves its block a hole.
	stored--
	apply(t, s, func(tx *Txn) { tx.Delete("c", fmt.Sprint(stored)) })
	filled := 0
	for ; filled < 1024; filled++ {
		off := uint64(1<<20 + filled*8192)
		var tx Txn
		tx.Write("c", "0", off, pattern(1000+filled, 4096))
		err := s.Apply(&tx)
		if errors.Is(err, ErrNoSpace) {
			t.Logf("4 KiB write %d into a hole: %v", filled, err)
			// Neither the block filled nor the object extended.
			if b := mustRead(t, s, "c", "0", off, 4096); len(bytes.Trim(b, "\x00")) != 0 {
				t.Fatal("a refused 4 KiB write into a hole changed it")
			}
			if info, err := s.Stat("c", "0"); err != nil || info.Size >= off+4096 {
				t.Fatalf("a refused 4 KiB write at %d extended the object to %d (%v)", off, info.Size, err)
			}
			break
		}
		if err != nil {
			t.Fatalf("4 KiB write into a hole: %v", err)
		}
	}
	if filled == 1024 {
		t.Fatal("4 MiB of 4 KiB writes into holes fitted on a full disk")
	}
	for k := range filled {
		off := uint64(1<<20 + k*8192)
		if b := mustRead(t, s, "c", "0", off, 4096); !bytes.Equal(b, pattern(1000+k, 4096)) {
			t.Fatalf("4 KiB write %d into a hole lost", k)
		}
	}
	for i := 0; i < stored; i++ {
		if b := mustRead(t, s, "c", fmt.Sprint(i), 0, 1<<20); !bytes.Equal(b, pattern(i, 1<<20)) {
			t.Fatalf("object %d damaged", i)
		}
	}
	for i := 0; i < stored; i += 2 {
		apply(t, s, func(tx *Txn) { tx.Delete("c", fmt.Sprint(i)) })
	}
	s.rm.drain() // without a reserve no write waits for the removals
	apply(t, s, func(tx *Txn) { tx.Put("c", "after", pattern(7, 1<<20)) })
	s.Close()
	if s, err = Open(Options{Dir: dir, MetaDir: s.opts.MetaDir, ReserveBytes: -1}); err != nil {
		t.Fatal(err)
	}
	if b := mustRead(t, s, "c", "after", 0, 0); !bytes.Equal(b, pattern(7, 1<<20)) {
		t.Fatal("object written after freeing space lost")
	}
}

// TestCommitLogOnNearlyFullDisk opens a store whose disk has no room for
// log segments of the memtable's size (an old-format store upgraded on a
// nearly full OSD): it must open with smaller segments, keep what it holds
// through a reopen, and let space be freed.
func TestCommitLogOnNearlyFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := tmpfs(t, "64m")
	want := int64(memTableSize(vfs.Default, dir)) // 4 MiB
	// 6 MiB free: room for three segments of 1 MiB, not of 2 or 4.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 58<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatalf("open on a nearly full disk: %v", err)
	}
	got := s.LogSegmentBytes()
	if got >= want || got < logMinSegment {
		t.Fatalf("segments of %d bytes on a disk with %d free; want smaller than %d", got, want, want)
	}
	t.Logf("segments of %d bytes instead of %d", got, want)
	for i := range 40 {
		apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint(i), pattern(i, 4<<10)) })
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LogSegmentBytes() != got {
		t.Fatalf("reopened with segments of %d bytes, created with %d", s.LogSegmentBytes(), got)
	}
	for i := range 40 {
		if b := mustRead(t, s, "c", fmt.Sprint(i), 0, 0); !bytes.Equal(b, pattern(i, 4<<10)) {
			t.Fatalf("object %d lost or damaged", i)
		}
	}
}

// tmpfs mounts a tmpfs of the given size (as mount's size= option) on a
// fresh directory, or skips the test where mounting is not allowed. The
// disk-full tests need a real filesystem that runs out of space.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// damageInline flips the last byte of an inline object's record in the
// index, its data's last byte.
func damageInline(t *testing.T, s *Store, coll, name string) {
	t.Helper()
	k := objKey(coll, name)
	v, err := s.get(k)
	if err != nil {
		t.Fatal(err)
	}
	v[len(v)-1] ^= 1
	setIndexKey(t, s, k, v)
	s.idx.reset() // the damage is on disk; a cached copy of the record would hide it until evicted
}
