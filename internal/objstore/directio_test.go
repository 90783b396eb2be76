package objstore

import (
	"bytes"
	"testing"
)

// TestDirectIOPut: a large new object on a real filesystem is written with
// O_DIRECT (the store keeps direct IO on) and reads back byte for byte,
// also after a reopen, which reads it from the disk rather than a cache.
func TestDirectIOPut(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(9, 4<<20+4096*3+100) // not a whole number of blocks
	var tx Txn
	tx.Put("1.0", "big", data)
	if err := s.Apply(&tx); err != nil {
		t.Fatal(err)
	}
	if !s.directIO.Load() {
		t.Skip("this filesystem refuses O_DIRECT; the buffered path was used")
	}
	got, err := s.Read("1.0", "big", 0, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back after a direct write: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err = s.Read("1.0", "big", 0, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back after reopen: %v", err)
	}
}
