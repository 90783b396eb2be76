package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// countingFS counts the writes that reach the files it creates, and fails
// them once failAfter (if positive) have gone through.
type countingFS struct {
	vfs.FS
	writes, failAfter atomic.Int64
}

func (fs *countingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return countingFile{f, fs}, nil
}

type countingFile struct {
	vfs.File
	fs *countingFS
}

var errInjected = errors.New("injected write error")

func (f countingFile) Write(p []byte) (int, error) {
	n := f.fs.writes.Add(1)
	if fa := f.fs.failAfter.Load(); fa > 0 && n > fa {
		return 0, errInjected
	}
	return f.File.Write(p)
}

// A table file gathers small appends into few writes, and every way of
// looking at the file sees all of them.
func TestTableFileGathersWrites(t *testing.T) {
	under := &countingFS{FS: vfs.NewMem()}
	fs := indexFS{FS: under}
	f, err := fs.Create("000001.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*tableFile); !ok {
		t.Fatalf("an sstable got a %T", f)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	appendPiece := func(n int) {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		want = append(want, p...)
		if m, err := f.Write(p); err != nil || m != n {
			t.Fatalf("write %d: %d, %v", n, m, err)
		}
	}
	for range 200 {
		appendPiece(4096 + rng.IntN(100))
	}
	appendPiece(tableWriteSize + 1) // larger than the buffer: straight through
	for range 50 {
		appendPiece(1 + rng.IntN(9000))
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(len(want)) {
		t.Fatalf("stat mid-way: %v, %v; want size %d", fi, err, len(want))
	}
	got := make([]byte, 5000)
	if _, err := f.ReadAt(got, int64(len(want))-5000); err != nil || !bytes.Equal(got, want[len(want)-5000:]) {
		t.Fatalf("read of the last bytes written: %v", err)
	}
	for range 30 {
		appendPiece(4096)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if w, most := under.writes.Load(), int64(len(want)/tableWriteSize+4); w > most {
		t.Fatalf("%d writes reached the file for %d bytes; want at most %d", w, len(want), most)
	}
	r, err := under.Open("000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	all, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(all, want) {
		t.Fatalf("file holds %d bytes (%v), want the %d written", len(all), err, len(want))
	}

	// Other files are the underlying file system's own.
	for _, name := range []string{"000002.log", "MANIFEST-000001", "OPTIONS-000003"} {
		g, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := g.(*tableFile); ok {
			t.Fatalf("%s is gathered", name)
		}
		g.Close()
	}
}

// A failed write surfaces at the next call that flushes, and stays.
func TestTableFileWriteErrorSticks(t *testing.T) {
	under := &countingFS{FS: vfs.NewMem()}
	under.failAfter.Store(1)
	f, err := indexFS{FS: under}.Create("000001.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	for range tableWriteSize / len(p) {
		if _, err := f.Write(p); err != nil {
			t.Fatalf("gathered write failed: %v", err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("first flush: %v", err)
	}
	if _, err := f.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, errInjected) {
		t.Fatalf("sync after a failed write: %v", err)
	}
	if _, err := f.Write(p); !errors.Is(err, errInjected) {
		t.Fatalf("write after a failed write: %v", err)
	}
	if err := f.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("close after a failed write: %v", err)
	}
}

// The index flushes and compacts through gathered tables and reads back
// every object across a reopening.
func TestIndexTablesThroughTableFS(t *testing.T) {
	under := &countingFS{FS: vfs.NewMem()}
	s := openMem(t, under)
	obj := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 3000+i%1000) }
	const n = 3000
	for i := 0; i < n; i += 100 {
		apply(t, s, func(tx *Txn) {
			for j := i; j < i+100; j++ {
				tx.Put("c", fmt.Sprintf("o%05d", j), obj(j))
			}
		})
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(t.Context(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	tables := 0
	list, _ := under.List("/osd/meta")
	for _, name := range list {
		if strings.HasSuffix(name, ".sst") {
			tables++
		}
	}
	if tables == 0 {
		t.Fatal("no sstables were written")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, under)
	defer s.Close()
	for i := range n {
		name := fmt.Sprintf("o%05d", i)
		if got := mustRead(t, s, "c", name, 0, 0); !bytes.Equal(got, obj(i)) {
			t.Fatalf("%s: read %d bytes, want %d", name, len(got), len(obj(i)))
		}
	}
}
