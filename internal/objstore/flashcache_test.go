package objstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	randv2 "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// openFlash opens a store on the real file system, its meta directory
// apart, with a flash read cache of size bytes.
func openFlash(t testing.TB, dir string, size int64) *Store {
	t.Helper()
	s, err := Open(Options{Dir: filepath.Join(dir, "osd"), MetaDir: filepath.Join(dir, "flash"), ReserveBytes: -1,
		DataCacheBytes: -1, FlashCacheBytes: size})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// settle waits until the cache's writer has written every fill handed to it.
func settle(t testing.TB, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.fc.queued.Load() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the flash cache's writer did not catch up in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// readBlock reads block b of an object as a client does.
func readBlock(t testing.TB, s *Store, name string, b uint64) []byte {
	t.Helper()
	data, _, _, release, err := s.ReadShared("c", name, b*blockSize, blockSize)
	if err != nil {
		t.Fatalf("read %s block %d: %v", name, b, err)
	}
	defer release()
	return bytes.Clone(data)
}

// A block read from the disk once is read from flash the next time; the
// blocks a write changes leave the cache (the next read sees the write),
// the others stay; a truncate drops the whole file's blocks.
func TestFlashCacheServesAndForgets(t *testing.T) {
	s := openFlash(t, t.TempDir(), 1<<20)
	defer s.Close()
	const blocks = 64
	data := pattern(1, blocks*blockSize)
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	for b := range uint64(blocks) {
		readBlock(t, s, "vol", b)
	}
	settle(t, s)
	st := s.FlashCache()
	if st.Filled != blocks || st.Hits != 0 || st.Used != blocks*blockSize {
		t.Fatalf("after one pass: %+v, want %d blocks filled, none hit", st, blocks)
	}
	for b := range uint64(blocks) {
		if got := readBlock(t, s, "vol", b); !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
			t.Fatalf("block %d from flash differs from what was written", b)
		}
	}
	if st = s.FlashCache(); st.Hits != blocks {
		t.Fatalf("second pass: %d hits, want %d", st.Hits, blocks)
	}
	fresh := pattern(2, blockSize)
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 5*blockSize, fresh) })
	if st = s.FlashCache(); st.Used != (blocks-1)*blockSize {
		t.Fatalf("after overwriting block 5: %+v, want it alone gone", st)
	}
	if got := readBlock(t, s, "vol", 5); !bytes.Equal(got, fresh) {
		t.Fatal("a block read after its overwrite is the old one")
	}
	if st = s.FlashCache(); st.Hits != blocks {
		t.Fatalf("block 5 was read from flash after its overwrite: %+v", st)
	}
	readBlock(t, s, "vol", 6)
	if st = s.FlashCache(); st.Hits != blocks+1 {
		t.Fatalf("block 6 was dropped by a write to block 5: %+v", st)
	}
	apply(t, s, func(x *Txn) { x.Truncate("c", "vol", 10*blockSize) })
	if st = s.FlashCache(); st.Used != 0 {
		t.Fatalf("after a truncate the cache still holds %d bytes of the file", st.Used)
	}
}

// A cached block whose flash copy rots is read from the disk (the client
// gets the right data) and counted; scrubs (ReadInfo) read past the cache,
// so a bad block on the disk is found even while flash holds a good copy.
func TestFlashCacheNeverServesBadData(t *testing.T) {
	dir := t.TempDir()
	s := openFlash(t, dir, 1<<20)
	defer s.Close()
	data := pattern(3, 64*blockSize) // past InlineMax: in a data file
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	for b := range uint64(8) {
		readBlock(t, s, "vol", b)
	}
	settle(t, s)
	cache, err := os.OpenFile(filepath.Join(dir, "flash", flashCacheFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for slot := range int64(8) { // every slot in use: flip a byte in each
		cache.WriteAt([]byte{^data[slot*blockSize+100]}, slot*blockSize+100)
	}
	cache.Close()
	for b := range uint64(8) {
		if got := readBlock(t, s, "vol", b); !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
			t.Fatalf("block %d: a rotten flash copy was returned", b)
		}
	}
	if st := s.FlashCache(); st.Errors != 8 || st.Hits != 0 {
		t.Fatalf("rotten copies: %+v, want 8 errors and no hits", st)
	}
	// Good copies in flash again (the reads above refilled the cache), and
	// a bad block on the disk: a scrub's read must see it.
	settle(t, s)
	r, _, _ := s.loadRec("c", "vol")
	f, err := os.OpenFile(s.filePath(r.fileID), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{^data[2*blockSize+7]}, int64(s.phys(2, false))+7)
	f.Close()
	if got := readBlock(t, s, "vol", 2); !bytes.Equal(got, data[2*blockSize:3*blockSize]) {
		t.Fatal("the client read of block 2 did not come from its good flash copy")
	}
	_, _, err = s.ReadInfo("c", "vol", 2*blockSize, blockSize)
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("a scrub's read of a bad block on disk: %v, want a CorruptionError", err)
	}
}

