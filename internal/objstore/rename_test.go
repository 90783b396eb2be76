package objstore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRenameMovesTheObject: a rename moves an object's data, xattrs and
// omap to the new name, replacing what the name held (its file goes), in
// the same transaction as ops on both names after it; it writes no data,
// and all of it holds after a reopen. Inline and file-backed objects.
func TestRenameMovesTheObject(t *testing.T) {
	for _, size := range []int{3000, 1 << 20} {
		fs := vfs.NewMem()
		s := openMem(t, fs)
		data, old := pattern(size, size), pattern(7, 300<<10)
		apply(t, s, func(tx *Txn) {
			tx.Put("c", "o", data)
			tx.SetXattr("c", "o", "x", []byte("1"))
			tx.OmapSet("c", "o", []byte("k"), []byte("v"))
			tx.Put("c", "kept", old)
			tx.SetXattr("c", "kept", "y", []byte("old"))
		})
		oldPath, _ := s.DataPath("c", "kept")
		path, _ := s.DataPath("c", "o")
		apply(t, s, func(tx *Txn) {
			tx.Rename("c", "o", "kept")
			tx.Put("c", "o", nil) // a new object under the old name
			tx.SetXattr("c", "o", "z", []byte("new"))
			tx.SetXattr("c", "kept", "meta", []byte("m"))
		})
		if p, _ := s.DataPath("c", "kept"); p != path {
			t.Errorf("the renamed object's data is in %q, not in the file it had (%q): it was copied", p, path)
		}
		s.rm.drain()
		if _, err := s.fs.Stat(oldPath); err == nil {
			t.Errorf("the data file of the object the rename replaced survived")
		}
		for round := range 2 {
			if got := mustRead(t, s, "c", "kept", 0, 0); !bytes.Equal(got, data) {
				t.Fatalf("size %d, round %d: the renamed object reads %d bytes, not what it held", size, round, len(got))
			}
			if x, _ := s.Xattrs("c", "kept"); len(x) != 2 || string(x["x"]) != "1" || string(x["meta"]) != "m" {
				t.Fatalf("size %d: xattrs after the rename: %q", size, x)
			}
			if kv, _, _ := s.OmapList("c", "kept", nil, nil, 0); len(kv) != 1 || string(kv[0].Value) != "v" {
				t.Fatalf("size %d: omap after the rename: %v", size, kv)
			}
			if x, _ := s.Xattrs("c", "o"); len(x) != 1 || string(x["z"]) != "new" {
				t.Fatalf("size %d: the new object under the old name has xattrs %q", size, x)
			}
			if info, err := s.Stat("c", "o"); err != nil || info.Size != 0 {
				t.Fatalf("size %d: the new object under the old name: %+v %v", size, info, err)
			}
			if u, _ := s.Usage(); u.Objects != 2 || u.DataBytes != int64(size) {
				t.Fatalf("size %d: usage %+v after the rename", size, u)
			}
			s.Close()
			s = openMem(t, fs)
		}
		s.Close()
	}
}

// TestRenameRefused: a rename of an absent object, to its own name, or
// after another op on either object in its transaction is refused, and
// the transaction changes nothing.
func TestRenameRefused(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("c", "a", []byte("a")); tx.Put("c", "b", []byte("b")) })
	cases := map[string]func(*Txn){
		"absent":       func(tx *Txn) { tx.Put("c", "b", []byte("x")); tx.Rename("c", "none", "a") },
		"same name":    func(tx *Txn) { tx.Rename("c", "a", "a") },
		"after a put":  func(tx *Txn) { tx.Put("c", "a", []byte("x")); tx.Rename("c", "a", "b") },
		"after target": func(tx *Txn) { tx.SetXattr("c", "b", "k", nil); tx.Rename("c", "a", "b") },
		"chained":      func(tx *Txn) { tx.Rename("c", "a", "b"); tx.Rename("c", "b", "d") },
	}
	for name, build := range cases {
		var tx Txn
		build(&tx)
		err := s.Apply(&tx)
		if err == nil {
			t.Fatalf("%s: a rename was taken", name)
		}
		if name != "absent" && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if name == "absent" && !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
		if a, b := mustRead(t, s, "c", "a", 0, 0), mustRead(t, s, "c", "b", 0, 0); string(a) != "a" || string(b) != "b" {
			t.Fatalf("%s: a refused transaction changed the objects: %q %q", name, a, b)
		}
	}
}

// TestRenameKeepsDamageVisible: a damaged inline object renamed still reads
// as damaged under its new name; its checksums move with it and are not
// recomputed over the bad bytes.
func TestRenameKeepsDamageVisible(t *testing.T) {
	s := openMem(t, nil)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("c", "a", pattern(1, 5000)) })
	damageInline(t, s, "c", "a")
	if _, err := s.Read("c", "a", 0, 0); !IsCorruption(err) {
		t.Fatalf("the damaged object reads: %v", err)
	}
	apply(t, s, func(tx *Txn) { tx.Rename("c", "a", "b") })
	if _, err := s.Read("c", "b", 0, 0); !IsCorruption(err) {
		t.Fatalf("a damaged object renamed reads without a corruption error: %v", err)
	}
}
