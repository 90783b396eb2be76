package objstore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The durability audit: for each kind of write, the system calls that make
// it durable happen before Apply returns. Both IO seams are recorded (the
// calls through Options.FS and the store's own O_DIRECT, commit-log and
// syncfs calls), and every Apply's calls must follow one rule:
//
//   - it ends with a commit-log write (O_DIRECT|O_DSYNC, or a write and
//     fdatasync of the segment where O_DIRECT is off): the commit;
//   - every data-file write before the commit is durable before it: made
//     with RWF_DSYNC, or followed by an fdatasync of that file or a
//     syncfs;
//   - every file created or renamed before the commit has its directory
//     synced before it (or a syncfs).
//
// The table of doc.go ("Durability") says which path each kind takes;
// this test checks the paths were taken, so a change that drops a sync
// or skips a path fails here.

type ioEvent struct {
	op   string // "log", "direct", "direct-dsync", "write", "sync", "create", "rename", "syncfs", "punch"
	path string
}

type ioRecorder struct {
	mu     sync.Mutex
	events []ioEvent
}

func (r *ioRecorder) add(op, path string) {
	r.mu.Lock()
	r.events = append(r.events, ioEvent{op, path})
	r.mu.Unlock()
}

func (r *ioRecorder) take() []ioEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func (r *ioRecorder) String() string { return "durability recorder" }

// MaybeError records the calls through Options.FS (errorfs.Injector).
func (r *ioRecorder) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		r.add("write", op.Path)
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		r.add("sync", op.Path)
	case errorfs.OpCreate, errorfs.OpLink, errorfs.OpReuseForWrite:
		r.add("create", op.Path)
	case errorfs.OpOpen:
		// Data files are created by opening them read-write; an Apply
		// opens no other data file (their handles stay cached).
		if strings.Contains(op.Path, string(filepath.Separator)+"data"+string(filepath.Separator)) {
			r.add("create", op.Path)
		}
	case errorfs.OpRename:
		r.add("rename", op.Path)
	}
	return nil
}

func installRecorder(t *testing.T) *ioRecorder {
	r := &ioRecorder{}
	names := map[ioOp]string{ioDirectWrite: "direct", ioDirectWriteDSync: "direct-dsync", ioLogWrite: "log", ioSyncFS: "syncfs", ioPunch: "punch"}
	injectIO = func(op ioOp, path string) error {
		if n, ok := names[op]; ok {
			r.add(n, path)
		}
		return nil
	}
	testDefaultFS = errorfs.Wrap(vfs.Default, r)
	t.Cleanup(func() { injectIO, testDefaultFS = nil, nil })
	return r
}

// checkDurable applies the rule to the calls of one Apply; isLog tells a
// commit-log segment's path from a data file's. journaled: the Apply's
// data blocks are in its commit-log record (the deferred path), so a
// buffered write of them before the commit needs no sync of its own.
func checkDurable(events []ioEvent, isLog func(string) bool, journaled bool) error {
	commit := -1
	for i, e := range events {
		if e.op == "log" || e.op == "sync" && isLog(e.path) {
			commit = i
		}
	}
	if commit < 0 {
		return fmt.Errorf("no commit-log write before Apply returned: %v", events)
	}
	synced := func(from int, ok func(ioEvent) bool) bool {
		for _, e := range events[from+1 : commit+1] {
			if e.op == "syncfs" || ok(e) {
				return true
			}
		}
		return false
	}
	for i, e := range events[:commit] {
		switch {
		case (e.op == "direct" || e.op == "write" && !journaled) && !isLog(e.path):
			if !synced(i, func(x ioEvent) bool { return x.op == "sync" && x.path == e.path }) {
				return fmt.Errorf("%s of %s is not made durable before the commit: %v", e.op, e.path, events)
			}
		case e.op == "create" || e.op == "rename":
			dir := filepath.Dir(e.path)
			if !synced(i, func(x ioEvent) bool { return x.op == "sync" && x.path == dir }) {
				return fmt.Errorf("%s of %s: its directory is not synced before the commit: %v", e.op, e.path, events)
			}
		}
	}
	return nil
}

