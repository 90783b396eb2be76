package objstore

import (
	"bytes"
	"errors"
	"fmt"
	randv2 "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// withLogSegment runs the test with commit-log segments of n bytes in
// memory: small ones make the log wrap, and batches over n/4 take the path
// for large batches.
func withLogSegment(t *testing.T, n int64) {
	old := testLogSegment
	testLogSegment = n
	t.Cleanup(func() { testLogSegment = old })
}

// A store on a real disk writes its log with O_DIRECT: its commits survive
// a close and reopen, and a copy of the files taken while it runs (as a
// power loss would leave them, all written data kept) opens with every
// commit, replayed from the log.
func TestCommitLogOnDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if s.log.segs[0].fd < 0 {
		t.Error("the commit log is not written with O_DIRECT on a real disk")
	}
	t.Logf("segments of %d bytes, groups aligned to %d", s.log.segSize, s.log.align)
	if s.log.segSize != int64(memTableSize(vfs.Default, s.opts.MetaDir)) {
		t.Errorf("segments of %d bytes, want the memtable's %d", s.log.segSize, memTableSize(vfs.Default, s.opts.MetaDir))
	}
	obj := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100+i*37) }
	for i := range 200 {
		apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint(i), obj(i)) })
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
		if s.logReplayed < 200 {
			t.Errorf("%s: %d batches replayed from the log, want at least 200", d, s.logReplayed)
		}
		for i := range 200 {
			if got := mustRead(t, s, "c", fmt.Sprint(i), 0, 0); !bytes.Equal(got, obj(i)) {
				t.Fatalf("%s: object %d reads %d bytes", d, i, len(got))
			}
		}
		s.Close()
	}
}

// Concurrent writers share groups; the log wraps around its segments many
// times, and batches too large for a group go behind an index flush. A
// crash at any point (unsynced writes dropped or kept) loses no
// acknowledged commit, and a reopened store has every object.
func TestCommitLogWraps(t *testing.T) {
	withLogSegment(t, 64<<10) // groups of at most 16 KiB
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 6, 150
	obj := func(g, i int) []byte {
		n := 500 + (g*each+i)%3000
		if i%25 == 7 {
			n = 20 << 10 // over a quarter of a segment
		}
		return pattern(g*10000+i, n)
	}
	var acked [writers]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	clones := []*vfs.MemFS{}
	snaps := [][writers]int{}
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var tx Txn
				tx.Put("c", fmt.Sprintf("%d-%d", g, i), obj(g, i))
				tx.OmapSet("c", fmt.Sprint("log-", g), []byte(fmt.Sprintf("%04d", i)), nil)
				if err := s.Apply(&tx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[g] = i + 1
				if g == 0 && i%30 == 29 {
					pct := []int{0, 60, 100}[len(clones)%3]
					snaps = append(snaps, acked)
					cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
					if pct > 0 {
						cfg.RNG = randv2.New(randv2.NewPCG(uint64(i), 7))
					}
					clones = append(clones, fs.CrashClone(cfg))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	wraps := s.log.wraps.Load()
	if wraps < 6 {
		t.Errorf("the log moved to a new segment %d times; the test wants it to wrap twice", wraps)
	}
	if s.log.large.Load() == 0 {
		t.Error("no batch took the path for large ones")
	}
	t.Logf("%d segment switches, %d large batches, %d crash clones", wraps, s.log.large.Load(), len(clones))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, fs vfs.FS, acked [writers]int) {
		s, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer s.Close()
		for g := range writers {
			for i := range acked[g] {
				if got, err := s.Read("c", fmt.Sprintf("%d-%d", g, i), 0, 0); err != nil || !bytes.Equal(got, obj(g, i)) {
					t.Fatalf("%s: object %d-%d (acknowledged: %d of writer %d): %d bytes, %v", what, g, i, acked[g], g, len(got), err)
				}
			}
			// Whatever of the rest is there came whole, in order.
			kvs, _, err := s.OmapList("c", fmt.Sprint("log-", g), nil, nil, 0)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			for i, kv := range kvs {
				if string(kv.Key) != fmt.Sprintf("%04d", i) {
					t.Fatalf("%s: writer %d's log has %q at %d", what, g, kv.Key, i)
				}
				if _, err := s.Stat("c", fmt.Sprintf("%d-%d", g, i)); err != nil {
					t.Fatalf("%s: log entry %d of writer %d without its object: %v", what, i, g, err)
				}
			}
			if len(kvs) < acked[g] {
				t.Fatalf("%s: writer %d's log has %d entries, %d acknowledged", what, g, len(kvs), acked[g])
			}
		}
	}
	check("reopened", fs, acked)
	for i, c := range clones {
		check(fmt.Sprintf("crash clone %d", i), c, snaps[i])
	}
}

// groups lists the intact groups of segment i.
func groups(t *testing.T, s *Store, i int) []logGroup {
	t.Helper()
	g, _, err := s.log.scanSegment(i)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A group the crash cut short is not acknowledged, and Open goes on
// without it; a damaged group with intact ones after it held acknowledged
// commits, and Open refuses the store rather than drop them.
func TestCommitLogDamage(t *testing.T) {
	for _, c := range []struct {
		name    string
		fromEnd int // which group to damage: 1 = the newest
		refused bool
	}{{"torn newest group", 1, false}, {"damaged older group", 3, true}} {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openMem(t, fs)
			for i := range 10 {
				apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint(i), pattern(i, 1000)) })
			}
			cur := s.log.cur
			gs := groups(t, s, cur)
			if len(gs) < 11 {
				t.Fatalf("%d groups in the active segment", len(gs))
			}
			victim := gs[len(gs)-c.fromEnd]
			s.Close()
			f, err := fs.OpenReadWrite(s.log.segs[cur].path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			// The second half of the group never reached the disk.
			half := int64(len(victim.body) / 2)
			if _, err := f.WriteAt(make([]byte, len(victim.body)-int(half)), victim.off+half); err != nil {
				t.Fatal(err)
			}
			f.Close()
			s, err = Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1})
			if c.refused {
				if !IsCorruption(err) {
					t.Fatalf("open: %v, want a corruption error", err)
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 9 {
				if got := mustRead(t, s, "c", fmt.Sprint(i), 0, 0); !bytes.Equal(got, pattern(i, 1000)) {
					t.Fatalf("object %d lost", i)
				}
			}
			if _, err := s.Stat("c", "9"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the torn group's object: %v", err)
			}
		})
	}
}

