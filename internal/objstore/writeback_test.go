package objstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	randv2 "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openWB opens a store on fs with a write-back area of area bytes, the
// meta directory apart from the data as on an OSD with flash.
func openWB(t testing.TB, fs vfs.FS, area int64) *Store {
	t.Helper()
	s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: fs, ReserveBytes: -1, WritebackBytes: area})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// quietDestager keeps the destager from running on its own during a test.
func quietDestager(t testing.TB) {
	old := wbIdlePause
	wbIdlePause = time.Hour
	t.Cleanup(func() { wbIdlePause = old })
}

// fileBlock reads block b of the object's data file as it lies on disk.
func fileBlock(t testing.TB, s *Store, fs vfs.FS, coll, name string, b uint64) []byte {
	t.Helper()
	r, ok, err := s.loadRec(coll, name)
	if err != nil || !ok || r.inline {
		t.Fatalf("record of %s/%s: %v %v", coll, name, ok, err)
	}
	f, err := fs.Open(s.filePath(r.fileID))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, blockSize)
	f.ReadAt(buf, int64(b*blockSize))
	return buf
}

// versioned is a block that says which write it came from.
func versioned(block, v int) []byte {
	b := pattern(block*100000+v, blockSize)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// A block overwritten many times is one key in the area, destaged once:
// reads return the newest content before, and after, when the data file
// holds it and the area is empty.
func TestWritebackMergesOverwrites(t *testing.T) {
	quietDestager(t)
	fs := vfs.NewMem()
	s := openWB(t, fs, 1<<20)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", pattern(1, 256<<10)) })
	for v := 1; v <= 100; v++ {
		apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 5*blockSize, versioned(5, v)) })
	}
	newest := versioned(5, 100)
	st := s.Writeback()
	if st.DirtyBytes != blockSize || st.Files != 1 || st.Written != 100*blockSize {
		t.Fatalf("after 100 overwrites of one block: %+v", st)
	}
	if got := mustRead(t, s, "1.0", "vm", 5*blockSize, blockSize); !bytes.Equal(got, newest) {
		t.Fatal("the area's block is not what a read returns")
	}
	if bytes.Equal(fileBlock(t, s, fs, "1.0", "vm", 5), newest) {
		t.Fatal("the data file got the block before any destage")
	}
	n, err := s.destagePass()
	if err != nil || n != blockSize {
		t.Fatalf("destage: %d bytes, %v; want one block", n, err)
	}
	if st := s.Writeback(); st.DirtyBytes != 0 || st.Destaged != blockSize || st.Files != 0 {
		t.Fatalf("after the destage: %+v", st)
	}
	if !bytes.Equal(fileBlock(t, s, fs, "1.0", "vm", 5), newest) {
		t.Fatal("the destaged block is not in the data file")
	}
	whole := mustRead(t, s, "1.0", "vm", 0, 0)
	want := pattern(1, 256<<10)
	copy(want[5*blockSize:], newest)
	if !bytes.Equal(whole, want) {
		t.Fatal("after the destage the object reads wrong")
	}
}

// Reads while the destager runs flat out return the newest acknowledged
// write of each block, never an older one.
func TestWritebackReadsDuringDestage(t *testing.T) {
	defer func(d time.Duration) { wbIdlePause = d }(wbIdlePause)
	wbIdlePause = time.Millisecond
	s := openWB(t, vfs.NewMem(), 64<<10)
	defer s.Close()
	const blocks = 32
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", make([]byte, blocks*blockSize)) })
	var acked [blocks]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := 1; v <= 1000 && !stop.Load(); v++ {
			b := (v * 7) % blocks
			var tx Txn
			tx.Write("1.0", "vm", uint64(b)*blockSize, versioned(b, v))
			if err := s.Apply(&tx); err != nil {
				t.Error(err)
				return
			}
			acked[b].Store(int64(v))
		}
		stop.Store(true)
	}()
	for reads := 0; !stop.Load() || reads < 100; reads++ {
		b := reads % blocks
		min := acked[b].Load()
		got, err := s.Read("1.0", "vm", uint64(b)*blockSize, blockSize)
		if err != nil {
			t.Fatalf("read block %d: %v", b, err)
		}
		if v := int64(binary.BigEndian.Uint64(got)); v < min || (v > 0 && !bytes.Equal(got, versioned(b, int(v)))) {
			t.Fatalf("block %d reads version %d, acknowledged %d before the read", b, v, min)
		}
	}
	wg.Wait()
	if st := s.Writeback(); st.Destaged == 0 {
		t.Fatalf("nothing was destaged while the test read: %+v", st)
	}
}

