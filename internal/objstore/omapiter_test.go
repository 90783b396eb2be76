package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestOmapIter walks, seeks and skips an omap whose neighbours (another
// object's omap, the object's xattrs) must never show, and sees one state
// while transactions change the omap under it.
func TestOmapIter(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	if _, err := s.NewOmapIter("c", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("iterator of a missing object: %v", err)
	}
	apply(t, s, func(x *Txn) {
		x.Create("c", "empty")
		x.SetXattr("c", "o", "x", []byte("xattr"))
		for i := 0; i < 50; i++ {
			x.OmapSet("c", "o", []byte(fmt.Sprintf("a/%02d", i)), []byte(fmt.Sprint(i)))
		}
		x.OmapSet("c", "o", []byte("b"), []byte("B"))
		x.OmapSet("c", "o", []byte("\xff\xff"), []byte("last"))
		x.OmapSet("c", "other", []byte("a/00"), []byte("not mine"))
	})
	it, err := s.NewOmapIter("c", "empty")
	if err != nil {
		t.Fatal(err)
	}
	if it.SeekGE(nil) {
		t.Fatalf("empty omap has key %q", it.Key())
	}
	it.Close()

	it, err = s.NewOmapIter("c", "o")
	if err != nil {
		t.Fatal(err)
	}
	// A change after the iterator was made does not show.
	apply(t, s, func(x *Txn) {
		x.OmapSet("c", "o", []byte("a/25x"), []byte("new"))
		x.OmapRm("c", "o", []byte("b"))
	})
	var keys []string
	for ok := it.SeekGE(nil); ok; ok = it.Next() {
		keys = append(keys, string(it.Key()))
	}
	if len(keys) != 52 || keys[0] != "a/00" || keys[50] != "b" || keys[51] != "\xff\xff" {
		t.Fatalf("walk: %d keys %q", len(keys), keys)
	}
	if !it.SeekGE([]byte("a/25")) || string(it.Key()) != "a/25" || string(it.Value()) != "25" {
		t.Fatalf("seek to a key: %q", it.Key())
	}
	if !it.SeekGE([]byte("a0")) || string(it.Key()) != "b" || !bytes.Equal(it.Value(), []byte("B")) {
		t.Fatalf("seek past a prefix: %q", it.Key())
	}
	if !it.SeekGE([]byte("a/")) || string(it.Key()) != "a/00" {
		t.Fatalf("seek back: %q", it.Key())
	}
	if !it.SeekGE([]byte("\xff")) || string(it.Key()) != "\xff\xff" || it.Next() {
		t.Fatal("the last key, then the end")
	}
	if it.SeekGE([]byte("\xff\xff\x00")) {
		t.Fatalf("seek past the end found %q", it.Key())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	it, _ = s.NewOmapIter("c", "o")
	defer it.Close()
	if !it.SeekGE([]byte("a/25x")) || string(it.Value()) != "new" {
		t.Fatal("a new iterator sees the change")
	}
}