// Random writes, truncates, puts and deletes of a few objects, and small
// reads through a cache much smaller than the data (so the ring wraps),
// against a model: every read returns the model's bytes.
func TestFlashCacheModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { flashModelRun(t, seed) })
	}
}

func flashModelRun(t *testing.T, seed uint64) {
	rng := randv2.New(randv2.NewPCG(seed, 0xf1a5))
	s := openFlash(t, t.TempDir(), 32*blockSize)
	defer s.Close()
	model := map[string][]byte{}
	names := []string{"a", "b", "c"}
	for i := range 3000 {
		name := names[rng.IntN(len(names))]
		cur := model[name]
		switch op := rng.IntN(20); {
		case op < 12 && len(cur) > 0: // a small read, then maybe the same again
			off := uint64(rng.IntN(len(cur))) &^ (blockSize - 1)
			n := uint64(1+rng.IntN(4)) * blockSize
			for range 1 + rng.IntN(2) {
				data, _, _, release, err := s.ReadShared("c", name, off, n)
				if err != nil {
					t.Fatalf("op %d: read %s at %d: %v", i, name, off, err)
				}
				want := cur[off:min(uint64(len(cur)), off+n)]
				if !bytes.Equal(data, want) {
					t.Fatalf("op %d: read %s at %d+%d: not the model's bytes", i, name, off, n)
				}
				release()
			}
		case op < 17: // a write of a few blocks, maybe unaligned
			off := rng.IntN(64 * blockSize)
			data := pattern(i, 1+rng.IntN(3*blockSize))
			apply(t, s, func(x *Txn) { x.Write("c", name, uint64(off), data) })
			if end := off + len(data); end > len(cur) {
				cur = append(cur, make([]byte, end-len(cur))...)
			}
			copy(cur[off:], data)
			model[name] = cur
		case op < 18:
			size := rng.IntN(len(cur) + 1)
			apply(t, s, func(x *Txn) { x.Truncate("c", name, uint64(size)) })
			model[name] = cur[:size]
		case op < 19:
			data := pattern(i, rng.IntN(40*blockSize))
			apply(t, s, func(x *Txn) { x.Put("c", name, data) })
			model[name] = data
		default:
			if cur != nil {
				apply(t, s, func(x *Txn) { x.Delete("c", name) })
				delete(model, name)
			}
		}
	}
	if st := s.FlashCache(); st.Hits == 0 || st.Filled <= 32 || st.Used > st.Bytes {
		t.Fatalf("the cache was not exercised (or overfilled): %+v", st)
	}
}

// Readers of a block while it is overwritten never see a version older
// than the last write that returned before their read began.
func TestFlashCacheConcurrentOverwrites(t *testing.T) {
	s := openFlash(t, t.TempDir(), 4*blockSize) // much smaller than the data: slots are reused under readers
	defer s.Close()
	const blocks = 32
	for b := range blocks {
		apply(t, s, func(x *Txn) { x.Write("c", "vol", uint64(b)*blockSize, versioned(b, 0)) })
	}
	var done atomic.Bool
	latest := make([]atomic.Int64, blocks) // the newest version whose write returned
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		rng := randv2.New(randv2.NewPCG(1, 2))
		for v := 1; v <= 400; v++ {
			b := rng.IntN(blocks)
			apply(t, s, func(x *Txn) { x.Write("c", "vol", uint64(b)*blockSize, versioned(b, v)) })
			latest[b].Store(int64(v))
		}
	})
	for r := range 4 {
		wg.Go(func() {
			rng := randv2.New(randv2.NewPCG(uint64(r), 3))
			for !done.Load() {
				b := rng.IntN(blocks)
				// Twice, letting the cache's writer take the first read's
				// fill in between (however busy the machine): the second
				// read comes from flash unless a write came between.
				for range 2 {
					floor := latest[b].Load()
					got := readBlock(t, s, "vol", uint64(b))
					v := int64(binary.BigEndian.Uint64(got))
					if v < floor || !bytes.Equal(got, versioned(b, int(v))) {
						t.Errorf("block %d: read version %d, after version %d had been written", b, v, floor)
						return
					}
					for i := 0; i < 1000 && s.fc.queued.Load() > 0; i++ {
						runtime.Gosched()
					}
				}
			}
		})
	}
	wg.Wait()
	// A slot read while the ring gave it to another block would fail
	// its checksum: the generation check must catch it first.
	if st := s.FlashCache(); st.Hits == 0 || st.Errors != 0 {
		t.Fatalf("want reads from flash and no checksum failures: %+v", st)
	}
}