// SetWriteback(false) drains the area to nothing and keeps new writes out
// of it; on again takes them again.
func TestWritebackOffDrains(t *testing.T) {
	defer func(d time.Duration) { wbIdlePause = d }(wbIdlePause)
	wbIdlePause = time.Hour
	s := openWB(t, vfs.NewMem(), 1<<20)
	defer s.Close()
	want := pattern(1, 512<<10)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", want) })
	write := func(b, v int) {
		apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", uint64(b)*blockSize, versioned(b, v)) })
		copy(want[b*blockSize:], versioned(b, v))
	}
	for b := 0; b < 40; b++ {
		write(b*3, 1)
	}
	if st := s.Writeback(); st.DirtyBytes != 40*blockSize {
		t.Fatalf("area before off: %+v", st)
	}
	if err := s.SetWriteback(false); err != nil {
		t.Fatal(err)
	}
	write(3, 2) // a block in the area, rewritten while it drains: journaled, its key dropped
	if !s.waitDrained(10 * time.Second) {
		t.Fatalf("the area did not drain: %+v", s.Writeback())
	}
	for b := 0; b < 10; b++ {
		write(b*5, 3)
	}
	if st := s.Writeback(); st.DirtyBytes != 0 || st.On {
		t.Fatalf("writes went into the area while it was off: %+v", st)
	}
	if !bytes.Equal(mustRead(t, s, "1.0", "vm", 0, 0), want) {
		t.Fatal("content wrong after the drain")
	}
	if err := s.SetWriteback(true); err != nil {
		t.Fatal(err)
	}
	before := s.Writeback().Written
	write(7, 4)
	// Written, not DirtyBytes: the destager may have moved the block on
	// already.
	if st := s.Writeback(); st.Written-before != blockSize {
		t.Fatalf("on again, a small write did not go into the area: %d bytes went in: %+v", st.Written-before, st)
	}
	if !bytes.Equal(mustRead(t, s, "1.0", "vm", 0, 0), want) {
		t.Fatal("content wrong after on again")
	}
	s2 := openWB(t, vfs.NewMem(), 0)
	defer s2.Close()
	if err := s2.SetWriteback(true); err == nil {
		t.Fatal("a store without an area turned it on")
	}
}

// A crash at each step of a destage pass (after the data write, after the
// sync, after the keys' deletion), keeping none, half or most of what was
// not synced: the recovered store has every acknowledged write, rebuilds
// the area's view from its keys and serves from it, and a second pass
// there empties it.
func TestWritebackCrashDuringDestage(t *testing.T) {
	quietDestager(t)
	fs := vfs.NewCrashableMem()
	s := openWB(t, fs, 1<<20)
	want := map[string][]byte{}
	for i, n := range []string{"a", "b", "c"} {
		want[n] = pattern(10+i, 300<<10)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", n, want[n]) })
	}
	for v := 1; v <= 60; v++ {
		n, b := []string{"a", "b", "c"}[v%3], (v*13)%70
		apply(t, s, func(tx *Txn) { tx.Write("1.0", n, uint64(b)*blockSize+100, versioned(b, v)[:3000]) })
		copy(want[n][b*blockSize+100:], versioned(b, v)[:3000])
	}
	dirty := s.Writeback()
	type clone struct {
		step string
		fs   vfs.FS
	}
	var clones []clone
	rng := randv2.New(randv2.NewPCG(1, 2))
	setDestageHook(func(step string) {
		if step == "writing" {
			return // per file; the steps of the pass are enough here
		}
		for _, pct := range []int{0, 50, 90} {
			cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng}
			clones = append(clones, clone{fmt.Sprintf("%s, %d%% of unsynced kept", step, pct), fs.CrashClone(cfg)})
		}
	})
	n, err := s.destagePass()
	setDestageHook(nil)
	if err != nil || n == 0 {
		t.Fatalf("destage: %d, %v", n, err)
	}
	s.Close()
	for _, c := range clones {
		s2 := openWB(t, c.fs, 1<<20)
		st := s2.Writeback()
		if c.step[:7] != "dropped" && (st.DirtyBytes != dirty.DirtyBytes || st.Files != dirty.Files) {
			t.Fatalf("crash after %s: the area reopened as %+v, held %+v", c.step, st, dirty)
		}
		for name, w := range want {
			if got := mustRead(t, s2, "1.0", name, 0, 0); !bytes.Equal(got, w) {
				t.Fatalf("crash after %s: %s reads wrong", c.step, name)
			}
		}
		if !s2.waitDrained(10 * time.Second) {
			t.Fatalf("crash after %s: the reopened area did not drain", c.step)
		}
		for name, w := range want {
			if got := mustRead(t, s2, "1.0", name, 0, 0); !bytes.Equal(got, w) {
				t.Fatalf("crash after %s, drained: %s reads wrong", c.step, name)
			}
		}
		s2.Close()
	}
	if len(clones) != 9 {
		t.Fatalf("%d crash clones, want 3 steps × 3", len(clones))
	}
}

