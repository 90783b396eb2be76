package objstore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A clean close saves the flash cache's index; the next Open brings the
// blocks back (the first reads after it come from flash) and removes the
// saved index, so a second Open without a clean close in between starts
// empty.
func TestFlashCacheIndexSurvivesACleanClose(t *testing.T) {
	dir := t.TempDir()
	s := openFlash(t, dir, 1<<20)
	const blocks = 32
	data := pattern(4, blocks*blockSize)
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	for b := range uint64(blocks) {
		readBlock(t, s, "vol", b)
	}
	settle(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "flash", flashIndexFile)
	if _, err := os.Stat(index); err != nil {
		t.Fatalf("a clean close saved no index: %v", err)
	}

	s = openFlash(t, dir, 1<<20)
	if st := s.FlashCache(); st.Restored != blocks || st.Used != blocks*blockSize || st.RestoreErr != "" {
		t.Fatalf("after reopening: %+v, want %d blocks restored", st, blocks)
	}
	if _, err := os.Stat(index); !os.IsNotExist(err) {
		t.Fatalf("the saved index is still there after Open: %v", err)
	}
	for b := range uint64(blocks) {
		if got := readBlock(t, s, "vol", b); !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
			t.Fatalf("block %d read after the restart differs from what was written", b)
		}
	}
	if st := s.FlashCache(); st.Hits != blocks || st.Misses != 0 {
		t.Fatalf("reads after the restart: %+v, want all %d from flash", st, blocks)
	}
	s.fc.mu.Lock()
	s.fc.dead = true // as after a flash error: a close saves nothing
	s.fc.mu.Unlock()
	s.Close()
	s = openFlash(t, dir, 1<<20)
	defer s.Close()
	if st := s.FlashCache(); st.Restored != 0 || st.Used != 0 {
		t.Fatalf("opened after a close that saved nothing: %+v, want an empty cache", st)
	}
}

// A saved index whose blocks rotted on flash, or that was written for a
// cache of another size, or damaged, never makes a read return wrong
// bytes: a rotten block fails its checksum and is read from the disk, and
// an index that does not decode is dropped with the reason.
func TestFlashCacheIndexNeverServesBadData(t *testing.T) {
	dir := t.TempDir()
	s := openFlash(t, dir, 1<<20)
	data := pattern(5, 64*blockSize) // past InlineMax: in a data file
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	for b := range uint64(64) {
		readBlock(t, s, "vol", b)
	}
	settle(t, s)
	s.Close()
	cache, err := os.OpenFile(filepath.Join(dir, "flash", flashCacheFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for slot := range int64(64) {
		cache.WriteAt([]byte{^data[slot*blockSize+9]}, slot*blockSize+9)
	}
	cache.Close()
	s = openFlash(t, dir, 1<<20)
	for b := range uint64(64) {
		if got := readBlock(t, s, "vol", b); !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
			t.Fatalf("block %d: a rotten flash copy named by the saved index was returned", b)
		}
	}
	if st := s.FlashCache(); st.Restored != 64 || st.Errors != 64 || st.Hits != 0 {
		t.Fatalf("rotten restored blocks: %+v, want 64 restored, 64 errors, no hits", st)
	}
	settle(t, s)
	s.Close()

	// The same index for a cache of twice the size: dropped.
	s = openFlash(t, dir, 2<<20)
	st := s.FlashCache()
	if st.Restored != 0 || st.Used != 0 || st.RestoreErr == "" {
		t.Fatalf("an index of a cache of another size: %+v, want it dropped with its reason", st)
	}
	t.Logf("dropped: %s", st.RestoreErr)
	s.Close()
	index := filepath.Join(dir, "flash", flashIndexFile)
	b, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	os.WriteFile(index, b, 0o600)
	s = openFlash(t, dir, 2<<20)
	defer s.Close()
	if st := s.FlashCache(); st.Restored != 0 || st.RestoreErr == "" {
		t.Fatalf("a damaged index: %+v, want it dropped with its reason", st)
	}
}

// An index left by a store whose commit log then replayed writes into its
// data files is not used (Open removes it): those blocks may have changed.
func TestFlashCacheIndexDroppedAfterReplay(t *testing.T) {
	dir := t.TempDir()
	c, err := openFlashCache(dir, 64*blockSize)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.owner[3] = slotOwner{fileID: 7, block: 1, gen: 1, used: true, ready: true}
	c.mu.Unlock()
	c.close(dir)
	c, err = openFlashCache(dir, 64*blockSize)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close("")
	c.restore(dir, false)
	if _, err := os.Stat(filepath.Join(dir, flashIndexFile)); !os.IsNotExist(err) || c.restored != 0 || len(c.files) != 0 {
		t.Fatalf("an index after a replay: restored %d, %v", c.restored, err)
	}
}

// FuzzDecodeFlashIndex: the index comes from the disk; whatever decodes
// names each slot and block once, within the cache.
func FuzzDecodeFlashIndex(f *testing.F) {
	c := &flashCache{slots: 8, head: 2, owner: make([]slotOwner, 8)}
	c.owner[1] = slotOwner{fileID: 3, block: 4, ready: true}
	c.owner[5] = slotOwner{fileID: 3, block: 9, ready: true}
	f.Add(c.encodeIndex())
	f.Add([]byte(flashIndexMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, head, err := decodeFlashIndex(b, 8)
		if err != nil {
			return
		}
		if head >= 8 {
			t.Fatalf("head %d past the cache", head)
		}
		slots := map[uint32]bool{}
		for _, e := range entries {
			if e.slot >= 8 || slots[e.slot] {
				t.Fatalf("slot %d out of range or twice", e.slot)
			}
			slots[e.slot] = true
		}
	})
}
