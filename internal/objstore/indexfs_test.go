package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
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

// A new WAL file holds walFill zero bytes, synced, before pebble's first
// append, which lands at offset 0.
func TestNewWALIsZeroFilled(t *testing.T) {
	mem := vfs.NewCrashableMem()
	fs := indexFS{FS: mem, walFill: 3<<20 + 5}
	if err := mem.MkdirAll("/wal", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/wal/000004.log", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/", "/wal"} { // as pebble syncs its directory
		d, err := mem.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	if _, ok := f.(*tableFile); ok {
		t.Fatal("a WAL file is gathered")
	}
	rec := bytes.Repeat([]byte("record"), 1000)
	// Pebble's file systems may scribble on a written buffer (they do in
	// race builds, to catch callers that reuse one): write a copy.
	if _, err := f.Write(bytes.Clone(rec)); err != nil {
		t.Fatal(err)
	}
	// What survives a power loss without a sync of the record: the zeros.
	clone := mem.CrashClone(vfs.CrashCloneCfg{})
	for _, c := range []struct {
		fs   vfs.FS
		head []byte
	}{{mem, rec}, {clone, make([]byte, len(rec))}} {
		r, err := c.fs.Open("/wal/000004.log")
		if err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(all)) != fs.walFill {
			t.Fatalf("file is %d bytes, want %d", len(all), fs.walFill)
		}
		if !bytes.Equal(all[:len(rec)], c.head) || bytes.ContainsFunc(all[len(rec):], func(r rune) bool { return r != 0 }) {
			t.Fatal("file is not the appended bytes followed by zeros")
		}
	}
	f.Close()

	// Without a fill size, and for other files, nothing is written.
	for _, c := range []struct {
		fs   indexFS
		name string
	}{{indexFS{FS: mem}, "000005.log"}, {fs, "MANIFEST-000006"}} {
		g, err := c.fs.Create(c.name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := g.Stat(); err != nil || fi.Size() != 0 {
			t.Fatalf("%s: %v, %v; want an empty file", c.name, fi, err)
		}
		g.Close()
	}
}

// A store on a real disk zero-fills its WAL: its records survive a close
// and reopen, and a copy of the files taken while it runs (as a power loss
// would leave them, all written data kept) opens with every synced write.
func TestWALFillOnDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint(i), bytes.Repeat([]byte{byte(i)}, 100+i)) })
	}
	logs, _ := vfs.Default.List(s.opts.MetaDir)
	filled := false
	for _, n := range logs {
		if strings.HasSuffix(n, ".log") {
			fi, err := vfs.Default.Stat(vfs.Default.PathJoin(s.opts.MetaDir, n))
			filled = filled || err == nil && fi.Size() >= int64(memTableSize(vfs.Default, s.opts.MetaDir))
		}
	}
	if !filled {
		t.Fatalf("no WAL file in %v is zero-filled", logs)
	}
	copyDir := t.TempDir()
	if err := os.CopyFS(copyDir, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, copyDir} {
		s, err := Open(Options{Dir: d, ReserveBytes: -1})
		if err != nil {
			t.Fatalf("reopen %s: %v", d, err)
		}
		for i := range 200 {
			if got := mustRead(t, s, "c", fmt.Sprint(i), 0, 0); !bytes.Equal(got, bytes.Repeat([]byte{byte(i)}, 100+i)) {
				t.Fatalf("%s: object %d reads %d bytes", d, i, len(got))
			}
		}
		s.Close()
	}
}

// fullFS fails every WriteAt with ENOSPC, as a full disk does.
type fullFS struct{ vfs.FS }

func (fs fullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return fullFile{f}, nil
}

type fullFile struct{ vfs.File }

func (fullFile) WriteAt([]byte, int64) (int, error) { return 0, syscall.ENOSPC }

// On a full disk a new WAL file is not filled, and its store still opens,
// takes writes (where pebble finds room) and replays them.
func TestWALFillOnFullDisk(t *testing.T) {
	old := testWALFill
	testWALFill = 8 << 20
	defer func() { testWALFill = old }()
	fs := fullFS{vfs.NewMem()}
	s := openMem(t, fs)
	apply(t, s, func(tx *Txn) { tx.Put("c", "o", []byte("kept")) })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	defer s.Close()
	if got := mustRead(t, s, "c", "o", 0, 0); string(got) != "kept" {
		t.Fatalf("read %q after reopening", got)
	}
}
