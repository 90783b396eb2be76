package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

const (
	crashWorkers = 4
	crashSlots   = 8 // 4 KiB overwrite slots in each worker's VM-disk object
	crashKeep    = 3 // each worker keeps its last crashKeep S3-style objects

	crashBigPart  = 128 << 10 // overwrites of each worker's big object
	crashBigParts = 4
)

func crashSeed(g, j, kind int) int { return g*1_000_000 + j*10 + kind }

// crashTxn is transaction j of worker g. Every piece carries (g, j) so a
// partly applied transaction is detectable.
func crashTxn(g, j int) *Txn {
	var tx Txn
	tx.Write("1.0", fmt.Sprintf("vm-%d", g), uint64(j%crashSlots)*blockSize*3, pattern(crashSeed(g, j, 1), blockSize))
	tx.Put("1.0", fmt.Sprintf("s3-%d-%d", g, j), pattern(crashSeed(g, j, 2), 100<<10+j))
	if j >= crashKeep {
		tx.Delete("1.0", fmt.Sprintf("s3-%d-%d", g, j-crashKeep))
	}
	// Large overwrites of committed data: copy-on-write into the other slot.
	tx.Write("1.0", fmt.Sprintf("big-%d", g), uint64(j%crashBigParts)*crashBigPart, pattern(crashSeed(g, j, 5), crashBigPart))
	tx.Put("1.1", fmt.Sprintf("small-%d", g), pattern(crashSeed(g, j, 3), 3000))
	tx.OmapSet("1.1", "log", []byte(fmt.Sprintf("%d/%06d", g, j)), pattern(crashSeed(g, j, 4), 16))
	tx.SetXattr("1.0", fmt.Sprintf("vm-%d", g), "last", []byte(fmt.Sprint(j)))
	return &tx
}

// verifyCrash checks a store recovered from a crash: worker g's transactions
// must be applied exactly up to some L >= acked[g], each one whole.
func verifyCrash(t *testing.T, s *Store, acked []int) {
	t.Helper()
	kvs, _, err := s.OmapList("1.1", "log", nil, nil, 0)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	last := make([]int, crashWorkers)
	for g := range last {
		last[g] = -1
	}
	for _, kv := range kvs {
		var g, j int
		fmt.Sscanf(string(kv.Key), "%d/%d", &g, &j)
		if j != last[g]+1 {
			t.Fatalf("worker %d: txn %d present but %d missing", g, j, last[g]+1)
		}
		if !bytes.Equal(kv.Value, pattern(crashSeed(g, j, 4), 16)) {
			t.Fatalf("worker %d txn %d: omap value torn", g, j)
		}
		last[g] = j
	}
	for g := 0; g < crashWorkers; g++ {
		L := last[g]
		if L < acked[g] {
			t.Fatalf("worker %d: acknowledged txn %d lost (recovered up to %d)", g, acked[g], L)
		}
		vm := fmt.Sprintf("vm-%d", g)
		data := mustRead(t, s, "1.0", vm, 0, 0)
		for k := 0; k < crashSlots; k++ {
			want := pattern(crashSeed(g, -1, 1), 512<<10)[k*3*blockSize : k*3*blockSize+blockSize]
			for j := L; j >= 0; j-- {
				if j%crashSlots == k {
					want = pattern(crashSeed(g, j, 1), blockSize)
					break
				}
			}
			if !bytes.Equal(data[k*3*blockSize:k*3*blockSize+blockSize], want) {
				t.Fatalf("worker %d slot %d: wrong content for state after txn %d", g, k, L)
			}
		}
		big := mustRead(t, s, "1.0", fmt.Sprintf("big-%d", g), 0, 0)
		for k := 0; k < crashBigParts; k++ {
			want := pattern(crashSeed(g, -1, 5), crashBigParts*crashBigPart)[k*crashBigPart : (k+1)*crashBigPart]
			for j := L; j >= 0; j-- {
				if j%crashBigParts == k {
					want = pattern(crashSeed(g, j, 5), crashBigPart)
					break
				}
			}
			if !bytes.Equal(big[k*crashBigPart:(k+1)*crashBigPart], want) {
				t.Fatalf("worker %d big part %d: wrong content for state after txn %d", g, k, L)
			}
		}
		if L < 0 {
			continue
		}
		x, err := s.GetXattr("1.0", vm, "last")
		if err != nil || string(x) != fmt.Sprint(L) {
			t.Fatalf("worker %d: xattr %q, want %d (%v)", g, x, L, err)
		}
		small := mustRead(t, s, "1.1", fmt.Sprintf("small-%d", g), 0, 0)
		if !bytes.Equal(small, pattern(crashSeed(g, L, 3), 3000)) {
			t.Fatalf("worker %d: small object not from txn %d", g, L)
		}
		for j := max(0, L-crashKeep-2); j <= L+2; j++ {
			name := fmt.Sprintf("s3-%d-%d", g, j)
			got, err := s.Read("1.0", name, 0, 0)
			if j <= L && j > L-crashKeep {
				if err != nil || !bytes.Equal(got, pattern(crashSeed(g, j, 2), 100<<10+j)) {
					t.Fatalf("worker %d: %s wrong after txn %d: %v", g, name, L, err)
				}
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatalf("worker %d: %s should not exist after txn %d: %v", g, name, L, err)
			}
		}
	}
}

