package objstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openPair opens the store of data dir d and index dir m (real files).
func openPair(t *testing.T, d, m string) (*Store, error) {
	t.Helper()
	return Open(Options{Dir: d, MetaDir: m})
}

// newPair makes a store with one object whose data has a file of its own
// (large) or lives in the index (small), and closes it.
func newPair(t *testing.T, large bool) (d, m string) {
	t.Helper()
	d, m = t.TempDir(), t.TempDir()
	s, err := openPair(t, d, m)
	if err != nil {
		t.Fatal(err)
	}
	size := 1 << 10
	if large {
		size = 1 << 20
	}
	var txn Txn
	txn.Put("c", "obj", bytes.Repeat([]byte{7}, size))
	if err := s.Apply(&txn); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return d, m
}

func wipe(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func wantMismatch(t *testing.T, what string, err error, says string) {
	t.Helper()
	if !errors.Is(err, ErrStoreMismatch) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "empty both") {
		t.Errorf("%s: %v, want ErrStoreMismatch saying %q and what to do", what, err, says)
	}
}

// A data directory is never opened under an index that is not its own:
// not a new, empty one (its data files would be taken for orphans and
// deleted), not another store's; nor an index over a data directory that
// lost its files.
func TestStoreIdentity(t *testing.T) {
	d, m := newPair(t, true)
	files := func() []string {
		f, _ := filepath.Glob(filepath.Join(d, "data", "*", "*"))
		return f
	}
	before := files()
	if len(before) != 1 {
		t.Fatalf("data files %v, want the large object's one", before)
	}
	m2 := t.TempDir()
	_, err := openPair(t, d, m2)
	wantMismatch(t, "an empty index over a store's data", err, "meta device replaced or wiped")
	if got := files(); len(got) != 1 {
		t.Errorf("the refused open left data files %v, want %v", got, before)
	}
	// A store from before ids were kept has data files and no id file.
	idFile, _ := os.ReadFile(filepath.Join(d, storeIDFile))
	os.Remove(filepath.Join(d, storeIDFile))
	_, err = openPair(t, d, t.TempDir())
	wantMismatch(t, "an empty index over data files", err, "holds data files")
	os.WriteFile(filepath.Join(d, storeIDFile), idFile, 0o644)

	d3, m3 := newPair(t, false)
	_, err = openPair(t, d, m3)
	wantMismatch(t, "another store's index", err, "the data directory to store")
	_, err = openPair(t, d3, m)
	wantMismatch(t, "another store's index, the other way", err, "the data directory to store")

	wipe(t, d)
	_, err = openPair(t, d, m)
	wantMismatch(t, "an index whose data directory was wiped", err, "a data disk replaced or wiped")

	// The id file alone lost, with no data file in the index: a crash
	// while the id was given. It is written again.
	os.Remove(filepath.Join(d3, storeIDFile))
	s, err := openPair(t, d3, m3)
	if err != nil {
		t.Fatalf("an index with only inline objects and no id file: %v", err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(d3, storeIDFile)); err != nil {
		t.Errorf("the id file was not written again: %v", err)
	}
}

// A store formatted before ids were kept gets one when opened.
func TestStoreIdentityUpgrade(t *testing.T) {
	d, m := newPair(t, true)
	s, err := openPair(t, d, m)
	if err != nil {
		t.Fatal(err)
	}
	batch := s.db.NewBatch()
	batch.Delete(keyStoreID, nil)
	if err := s.commit(batch); err != nil {
		t.Fatal(err)
	}
	batch.Close()
	s.Close()
	os.Remove(filepath.Join(d, storeIDFile))
	if s, err = openPair(t, d, m); err != nil {
		t.Fatalf("a store without ids: %v", err)
	}
	id, _ := s.get(keyStoreID)
	s.Close()
	b, err := os.ReadFile(filepath.Join(d, storeIDFile))
	if len(id) != 2*storeIDBytes || err != nil || !strings.Contains(string(b), string(id)) {
		t.Errorf("after the upgrade the index holds %q and %s %q (%v)", id, storeIDFile, b, err)
	}
	if s, err = openPair(t, d, m); err != nil {
		t.Fatalf("reopening the upgraded store: %v", err)
	}
	s.Close()
}
