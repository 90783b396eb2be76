package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// fault makes matching IO operations fail with errno.
type fault struct {
	op    string // see opName and ioOpNames
	path  string // a substring of the file's path ("" matches every file)
	errno syscall.Errno
	skip  int // matching operations that pass before the first failure
	count int // failures, then it passes again; 0: fails for good
}

func (f fault) String() string {
	return fmt.Sprintf("%s of %q: %v after %d (%d times)", f.op, f.path, f.errno, f.skip, f.count)
}

// faults injects IO errors into a store, through both seams: it is the
// errorfs.Injector of a wrapped vfs.FS, and the store's injectIO.
type faults struct {
	mu       sync.Mutex
	armed    []*fault
	injected map[string]int // failures injected, by operation
}

var ioOpNames = map[ioOp]string{
	ioDirectWrite: "direct-write", ioDirectWriteDSync: "direct-write", ioDirectRead: "direct-read", ioPunch: "punch",
	ioLogWrite: "log-write", ioSyncFS: "syncfs",
}

// opName names an operation of Options.FS as faults match it.
func opName(k errorfs.OpKind) string {
	switch k {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		return "write"
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return "sync"
	case errorfs.OpFilePreallocate:
		return "prealloc"
	case errorfs.OpCreate:
		return "create"
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		return "read"
	}
	return "other"
}

// installFaults makes f the injector of the store's system calls around
// its FS, and of vfs.Default for stores opened without one, until the
// test ends.
func installFaults(t *testing.T) *faults {
	f := &faults{injected: map[string]int{}}
	injectIO = func(op ioOp, path string) error { return f.maybe(ioOpNames[op], path) }
	testDefaultFS = errorfs.Wrap(vfs.Default, f)
	t.Cleanup(func() { injectIO, testDefaultFS = nil, nil })
	return f
}

func (f *faults) arm(fl fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = append(f.armed, &fl)
}

func (f *faults) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = nil
}

// count is how many failures were injected into op ("" for all).
func (f *faults) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if op == "" {
		n := 0
		for _, c := range f.injected {
			n += c
		}
		return n
	}
	return f.injected[op]
}

func (f *faults) maybe(op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fl := range f.armed {
		if fl.op != op || !strings.Contains(path, fl.path) || fl.count < 0 {
			continue
		}
		if fl.skip > 0 {
			fl.skip--
			continue
		}
		if fl.count > 0 {
			if fl.count--; fl.count == 0 {
				fl.count = -1 // spent
			}
		}
		f.injected[op]++
		return &os.PathError{Op: op, Path: path, Err: fl.errno}
	}
	return nil
}

func (f *faults) MaybeError(op errorfs.Op) error { return f.maybe(opName(op.Kind), op.Path) }
func (f *faults) String() string                 { return "objstore test faults" }

// storeMatches reports how s differs from the oracle m in the objects
// named by colls and names: data, xattrs and omap.
func storeMatches(s *Store, m oracle, colls, names []string) error {
	for _, c := range colls {
		for _, n := range names {
			ob := m.obj(c, n, false)
			got, err := s.Read(c, n, 0, 0)
			if ob == nil {
				if !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("%q/%q exists (%v), the oracle has none", c, n, err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, ob.data) {
				return fmt.Errorf("%q/%q: %d bytes (%v), the oracle %d, equal %v", c, n, len(got), err, len(ob.data), bytes.Equal(got, ob.data))
			}
			xa, err := s.Xattrs(c, n)
			if err != nil || len(xa) != len(ob.xattrs) {
				return fmt.Errorf("%q/%q: %d xattrs (%v), the oracle %d", c, n, len(xa), err, len(ob.xattrs))
			}
			for k, v := range ob.xattrs {
				if string(xa[k]) != v {
					return fmt.Errorf("%q/%q: xattr %q differs", c, n, k)
				}
			}
			kvs, _, err := s.OmapList(c, n, nil, nil, 0)
			if err != nil || len(kvs) != len(ob.omap) {
				return fmt.Errorf("%q/%q: %d omap entries (%v), the oracle %d", c, n, len(kvs), err, len(ob.omap))
			}
			for _, kv := range kvs {
				if v, ok := ob.omap[string(kv.Key)]; !ok || v != string(kv.Value) {
					return fmt.Errorf("%q/%q: omap entry %q differs", c, n, kv.Key)
				}
			}
		}
	}
	return nil
}

// cloneOracle is a deep copy of m.
func cloneOracle(m oracle) oracle {
	out := oracle{}
	for c, objs := range m {
		out[c] = map[string]*mobj{}
		for n, o := range objs {
			out[c][n] = &mobj{data: bytes.Clone(o.data), xattrs: maps.Clone(o.xattrs), omap: maps.Clone(o.omap)}
		}
	}
	return out
}

// TestIOErrorsModel applies random transactions to a store on a
// crashable in-memory filesystem while IO errors (EIO, ENOSPC) are
// injected into the writes, syncs and preallocations of its data files
// and commit log. A transaction acknowledged is in the oracle and must
// survive a reopen, even after a crash that drops every unsynced write; a
// refused transaction must leave no trace while the store goes on; after
// an error that fails the store (its commit-log write, a checkpoint's
// sync), every later transaction is refused, and the store reopened shows
// the acknowledged ones, plus at most the one whose commit failed, whole.
func TestIOErrorsModel(t *testing.T) {
	seeds := []int64{1, 2, 3}
	if env := os.Getenv("OBJSTORE_SEED"); env != "" {
		v, _ := strconv.ParseInt(env, 10, 64)
		seeds = []int64{v}
	} else {
		seeds = append(seeds, time.Now().UnixNano())
	}
	steps := 200
	if testing.Short() {
		steps = 60
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with OBJSTORE_SEED=%d)", seed, seed)
			runIOErrorsModel(t, seed, steps)
		})
	}
}