func TestCrashConsistency(t *testing.T) {
	crashConsistency(t, 3*time.Millisecond, 0, 0)
}

// TestCrashConsistencyWriteback runs the crash workload with a small
// write-back area: the 4 KiB overwrites go into it, the destager runs
// often and writers are held when it is full, so the crash clones are
// taken with blocks in the area and in every step of destaging.
func TestCrashConsistencyWriteback(t *testing.T) {
	defer func(d time.Duration) { wbIdlePause = d }(wbIdlePause)
	wbIdlePause = 2 * time.Millisecond
	s := crashConsistency(t, 3*time.Millisecond, 0, 24*blockSize)
	if st := s.Writeback(); st.Written == 0 || st.Destaged == 0 {
		t.Errorf("the workload did not go through the area: %+v", st)
	}
}

// With a commit log of three 64 KiB segments and no timed checkpoints, the
// log wraps every few dozen writes onto segments that still hold journal
// records (the only copy of deferred writes the page cache has not synced),
// so writers must wait for the checkpoint they ask for. Freeing such a
// segment early loses acknowledged overwrites in the crash clones.
func TestCrashConsistencyHeldLog(t *testing.T) {
	withLogSegment(t, 64<<10)
	s := crashConsistency(t, time.Hour, 20<<10, 0)
	if s.log.heldWaits.Load() == 0 || s.log.large.Load() == 0 {
		t.Errorf("writers waited for held journal records %d times, large batches %d: the test wants both",
			s.log.heldWaits.Load(), s.log.large.Load())
	}
	t.Logf("%d waits for held journal records, %d segment switches, %d large batches",
		s.log.heldWaits.Load(), s.log.wraps.Load(), s.log.large.Load())
}