func TestDurabilityAudit(t *testing.T) {
	rec := installRecorder(t)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logDir := filepath.Join(dir, "meta")
	isLog := func(p string) bool { return strings.HasPrefix(p, logDir) }
	pattern := func(n int, seed byte) []byte { return bytes.Repeat([]byte{seed}, n) }

	type kind struct {
		what      string
		txn       func(*Txn)
		journaled bool     // the deferred path: the data goes in the log record
		want      []string // calls its path must make (on O_DIRECT filesystems)
	}
	kinds := []kind{
		{"small put (inline: the log record holds it)", func(t *Txn) { t.Put("1.0", "small", pattern(4096, 1)) }, false, []string{"log"}},
		{"large put (a new data file)", func(t *Txn) { t.Put("1.0", "big", pattern(4<<20, 2)) }, false, []string{"create", "direct", "sync", "log"}},
		{"large overwrite (the blocks' other slot)", func(t *Txn) { t.Write("1.0", "big", 0, pattern(1<<20, 3)) }, false, []string{"direct-dsync", "log"}},
		{"large write into fresh blocks", func(t *Txn) { t.Write("1.0", "big", 4<<20, pattern(512<<10, 4)) }, false, []string{"direct-dsync", "log"}},
		{"small overwrite (journal record in the log)", func(t *Txn) { t.Write("1.0", "big", 8192, pattern(4096, 5)) }, true, []string{"log"}},
		{"large write into fresh blocks, journal pending", func(t *Txn) { t.Write("1.0", "big", 6<<20, pattern(512<<10, 6)) }, true, []string{"log"}},
		{"large put over a large object (a new file)", func(t *Txn) { t.Put("1.0", "big", pattern(4<<20, 7)) }, false, []string{"create", "direct", "sync", "log"}},
		{"xattr and omap", func(t *Txn) {
			t.SetXattr("1.0", "big", "k", []byte("v"))
			t.OmapSet("1.0", "big", []byte("key"), []byte("val"))
		}, false, []string{"log"}},
		{"truncate", func(t *Txn) { t.Truncate("1.0", "big", 1<<20) }, false, []string{"log"}},
		{"delete of a large object", func(t *Txn) { t.Delete("1.0", "big") }, false, []string{"log"}},
		{"delete of a small object", func(t *Txn) { t.Delete("1.0", "small") }, false, []string{"log"}},
	}
	direct := s.directIO.Load()
	t.Logf("O_DIRECT on this filesystem: %v", direct)
	for _, k := range kinds {
		var txn Txn
		k.txn(&txn)
		rec.take()
		if err := s.Apply(&txn); err != nil {
			t.Fatalf("%s: %v", k.what, err)
		}
		events := rec.take()
		if err := checkDurable(events, isLog, k.journaled); err != nil {
			t.Errorf("%s: %v", k.what, err)
			continue
		}
		var ops []string
		for _, e := range events {
			ops = append(ops, e.op)
		}
		t.Logf("%s: %s", k.what, strings.Join(ops, " "))
		for _, w := range k.want {
			if direct && !slices.Contains(ops, w) {
				t.Errorf("%s: took another path than its own (no %s): %v", k.what, w, ops)
			}
		}
	}
}

// The rule itself fails what it should: a data write without its sync, a
// new file without its directory's, no commit at all.
func TestDurabilityRule(t *testing.T) {
	isLog := func(p string) bool { return strings.HasPrefix(p, "/m/") }
	ok := []ioEvent{{"create", "/d/1/f"}, {"direct", "/d/1/f"}, {"sync", "/d/1/f"}, {"sync", "/d/1"}, {"log", "/m/seg"}}
	if err := checkDurable(ok, isLog, false); err != nil {
		t.Fatalf("a correct sequence fails: %v", err)
	}
	bad := map[string][]ioEvent{
		"no data sync":  {{"create", "/d/1/f"}, {"direct", "/d/1/f"}, {"sync", "/d/1"}, {"log", "/m/seg"}},
		"no dir sync":   {{"create", "/d/1/f"}, {"direct", "/d/1/f"}, {"sync", "/d/1/f"}, {"log", "/m/seg"}},
		"sync too late": {{"direct", "/d/1/f"}, {"log", "/m/seg"}, {"sync", "/d/1/f"}},
		"no commit":     {{"direct-dsync", "/d/1/f"}},
	}
	for what, ev := range bad {
		if checkDurable(ev, isLog, false) == nil {
			t.Errorf("%s: the rule lets it pass", what)
		}
	}
	if err := checkDurable([]ioEvent{{"direct-dsync", "/d/1/f"}, {"log", "/m/seg"}}, isLog, false); err != nil {
		t.Errorf("an RWF_DSYNC write before the commit fails: %v", err)
	}
}

// The write-back path of the audit: a small overwrite, and a small write
// into fresh blocks, with the area on make the commit-log write and touch
// no data file; a destage pass writes the data files, syncs them, and
// only then commits the keys' deletion.
func TestDurabilityAuditWriteback(t *testing.T) {
	quietDestager(t)
	rec := installRecorder(t)
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1, WritebackBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logDir := filepath.Join(dir, "meta")
	isLog := func(p string) bool { return strings.HasPrefix(p, logDir) }
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "big", bytes.Repeat([]byte{1}, 4<<20)) })
	for _, k := range []struct {
		what string
		txn  func(*Txn)
	}{
		{"small overwrite into the area", func(tx *Txn) { tx.Write("1.0", "big", 8192, bytes.Repeat([]byte{2}, 4096)) }},
		{"small write into fresh blocks, into the area", func(tx *Txn) { tx.Write("1.0", "big", 5<<20, bytes.Repeat([]byte{3}, 8192)) }},
	} {
		var txn Txn
		k.txn(&txn)
		rec.take()
		if err := s.Apply(&txn); err != nil {
			t.Fatal(err)
		}
		events := rec.take()
		if err := checkDurable(events, isLog, false); err != nil {
			t.Errorf("%s: %v", k.what, err)
		}
		for _, e := range events {
			if !isLog(e.path) && e.op != "log" {
				t.Errorf("%s: touched a data file (%s %s): %v", k.what, e.op, e.path, events)
			}
		}
	}
	rec.take()
	if n, err := s.destagePass(); err != nil || n != 3*blockSize {
		t.Fatalf("destage: %d bytes, %v", n, err)
	}
	var ops []string
	for _, e := range rec.take() {
		if e.op == "log" || !isLog(e.path) {
			ops = append(ops, e.op)
		}
	}
	t.Logf("destage pass: %s", strings.Join(ops, " "))
	w, sy, l := slices.Index(ops, "write"), slices.IndexFunc(ops, func(o string) bool { return o == "sync" || o == "syncfs" }), slices.Index(ops, "log")
	if w < 0 || sy < w || l < sy {
		t.Fatalf("a destage pass must write, sync, then commit the deletion: %v", ops)
	}
}