// Deletes, Put-over, truncates and large overwrites of blocks in the area
// drop their keys in the same commit: nothing stale comes back, before or
// after a power loss.
func TestWritebackDropsKeys(t *testing.T) {
	quietDestager(t)
	fs := vfs.NewCrashableMem()
	s := openWB(t, fs, 1<<20)
	want := map[string][]byte{}
	for _, n := range []string{"del", "put", "trunc", "cow"} {
		want[n] = pattern(len(n), 512<<10)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", n, want[n]) })
		for b := 0; b < 128; b += 9 {
			apply(t, s, func(tx *Txn) { tx.Write("1.0", n, uint64(b)*blockSize, versioned(b, 1)) })
			copy(want[n][b*blockSize:], versioned(b, 1))
		}
	}
	before := s.Writeback().DirtyBytes
	apply(t, s, func(tx *Txn) { tx.Delete("1.0", "del") })
	delete(want, "del")
	want["put"] = pattern(99, 200<<10)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "put", want["put"]) })
	apply(t, s, func(tx *Txn) { tx.Truncate("1.0", "trunc", 100*blockSize+10) })
	want["trunc"] = want["trunc"][:100*blockSize+10]
	apply(t, s, func(tx *Txn) { tx.Truncate("1.0", "trunc", 450<<10) }) // zeros where the cut keys were
	want["trunc"] = append(want["trunc"], make([]byte, 450<<10-len(want["trunc"]))...)
	big := pattern(7, 256<<10) // copy-on-write over blocks 0..63, 8 of them in the area
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "cow", 0, big) })
	copy(want["cow"], big)
	after := s.Writeback().DirtyBytes
	// del and put lost all 15 blocks, trunc the 3 past block 100 (and its
	// partial block 100 went into the area), cow 8.
	if wantDirty := before - (15+15+3-1+8)*blockSize; after != wantDirty {
		t.Fatalf("area holds %d bytes, want %d", after, wantDirty)
	}
	check := func(s *Store, when string) {
		for n, w := range want {
			if got := mustRead(t, s, "1.0", n, 0, 0); !bytes.Equal(got, w) {
				t.Fatalf("%s: %s reads wrong", when, n)
			}
		}
		if _, err := s.Read("1.0", "del", 0, 0); err == nil {
			t.Fatalf("%s: the deleted object is back", when)
		}
	}
	check(s, "before the crash")
	s2 := openWB(t, fs.CrashClone(vfs.CrashCloneCfg{}), 1<<20)
	defer s2.Close()
	if st := s2.Writeback(); st.DirtyBytes != after {
		t.Fatalf("reopened area holds %d bytes, want %d", st.DirtyBytes, after)
	}
	check(s2, "after the crash")
	s.Close()
}