func runIOErrorsModel(t *testing.T, seed int64, steps int) {
	f := installFaults(t)
	r := rand.New(rand.NewSource(seed))
	mem := vfs.NewCrashableMem()
	open := func() *Store {
		s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: errorfs.Wrap(mem, f), ReserveBytes: -1})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return s
	}
	s := open()
	defer func() { s.Close() }()
	colls := []string{"1.0", "2.f"}
	names := []string{"a", "b", "rbd_data.1"}
	m := oracle{}
	refused, failures, restarts, ambiguousKept := 0, 0, 0, 0
	// restart reopens a failed store, after a clean close or a crash, and
	// checks it holds m, or m and the transaction whose commit failed.
	// A crash that drops every unsynced write (strict) right after an
	// error shows whether the store acknowledged anything not durable.
	restart := func(step int, ambiguous []op, strict bool) {
		f.disarm()
		restarts++
		crash := strict || r.Intn(2) == 0
		if crash {
			cfg := vfs.CrashCloneCfg{}
			if !strict && r.Intn(2) == 0 {
				cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: randv2.New(randv2.NewPCG(uint64(r.Int63()), 3))}
			}
			clone := mem.CrashClone(cfg)
			s.Close()
			mem = clone
		} else {
			s.Close() // may fail: the store failed
		}
		s = open()
		err := storeMatches(s, m, colls, names)
		if err != nil && ambiguous != nil {
			m2 := cloneOracle(m)
			for i := range ambiguous {
				m2.apply(&ambiguous[i])
			}
			if err2 := storeMatches(s, m2, colls, names); err2 == nil {
				m, err = m2, nil
				ambiguousKept++
			}
		}
		if err != nil {
			t.Fatalf("step %d: reopened (crash %v) store lost acknowledged state or kept a refused one: %v", step, crash, err)
		}
	}
	for step := 0; step < steps; step++ {
		before := f.count("")
		if r.Intn(4) == 0 {
			fl := fault{
				op:    []string{"write", "sync", "prealloc", "create"}[r.Intn(4)],
				path:  []string{"/osd/data/", "commitlog-"}[r.Intn(2)],
				errno: []syscall.Errno{syscall.EIO, syscall.ENOSPC}[r.Intn(2)],
				skip:  r.Intn(4),
				count: r.Intn(2),
			}
			if os.Getenv("OBJSTORE_TRACE") != "" {
				t.Logf("step %d: %v", step, fl)
			}
			f.arm(fl)
		}
		if r.Intn(5) == 0 {
			// What the checkpointer does: a failed checkpoint fails the store.
			if err := s.checkpoint(); err != nil {
				s.fail(err)
			}
		}
		var tx Txn
		var ops []op
		for n := 1 + r.Intn(4); n > 0; n-- {
			o := randOp(r, colls, names)
			tx.add(o)
			ops = append(ops, o)
		}
		tx2, err := UnmarshalTxn(tx.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		err = s.Apply(tx2)
		if os.Getenv("OBJSTORE_TRACE") != "" {
			t.Logf("step %d: %d ops: %v", step, len(ops), err)
		}
		switch {
		case err == nil:
			for i := range ops {
				m.apply(&ops[i])
			}
		case s.failure() == nil:
			// Refused: nothing of it may show, and the store goes on.
			select {
			case <-s.Failed():
				t.Fatalf("step %d: Failed is closed on a store that did not fail", step)
			default:
			}
			refused++
			if e := storeMatches(s, m, colls, names); e != nil {
				t.Fatalf("step %d: refused transaction (%v) left a trace: %v", step, err, e)
			}
		default:
			failures++
			select {
			case <-s.Failed():
			default:
				t.Fatalf("step %d: the store failed (%v) but Failed is not closed", step, s.Err())
			}
			var again Txn
			again.Put("1.0", "a", []byte("after the failure"))
			if e := s.Apply(&again); e == nil {
				t.Fatalf("step %d: a failed store (%v) acknowledged a transaction", step, err)
			}
			// The transaction may have reached the log before it failed,
			// unless it was refused for a failure before it.
			var ambiguous []op
			if !strings.Contains(err.Error(), "store failed earlier") {
				ambiguous = ops
			}
			restart(step, ambiguous, r.Intn(2) == 0)
			continue
		}
		if f.count("") > before && r.Intn(3) > 0 {
			restart(step, nil, true)
		} else if r.Intn(25) == 0 {
			restart(step, nil, false) // a crash or restart without an error
		}
	}
	f.disarm()
	restart(steps, nil, false)
	compareStore(t, r, s, m, colls, names)
	t.Logf("%d errors injected (%v), %d transactions refused, %d failed the store, %d restarts, %d failed commits found whole after one",
		f.count(""), f.injected, refused, failures, restarts, ambiguousKept)
	if f.count("") == 0 || refused == 0 || failures == 0 {
		t.Error("the run injected too little to test both outcomes")
	}
}