// A store of format 2 kept its newest commits in the index's own WAL.
// Opening it replays them, flushes them, and marks the store version 3.
func TestCommitLogUpgradeFromIndexWAL(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	apply(t, s, func(tx *Txn) { tx.Put("c", "a", []byte("from the log")) })
	meta := s.opts.MetaDir
	if err := s.db.Flush(); err != nil { // a format 2 store had it in sstables or its WAL
		t.Fatal(err)
	}
	s.Close()
	// What a format 2 build left: commits in pebble's WAL only.
	for _, n := range []string{"commitlog-0", "commitlog-1", "commitlog-2"} {
		if err := fs.Remove(fs.PathJoin(meta, n)); err != nil {
			t.Fatal(err)
		}
	}
	db, err := pebble.Open(meta, &pebble.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	rec, closer, err := db.Get(objKey("c", "a"))
	if err != nil {
		t.Fatalf("the first store's commit is not in its index: %v", err)
	}
	rec = bytes.Clone(rec)
	closer.Close()
	b := db.NewBatch()
	b.Set(objKey("c", "b"), rec, nil)
	b.Set(keySuperblock, []byte{2}, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil { // leaves the batch in the WAL alone
		t.Fatal(err)
	}
	for range 2 {
		s = openMem(t, fs)
		if got := mustRead(t, s, "c", "b", 0, 0); string(got) != "from the log" {
			t.Fatalf("commit from the index's WAL reads %q", got)
		}
		if v, _ := s.get(keySuperblock); len(v) != 1 || v[0] != formatVersion {
			t.Fatalf("superblock %v after the upgrade", v)
		}
		s.Close()
	}
}

// tornLogFS tears the next commit-log write once armed: it waits for
// release, then writes the group's header but not its records, and reports
// EIO.
type tornLogFS struct {
	vfs.FS
	armed   *atomic.Bool
	release chan struct{}
}

func (fs tornLogFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil || !strings.Contains(name, "commitlog-") {
		return f, err
	}
	return tornFile{f, fs}, nil
}

type tornFile struct {
	vfs.File
	fs tornLogFS
}

func (f tornFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.armed.CompareAndSwap(true, false) {
		<-f.fs.release
		n, _ := f.File.WriteAt(p[:logHeaderLen], off)
		return n, syscall.EIO
	}
	return f.File.WriteAt(p, off)
}

// After a failed log write the store writes nothing more: the commits
// queued behind the failed one fail too, and the store reopens with every
// acknowledged commit (a later group intact behind the torn one would make
// the log unreadable).
func TestCommitLogStopsAfterAFailedWrite(t *testing.T) {
	mem := vfs.NewMem()
	fs := tornLogFS{mem, new(atomic.Bool), make(chan struct{})}
	s := openMem(t, fs)
	apply(t, s, func(tx *Txn) { tx.Put("c", "before", []byte("kept")) })
	fs.armed.Store(true)
	errs := make(chan error, 6)
	commit := func(name string) {
		b := s.db.NewBatch()
		defer b.Close()
		b.Set(objKey("c", name), []byte("not acknowledged"), nil)
		errs <- s.commit(b)
	}
	go commit("torn")
	for fs.armed.Load() { // the leader is in its write
		time.Sleep(time.Millisecond)
	}
	for i := range 5 {
		go commit(fmt.Sprint("queued-", i))
	}
	for queued := 0; queued < 5; time.Sleep(time.Millisecond) {
		s.log.mu.Lock()
		queued = len(s.log.queue)
		s.log.mu.Unlock()
	}
	close(fs.release)
	for range 6 {
		if err := <-errs; !errors.Is(err, errCommitLog) {
			t.Fatalf("a commit during or after the failed write: %v", err)
		}
	}
	s.Close()
	s = openMem(t, mem)
	defer s.Close()
	if got := mustRead(t, s, "c", "before", 0, 0); string(got) != "kept" {
		t.Fatalf("acknowledged object reads %q", got)
	}
}
