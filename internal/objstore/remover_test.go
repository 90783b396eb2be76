package objstore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dataFiles returns how many data files the store's fan-out directories
// hold.
func dataFiles(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	for i := range 256 {
		names, err := s.fs.List(s.fanDir(uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		n += len(names)
	}
	return n
}

// TestRemovedFilesGo: the data files of deleted and replaced objects are
// unlinked after their transactions return, and Close unlinks the ones
// still queued.
func TestRemovedFilesGo(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	for i := range 40 {
		apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint("o", i), pattern(i, 200<<10)) })
	}
	if n := dataFiles(t, s); n != 40 {
		t.Fatalf("%d data files for 40 large objects", n)
	}
	for i := range 20 {
		apply(t, s, func(tx *Txn) { tx.Delete("c", fmt.Sprint("o", i)) })
	}
	for i := 20; i < 30; i++ { // a new file each, the old one dropped
		apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint("o", i), pattern(i+100, 200<<10)) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.rm.pending() > 0 || dataFiles(t, s) != 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d data files (%d removals queued), want 20", dataFiles(t, s), s.rm.pending())
		}
		time.Sleep(time.Millisecond)
	}
	for i := 20; i < 40; i++ {
		want := pattern(i, 200<<10)
		if i < 30 {
			want = pattern(i+100, 200<<10)
		}
		if got, err := s.Read("c", fmt.Sprint("o", i), 0, 0); err != nil || string(got) != string(want) {
			t.Fatalf("o%d: %v, or wrong data", i, err)
		}
	}

	// Removals still queued when the store closes are done by Close.
	for i := 20; i < 40; i++ {
		apply(t, s, func(tx *Txn) { tx.Delete("c", fmt.Sprint("o", i)) })
	}
	s.Close()
	if n := dataFiles(t, s); n != 0 { // before an Open would remove them as orphans
		t.Fatalf("%d data files left after every object was deleted", n)
	}
}

// stallFS blocks the first Remove until release is closed.
type stallFS struct {
	vfs.FS
	started atomic.Bool
	stalled chan struct{}
	release chan struct{}
}

func (f *stallFS) Remove(name string) error {
	if f.started.CompareAndSwap(false, true) {
		close(f.stalled)
		<-f.release
	}
	return f.FS.Remove(name)
}

// TestRemoverBound: with maxQueuedRemovals waiting behind a slow unlink,
// a caller unlinks its file itself, at once; the queued ones follow, and
// drain waits for them.
func TestRemoverBound(t *testing.T) {
	fs := &stallFS{FS: vfs.NewMem(), stalled: make(chan struct{}), release: make(chan struct{})}
	create := func(name string) {
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	exists := func(name string) bool {
		_, err := fs.Stat(name)
		return err == nil
	}
	var removed atomic.Int64
	r := newRemover(fs, func() { removed.Add(1) })
	create("first")
	r.remove(fs, "first")
	<-fs.stalled
	for i := range maxQueuedRemovals {
		create(fmt.Sprint("q", i))
		r.remove(fs, fmt.Sprint("q", i))
	}
	create("over")
	r.remove(fs, "over")
	if exists("over") {
		t.Fatal("a removal past the bound was queued, not done by its caller")
	}
	if !exists("q0") || r.pending() != maxQueuedRemovals {
		t.Fatalf("%d removals queued behind the stalled one, want %d", r.pending(), maxQueuedRemovals)
	}
	close(fs.release)
	r.drain()
	for i := range maxQueuedRemovals {
		if exists(fmt.Sprint("q", i)) {
			t.Fatalf("q%d survived drain", i)
		}
	}
	if exists("first") {
		t.Fatal("the stalled removal was not finished")
	}
	if n := removed.Load(); n != maxQueuedRemovals+2 {
		t.Fatalf("told of %d unlinks, want %d", n, maxQueuedRemovals+2)
	}
	create("queued")
	r.remove(fs, "queued")
	r.close()
	if exists("queued") {
		t.Fatal("a queued removal survived close")
	}
	create("late")
	r.remove(fs, "late")
	if exists("late") {
		t.Fatal("a removal after close was not done by its caller")
	}
}

// gateFS blocks Remove of the names in gates until their channel closes.
type gateFS struct {
	vfs.FS
	gates map[string]chan struct{}
}

func (f *gateFS) Remove(name string) error {
	if g, ok := f.gates[name]; ok {
		<-g
	}
	return f.FS.Remove(name)
}

// TestRemoverDrainBounded: drain waits for the removals queued before it,
// not for ones queued while it waits, so deletes that keep coming cannot
// hold up a writer waiting for space.
func TestRemoverDrainBounded(t *testing.T) {
	first, later := make(chan struct{}), make(chan struct{})
	fs := &gateFS{FS: vfs.NewMem(), gates: map[string]chan struct{}{"first": first, "later": later}}
	for _, n := range []string{"first", "later"} {
		f, err := fs.Create(n, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r := newRemover(fs, func() {})
	defer func() {
		close(later)
		r.close()
	}()
	r.remove(fs, "first")
	mark := r.mark() // what drain, called now, waits for
	drained := make(chan struct{})
	go func() {
		r.waitFor(mark)
		close(drained)
	}()
	r.remove(fs, "later") // blocks in the remover until the test ends
	select {
	case <-drained:
		t.Fatal("drain returned before the removal queued ahead of it was done")
	case <-time.After(10 * time.Millisecond):
	}
	close(first)
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("drain waited for a removal queued after it started")
	}
	if _, err := fs.Stat("first"); err == nil {
		t.Fatal("drain returned with the removal it waited for not done")
	}
}