// TestIOErrorsRealFS injects errors into the system calls a store on a
// real filesystem makes outside its FS: O_DIRECT writes and reads of data
// files, commit-log writes, hole punches, syncfs; and into the
// preallocation and fdatasync of data files through its FS.
func TestIOErrorsRealFS(t *testing.T) {
	old := checkpointInterval
	checkpointInterval = time.Hour // only the checkpoints a case asks for
	defer func() { checkpointInterval = old }()
	big, big2 := pattern(1, 1<<20), pattern(2, 1<<20)
	eio := func(op, path string) fault { return fault{op: op, path: path, errno: syscall.EIO, count: 1} }
	// setup leaves an acknowledged object "big" whose blocks are in a
	// synced file, with no journal records pending.
	setup := func(t *testing.T) (*faults, *Store, string) {
		f := installFaults(t)
		dir := t.TempDir()
		s := openReal(t, dir)
		apply(t, s, func(tx *Txn) { tx.Put("c", "big", big) })
		if !s.directIO.Load() {
			s.Close()
			t.Skip("the filesystem of the test's directory does not do O_DIRECT")
		}
		return f, s, dir
	}
	// reopen closes s (whose Close may fail after an injected error) and
	// opens it again without faults.
	reopen := func(t *testing.T, f *faults, s *Store, dir string) *Store {
		f.disarm()
		s.Close()
		return openReal(t, dir)
	}
	put := func(s *Store, name string, data []byte) error {
		var tx Txn
		tx.Put("c", name, data)
		tx.SetXattr("c", "meta", name, []byte("x"))
		return s.Apply(&tx)
	}
	refusedCleanly := func(t *testing.T, s *Store, name string) {
		t.Helper()
		if err := s.failure(); err != nil {
			t.Fatalf("a refused write failed the store: %v", err)
		}
		if _, err := s.Stat("c", name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused put of %s visible: %v", name, err)
		}
		if _, err := s.GetXattr("c", "meta", name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused transaction partly applied: %v", err)
		}
		if err := put(s, name+"-after", big2); err != nil {
			t.Fatalf("the store does not go on after a refused write: %v", err)
		}
	}

	for _, c := range []struct {
		name    string
		fault   fault
		noSpace bool
	}{
		{"direct write EIO", eio("direct-write", "/data/"), false},
		{"direct write ENOSPC", fault{op: "direct-write", path: "/data/", errno: syscall.ENOSPC, count: 1}, true},
		{"preallocate ENOSPC", fault{op: "prealloc", path: "/data/", errno: syscall.ENOSPC, count: 1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, s, dir := setup(t)
			f.arm(c.fault)
			err := put(s, "new", big2)
			if err == nil || errors.Is(err, ErrNoSpace) != c.noSpace || f.count("") == 0 {
				t.Fatalf("put under %v: %v (%d injected)", c.fault, err, f.count(""))
			}
			refusedCleanly(t, s, "new")
			s = reopen(t, f, s, dir)
			defer s.Close()
			if _, err := s.Stat("c", "new"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("refused put visible after reopen: %v", err)
			}
			for name, want := range map[string][]byte{"big": big, "new-after": big2} {
				if got := mustRead(t, s, "c", name, 0, 0); !bytes.Equal(got, want) {
					t.Fatalf("%s differs after reopen", name)
				}
			}
		})
	}

	t.Run("copy-on-write EIO", func(t *testing.T) {
		f, s, dir := setup(t)
		f.arm(eio("direct-write", "/data/"))
		var tx Txn
		tx.Write("c", "big", 0, big2[:256<<10])
		if err := s.Apply(&tx); err == nil || s.cowWrites.Load() != 0 {
			t.Fatalf("copy-on-write overwrite under EIO: %v, %d done", err, s.cowWrites.Load())
		}
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, big) {
			t.Fatal("a refused overwrite changed the object")
		}
		apply(t, s, func(tx *Txn) { tx.Write("c", "big", 0, big2[:256<<10]) })
		s = reopen(t, f, s, dir)
		defer s.Close()
		want := bytes.Clone(big)
		copy(want, big2[:256<<10])
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, want) {
			t.Fatal("object differs after reopen")
		}
	})

	t.Run("punch EIO", func(t *testing.T) {
		f, s, dir := setup(t)
		f.arm(eio("punch", "/data/"))
		apply(t, s, func(tx *Txn) { tx.Write("c", "big", 0, big2[:256<<10]) })
		if f.count("punch") != 1 || s.cowWrites.Load() != 1 {
			t.Fatalf("%d punches failed, %d copy-on-write overwrites", f.count("punch"), s.cowWrites.Load())
		}
		s = reopen(t, f, s, dir)
		defer s.Close()
		want := bytes.Clone(big)
		copy(want, big2[:256<<10])
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, want) {
			t.Fatal("object differs after a failed punch")
		}
	})

	t.Run("commit-log write EIO", func(t *testing.T) {
		f, s, dir := setup(t)
		f.arm(eio("log-write", "commitlog-"))
		err := put(s, "small", []byte("a small object"))
		if err == nil || s.failure() == nil {
			t.Fatalf("put under a failed log write: %v; store failed: %v", err, s.failure())
		}
		if err := put(s, "later", []byte("later")); err == nil {
			t.Fatal("a store whose commit log failed acknowledged a write")
		}
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, big) {
			t.Fatal("acknowledged object unreadable after the failure")
		}
		s = reopen(t, f, s, dir)
		defer s.Close()
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, big) {
			t.Fatal("acknowledged object lost")
		}
		for _, name := range []string{"small", "later"} {
			if _, err := s.Stat("c", name); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s, never written to the log, exists: %v", name, err)
			}
		}
		apply(t, s, func(tx *Txn) { tx.Put("c", "small", []byte("a small object")) })
	})

	// Deferred overwrites of files reach them through the page cache and
	// are made durable by a checkpoint: an fdatasync of each file when
	// they are few, one syncfs when they are many. A failed sync fails the
	// store; the journal records stay, and Open replays them.
	for _, c := range []struct {
		name  string
		files int
		fault fault
	}{
		{"checkpoint fdatasync EIO", 1, eio("sync", "/data/")},
		{"checkpoint syncfs EIO", syncfsMinFiles, eio("syncfs", "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, s, dir := setup(t)
			for i := 1; i < c.files; i++ {
				apply(t, s, func(tx *Txn) { tx.Put("c", fmt.Sprint("big", i), big) })
			}
			patch := pattern(3, blockSize)
			for i := 0; i < c.files; i++ {
				name := "big"
				if i > 0 {
					name = fmt.Sprint("big", i)
				}
				apply(t, s, func(tx *Txn) { tx.Write("c", name, 8*blockSize, patch) })
			}
			f.arm(c.fault)
			done, err := s.syncJournal()
			if err == nil || len(done) != 0 || f.count("") == 0 {
				t.Fatalf("checkpoint under %v: %v, %d records synced", c.fault, err, len(done))
			}
			s.fail(err) // what the checkpointer does
			if err := put(s, "later", []byte("later")); err == nil {
				t.Fatal("a store whose checkpoint failed acknowledged a write")
			}
			s = reopen(t, f, s, dir)
			defer s.Close()
			if s.replayed < c.files {
				t.Fatalf("reopen replayed %d journal records, want %d: a failed sync dropped them", s.replayed, c.files)
			}
			want := bytes.Clone(big)
			copy(want[8*blockSize:], patch)
			if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, want) {
				t.Fatal("acknowledged overwrite lost")
			}
		})
	}

	t.Run("direct read EIO", func(t *testing.T) {
		f, s, _ := setup(t)
		defer s.Close()
		f.arm(fault{op: "direct-read", path: "/data/", errno: syscall.EIO})
		got, err := s.Read("c", "big", 0, 0)
		if err == nil || IsCorruption(err) || got != nil || f.count("direct-read") == 0 {
			t.Fatalf("read under EIO: %d bytes, %v (%d injected)", len(got), err, f.count("direct-read"))
		}
		f.disarm()
		if got := mustRead(t, s, "c", "big", 0, 0); !bytes.Equal(got, big) {
			t.Fatal("object differs once reads work again")
		}
	})
}
