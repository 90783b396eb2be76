package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fillIndex writes n small objects (their data lives in the index) and
// flushes them into sstables.
func fillIndex(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		apply(t, s, func(tx *Txn) { tx.Put("1.2a", fmt.Sprintf("obj%05d", i), pattern(i, 1000)) })
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// liveTables returns the names of the index's live sstables.
func liveTables(t *testing.T, s *Store) []string {
	t.Helper()
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range levels {
		for _, tt := range l {
			names = append(names, tt.BackingSSTNum.String()+".sst")
		}
	}
	if len(names) == 0 {
		t.Fatal("no sstables in the index")
	}
	return names
}

// flipBytes inverts n bytes spread evenly over the first 90% of a file
// (its blocks; the footer is at the end).
func flipBytes(t *testing.T, fs vfs.FS, path string, n int) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	for i := 1; i <= n; i++ {
		off := st.Size() * 9 / 10 * int64(i) / int64(n+1)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		b[0] ^= 0xff
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// checkIndexDamage fails unless err is an IndexCorruptionError naming file.
func checkIndexDamage(t *testing.T, what string, err error, file string) {
	t.Helper()
	var ie *IndexCorruptionError
	if !errors.As(err, &ie) || !IsCorruption(err) {
		t.Fatalf("%s: want an index corruption error, got %v", what, err)
	}
	if ie.File != file || !strings.Contains(err.Error(), file) {
		t.Fatalf("%s: the error names file %q, want %s: %v", what, ie.File, file, err)
	}
}

// Flipped bytes in an sstable of a closed store: Open refuses it with an
// error that names the damaged file, and does not panic.
func TestOpenRefusesDamagedIndex(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	fillIndex(t, s, 3000)
	tables := liveTables(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flipBytes(t, fs, fs.PathJoin("/osd/meta", tables[0]), 20)
	s2, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1, DataCacheBytes: 2 << 20})
	if err == nil {
		s2.Close()
	}
	checkIndexDamage(t, "open after 20 flipped bytes", err, tables[0])
}

// VerifyIndex finds a damaged block of an open store's index that nothing
// has read since, and finds nothing in an intact one.
func TestVerifyIndexFindsDamage(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	defer s.Close()
	fillIndex(t, s, 3000)
	ctx := context.Background()
	if err := s.VerifyIndex(ctx); err != nil {
		t.Fatalf("VerifyIndex of an intact index: %v", err)
	}
	tables := liveTables(t, s)
	flipBytes(t, fs, fs.PathJoin("/osd/meta", tables[0]), 1)
	checkIndexDamage(t, "VerifyIndex after a flipped byte", s.VerifyIndex(ctx), tables[0])
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.VerifyIndex(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("VerifyIndex with a cancelled context: %v", err)
	}
}

// A panic while opening or reading the index becomes an error.
func TestGuardIndexRecoversPanics(t *testing.T) {
	s := &Store{opts: Options{MetaDir: "/osd/meta"}}
	err := s.guardIndex(func() error { quietLogger{}.Fatalf("boom %d", 1); return nil })
	if !IsCorruption(err) || !strings.Contains(err.Error(), "boom 1") || !strings.Contains(err.Error(), "/osd/meta") {
		t.Fatalf("want an index corruption error saying what panicked, got %v", err)
	}
}