// crashConsistency runs the crash workload with timed checkpoints every
// interval and returns the closed store. With inline > 0 one more writer
// puts objects of that size, which live in their index records; wb sizes
// the write-back area (0: none).
func crashConsistency(t *testing.T, interval time.Duration, inline int, wb int64) *Store {
	oldInterval := checkpointInterval
	checkpointInterval = interval
	defer func() { checkpointInterval = oldInterval }()

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: fs, ReserveBytes: -1, WritebackBytes: wb})
	if err != nil {
		t.Fatal(err)
	}
	for g := 0; g < crashWorkers; g++ {
		apply(t, s, func(tx *Txn) { tx.Put("1.0", fmt.Sprintf("vm-%d", g), pattern(crashSeed(g, -1, 1), 512<<10)) })
		apply(t, s, func(tx *Txn) {
			tx.Put("1.0", fmt.Sprintf("big-%d", g), pattern(crashSeed(g, -1, 5), crashBigParts*crashBigPart))
		})
	}
	var acked [crashWorkers]atomic.Int64
	for g := range acked {
		acked[g].Store(-1)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < crashWorkers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for j := 0; !stop.Load() && j < 400; j++ {
				if err := s.Apply(crashTxn(g, j)); err != nil {
					t.Errorf("worker %d txn %d: %v", g, j, err)
					return
				}
				acked[g].Store(int64(j))
			}
		}(g)
	}
	var inlineAcked atomic.Int64
	inlineObj := func(i int) []byte { return pattern(crashSeed(crashWorkers, i, 9), inline) }
	if inline > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; !stop.Load() && i <= 200; i++ {
				var tx Txn
				tx.Put("1.0", fmt.Sprint("inline-", i), inlineObj(i))
				if err := s.Apply(&tx); err != nil {
					t.Errorf("inline put %d: %v", i, err)
					return
				}
				inlineAcked.Store(int64(i))
			}
		}()
	}
	replayed := 0
	var wbFound int64
	check := func(pct int) {
		snap := make([]int, crashWorkers)
		for g := range snap {
			snap[g] = int(acked[g].Load())
		}
		inlineSnap := int(inlineAcked.Load())
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
		if pct > 0 {
			cfg.RNG = randv2.New(randv2.NewPCG(uint64(rng.Int63()), 1))
		}
		clone := fs.CrashClone(cfg)
		s2, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: clone, ReserveBytes: -1, WritebackBytes: wb})
		if err != nil {
			t.Fatalf("open crash clone (unsynced %d%%): %v", pct, err)
		}
		verifyCrash(t, s2, snap)
		for i := 1; i <= inlineSnap; i++ {
			if got, err := s2.Read("1.0", fmt.Sprint("inline-", i), 0, 0); err != nil || !bytes.Equal(got, inlineObj(i)) {
				t.Fatalf("acknowledged inline object %d of %d lost or damaged (%v)", i, inlineSnap, err)
			}
		}
		replayed += s2.replayed
		wbFound += int64(s2.wbLoaded)
		t.Logf("crash clone (unsynced %d%%): acked %v, replayed %d journal records, %d blocks in the write-back area",
			pct, snap, s2.replayed, s2.wbLoaded)
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		// A second recovery of the recovered state must be a no-op.
		s3, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: clone, ReserveBytes: -1, WritebackBytes: wb})
		if err != nil {
			t.Fatal(err)
		}
		verifyCrash(t, s3, snap)
		s3.Close()
	}
	for i := 0; i < 8; i++ {
		time.Sleep(time.Duration(rng.Intn(40)) * time.Millisecond)
		check([]int{0, 50, 90}[i%3])
	}
	stop.Store(true)
	wg.Wait()
	check(0)
	check(50)
	if wb == 0 && replayed == 0 {
		t.Error("no crash clone needed journal replay; the test did not exercise it")
	}
	if wb > 0 && wbFound == 0 {
		t.Error("no crash clone had blocks in the write-back area; the test did not exercise it")
	}
	if s.cowWrites.Load() == 0 {
		t.Error("no overwrite was copy-on-write; the test did not exercise it")
	}
	t.Logf("%d copy-on-write overwrites", s.cowWrites.Load())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Checkpoints drop their journal records in the order they synced them. A
// later checkpoint holds the newer record of a block whose older record an
// earlier one holds: had its drop committed first, a crash would replay
// the older record over the newer data (found by TestCrashConsistency
// with GOMAXPROCS=1, where the newer drop's goroutine tends to run first).
func TestCheckpointsDropInOrder(t *testing.T) {
	defer func(d time.Duration) { checkpointInterval = d }(checkpointInterval)
	checkpointInterval = time.Hour // only the test's checkpoints run
	fs := vfs.NewCrashableMem()
	opts := Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: fs, ReserveBytes: -1}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vm", pattern(1, 512<<10)) })
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 0, pattern(2, blockSize)) })
	first, err := s.syncJournal()
	if err != nil || len(first) == 0 {
		t.Fatalf("first checkpoint: %v, %d records", err, len(first))
	}
	newer := pattern(3, blockSize)
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "vm", 0, newer) })
	second, err := s.syncJournal()
	if err != nil || len(second) == 0 {
		t.Fatalf("second checkpoint: %v, %d records", err, len(second))
	}
	dropped := make(chan error, 1)
	go func() { dropped <- s.dropJournal(second) }()
	time.Sleep(100 * time.Millisecond)

	opts.FS = fs.CrashClone(vfs.CrashCloneCfg{})
	s2, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Read("1.0", "vm", 0, blockSize)
	if err != nil || !bytes.Equal(got, newer) {
		t.Errorf("after a crash between the checkpoints' drops the block reads %v (newest: %v)", err, bytes.Equal(got, newer))
	}
	s2.Close()
	if err := s.dropJournal(first); err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	s.Close()
}