// The ring giving a slot to another block between a read's lookup and its
// read of the slot: the read misses (the generation changed) rather than
// taking the other block's bytes for its own.
func TestFlashCacheSlotReusedUnderRead(t *testing.T) {
	c, err := openFlashCache(t.TempDir(), blockSize) // one slot
	if err != nil {
		t.Fatal(err)
	}
	defer c.close("")
	one, two := pattern(1, blockSize), pattern(2, blockSize)
	wait := func() {
		for c.queued.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	c.admit(7, 0, one)
	wait()
	flashBeforeRead = func() { c.admit(8, 0, two); wait() }
	defer func() { flashBeforeRead = nil }()
	dst := make([]byte, blockSize)
	if c.read(7, 0, dst, blockCRC(one)) {
		t.Fatal("a read of a slot reused under it succeeded")
	}
	if st := c.stats(); st.Errors != 0 || st.Filled != 2 {
		t.Fatalf("want the reuse seen before the checksum: %+v", st)
	}
	flashBeforeRead = nil
	if !c.read(8, 0, dst, blockCRC(two)) || !bytes.Equal(dst, two) {
		t.Fatal("the slot's new block does not read back")
	}
}

// A read of the old bytes of a write (ReadSharedNoFill) is answered from
// the flash cache when it holds them, but fills nothing.
func TestFlashCacheNoFill(t *testing.T) {
	s := openFlash(t, t.TempDir(), 1<<20)
	defer s.Close()
	data := pattern(5, 64*blockSize)
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	read := func(b uint64) {
		t.Helper()
		got, _, _, release, err := s.ReadSharedNoFill("c", "vol", b*blockSize, blockSize)
		if err != nil || !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
			t.Fatalf("block %d: %v", b, err)
		}
		release()
	}
	read(1)
	settle(t, s)
	if st := s.FlashCache(); st.Filled != 0 || st.Used != 0 {
		t.Fatalf("a no-fill read filled the cache: %+v", st)
	}
	readBlock(t, s, "vol", 2)
	settle(t, s)
	read(2)
	if st := s.FlashCache(); st.Hits != 1 || st.Filled != 1 {
		t.Fatalf("a no-fill read of a cached block: %+v, want it answered from flash", st)
	}
}

// A flash device that stops answering turns the cache off: the read that
// met the error, and every one after it, is served from the data disk, and
// the stats say what failed, once, for the operator.
func TestFlashCacheFailureTurnsItOff(t *testing.T) {
	s := openFlash(t, t.TempDir(), 1<<20)
	defer s.Close()
	data := pattern(3, 64*blockSize) // past InlineMax: a data file
	apply(t, s, func(x *Txn) { x.Write("c", "vol", 0, data) })
	for b := range uint64(64) {
		readBlock(t, s, "vol", b)
	}
	settle(t, s)
	dead, err := os.Open(os.DevNull) // reads return nothing, as from a device gone
	if err != nil {
		t.Fatal(err)
	}
	s.fc.f.Close()
	s.fc.f = dead
	for round := range 2 {
		for b := range uint64(64) {
			if got := readBlock(t, s, "vol", b); !bytes.Equal(got, data[b*blockSize:(b+1)*blockSize]) {
				t.Fatalf("round %d: block %d differs from what was written after the flash failed", round, b)
			}
		}
	}
	st := s.FlashCache()
	if st.Hits != 0 || st.Errors != 1 || st.Used != 0 {
		t.Fatalf("after the flash failed: %+v, want no hits, one error, nothing held", st)
	}
	if !strings.Contains(st.Failed, "read of "+os.DevNull) || !strings.Contains(st.Failed, "short read") {
		t.Fatalf("the stats say %q of the failure, want the read, the file and the error", st.Failed)
	}
}