// Writers into a full area are slowed, then held, not failed, while the
// destager is slow; all of them finish.
func TestWritebackBackPressure(t *testing.T) {
	defer func(d time.Duration) { wbIdlePause = d }(wbIdlePause)
	wbIdlePause = 20 * time.Millisecond
	setDestageHook(func(step string) {
		if step == "written" {
			time.Sleep(5 * time.Millisecond) // a slow data disk
		}
	})
	defer func() { setDestageHook(nil) }()
	s := openWB(t, vfs.NewMem(), 32*blockSize)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", make([]byte, 1<<20)) })
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for v := 1; v <= 100; v++ {
				b := (g*1000 + v*17) % 256
				var tx Txn
				tx.Write("1.0", "vm", uint64(b)*blockSize, versioned(b, v))
				if err := s.Apply(&tx); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	st := s.Writeback()
	if st.PacedWrites == 0 {
		t.Fatalf("no writer was paced: %+v", st)
	}
	if st.DirtyBytes > st.AreaBytes+4*blockSize {
		t.Fatalf("the area overflowed: %+v", st)
	}
	t.Logf("%+v", st)
}

// W keys round-trip, and the decoder refuses anything else.
func FuzzDecodeWBKey(f *testing.F) {
	f.Add(wbKey(1, 0))
	f.Add(wbKey(0xffff, 1<<20))
	f.Add([]byte{tagWriteback})
	f.Add(append(wbKey(3, 3), 0))
	f.Fuzz(func(t *testing.T, k []byte) {
		fid, b, err := decodeWBKey(k)
		if err != nil {
			return
		}
		if !bytes.Equal(wbKey(fid, b), k) {
			t.Fatalf("%x decodes to %d/%d, which encodes to %x", k, fid, b, wbKey(fid, b))
		}
	})
}

// A write that puts a block in the data file itself (here journaled, the
// area being off) while the destager writes the block's older value there
// waits for that write, so the older value never lands over it.
func TestWritebackWriterWaitsForDestage(t *testing.T) {
	quietDestager(t)
	fs := vfs.NewCrashableMem()
	s := openWB(t, fs, 1<<20)
	defer s.Close()
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", pattern(1, 256<<10)) })
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 3*blockSize, versioned(3, 1)) })
	newer := versioned(3, 2)
	applied := make(chan error, 1)
	var once sync.Once
	// Set before the area goes off: that wakes the destager, whose pass
	// (or the test's own, whichever comes first) runs the hook.
	setDestageHook(func(step string) {
		if step != "writing" {
			return
		}
		once.Do(func() {
			go func() {
				var tx Txn
				tx.Write("1.0", "vm", 3*blockSize, newer)
				applied <- s.Apply(&tx)
			}()
			select {
			case err := <-applied:
				t.Errorf("a journaled write of the block went ahead of the destager's write (%v)", err)
				applied <- err
			case <-time.After(100 * time.Millisecond):
			}
		})
	})
	defer func() { setDestageHook(nil) }()
	if err := s.SetWriteback(false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.destagePass(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no destage pass wrote the block, or the write never finished")
	}
	if got := mustRead(t, s, "1.0", "vm", 3*blockSize, blockSize); !bytes.Equal(got, newer) {
		t.Fatal("the block reads an older value than the newest write")
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	s2 := openWB(t, fs.CrashClone(vfs.CrashCloneCfg{}), 1<<20)
	defer s2.Close()
	if got := mustRead(t, s2, "1.0", "vm", 3*blockSize, blockSize); !bytes.Equal(got, newer) {
		t.Fatal("after a crash the block reads an older value than the newest write")
	}
}

// A sequential stream of 64 KiB overwrites puts its first cutoff into the
// area and bypasses it after, dropping the W keys of the blocks it
// rewrites; random writes still go in; the object reads whole before and
// after a reopen. With the bypass off the whole stream goes in.
func TestWritebackSequentialBypass(t *testing.T) {
	quietDestager(t)
	for _, cutoff := range []int64{0, -1} {
		fs := vfs.NewMem()
		s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: fs, ReserveBytes: -1, WritebackBytes: 64 << 20, SequentialCutoff: cutoff})
		if err != nil {
			t.Fatal(err)
		}
		want := pattern(1, 4<<20)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", want) })
		apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 300*blockSize, versioned(300, 1)) })
		for off := 0; off < 4<<20; off += 64 << 10 {
			chunk := pattern(off+7, 64<<10)
			copy(want[off:], chunk)
			apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", uint64(off), chunk) })
		}
		apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 77*blockSize, versioned(77, 2)) })
		copy(want[77*blockSize:], versioned(77, 2))
		st := s.Writeback()
		inArea := int64(1<<20 + 2*blockSize) // the run's first MiB, blocks 300 and 77
		if cutoff < 0 {
			inArea = 4<<20 + 2*blockSize
		}
		if st.Written != inArea || st.Written+st.Bypassed != 4<<20+2*blockSize {
			t.Fatalf("cutoff %d: %d bytes went into the area and %d past it, want %d in", cutoff, st.Written, st.Bypassed, inArea)
		}
		if cutoff == 0 && (st.DirtyBytes != 1<<20 || s.wb.holds(fileOf(t, s, "vm"), 300)) {
			t.Fatalf("the bypassing writes left %d dirty bytes (want the first MiB) or block 300's old key", st.DirtyBytes)
		}
		if got := mustRead(t, s, "1.0", "vm", 0, 0); !bytes.Equal(got, want) {
			t.Fatalf("cutoff %d: the object reads wrong", cutoff)
		}
		s.Close()
		s = openWB(t, fs, 64<<20)
		if got := mustRead(t, s, "1.0", "vm", 0, 0); !bytes.Equal(got, want) {
			t.Fatalf("cutoff %d: after a reopen the object reads wrong", cutoff)
		}
		s.Close()
	}
}

func fileOf(t testing.TB, s *Store, name string) uint64 {
	t.Helper()
	r, ok, err := s.loadRec("1.0", name)
	if err != nil || !ok {
		t.Fatalf("record of %s: %v %v", name, ok, err)
	}
	return r.fileID
}
