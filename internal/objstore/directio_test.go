package objstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// TestDirectIOPut: a large new object on a real filesystem is written with
// O_DIRECT (the store keeps direct IO on) and reads back byte for byte,
// also after a reopen, which reads it from the disk rather than a cache.
func TestDirectIOPut(t *testing.T) {
	dir := t.TempDir()
	s := openReal(t, dir)
	data := pattern(9, 4<<20+4096*3+100) // not a whole number of blocks
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "big", data) })
	if !s.directIO.Load() {
		t.Skip("this filesystem refuses O_DIRECT; the buffered path was used")
	}
	got, err := s.Read("1.0", "big", 0, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back after a direct write: %v", err)
	}
	s = reopenReal(t, s, dir)
	defer s.Close()
	got, err = s.Read("1.0", "big", 0, 0)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back after reopen: %v", err)
	}
}

// TestDirectIORead: large reads on a real filesystem go O_DIRECT or through
// the page cache (first or second touch, pending deferred writes); every way
// returns what was written (deferred overwrites included), at any offset, and
// a block corrupted on disk is still refused.
func TestDirectIORead(t *testing.T) {
	s := openReal(t, t.TempDir())
	defer s.Close()
	want := pattern(3, 2<<20+777)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "big", want) })
	if !s.directIO.Load() {
		t.Skip("this filesystem refuses O_DIRECT")
	}
	check := func(stage string) {
		t.Helper()
		for _, r := range [][2]uint64{{0, 0}, {5000, 300000}, {4096, 1 << 20}, {2<<20 - 100, 0}, {123, 10}} {
			got, err := s.Read("1.0", "big", r[0], r[1])
			end := uint64(len(want))
			if r[1] > 0 && r[0]+r[1] < end {
				end = r[0] + r[1]
			}
			if err != nil || !bytes.Equal(got, want[r[0]:end]) {
				t.Fatalf("%s: read [%d, +%d): %v (got %d bytes)", stage, r[0], r[1], err, len(got))
			}
		}
	}
	check("after a direct put")
	df := s.files[firstFileID(t, s)]
	if !s.cached(df, 4096, 1<<20) && !s.noCachestat.Load() {
		t.Fatal("the first reads left nothing in the page cache; the second touch of a region should fill it")
	}
	if df.direct < 0 {
		t.Fatal("a 2 MiB read did not open the file for direct IO")
	}

	// Whole-object reads go direct however often they come.
	whole := pattern(5, 3<<20)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "whole", whole) })
	for range 3 {
		if got, err := s.Read("1.0", "whole", 0, 0); err != nil || !bytes.Equal(got, whole) {
			t.Fatalf("whole-object read: %v", err)
		}
	}
	wdf := s.files[fileIDOf(t, s, "whole")]
	if s.cached(wdf, 0, 4096) || s.cached(wdf, 1<<20, 4096) {
		t.Fatal("repeated 3 MiB reads of an object went through the page cache")
	}

	// A small overwrite is deferred: the page cache is newer than the disk
	// until the checkpoint, and reads must see it either way.
	patch := pattern(4, 10000)
	var tx2 Txn
	tx2.Write("1.0", "big", 70000, patch)
	if err := s.Apply(&tx2); err != nil {
		t.Fatal(err)
	}
	copy(want[70000:], patch)
	check("with a pending deferred write") // (unless the 500 ms checkpointer just ran)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if s.hasPending(firstFileID(t, s)) {
		t.Fatal("checkpoint left the journal record pending")
	}
	check("after the checkpoint")

	path, _ := s.DataPath("1.0", "big")
	flipByte(t, vfs.Default, path, 1<<20+5)
	if _, err := s.Read("1.0", "big", 0, 0); !IsCorruption(err) {
		t.Fatalf("a corrupted block read directly: err = %v, want corruption", err)
	}
}

// fileIDOf returns the data file of an object of collection 1.0.
func fileIDOf(t *testing.T, s *Store, name string) uint64 {
	t.Helper()
	defer s.rlock("1.0", name)()
	r, ok, err := s.loadRec("1.0", name)
	if err != nil || !ok || r.inline {
		t.Fatalf("object %q has no data file: %v", name, err)
	}
	return r.fileID
}

func firstFileID(t *testing.T, s *Store) uint64 {
	t.Helper()
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	for id := range s.files {
		return id
	}
	t.Fatal("no open data file")
	return 0
}

// TestCopyOnWriteRealDisk: large overwrites of committed data go to the
// block's other slot with O_DIRECT and no journal record, the old slot is
// given back to the filesystem, the data reads back (also after a reopen),
// and a corrupted block in slot B is refused like any other.
func TestCopyOnWriteRealDisk(t *testing.T) {
	dir := t.TempDir()
	s := openReal(t, dir)
	want := pattern(5, 4<<20)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "vol", want) })
	seq := s.jseq.Load()
	for i := 0; i < 3; i++ {
		patch := pattern(10+i, 1<<20)
		apply(t, s, func(tx *Txn) { tx.Write("1.0", "vol", 1<<20, patch) })
		copy(want[1<<20:], patch)
		if got := mustRead(t, s, "1.0", "vol", 0, 0); !bytes.Equal(got, want) {
			t.Fatalf("overwrite %d reads back differently", i)
		}
	}
	if n := s.cowWrites.Load(); n != 3 {
		t.Fatalf("%d of 3 large overwrites were copy-on-write", n)
	}
	if s.jseq.Load() != seq {
		t.Fatal("a copy-on-write overwrite went through the journal")
	}
	path, _ := s.DataPath("1.0", "vol")
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 4<<20+256<<10 {
		t.Fatalf("data file uses %d bytes on disk for a 4 MiB object: the old slots were not freed", used)
	}
	s = reopenReal(t, s, dir)
	defer s.Close()
	if got := mustRead(t, s, "1.0", "vol", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("after reopen the object reads differently")
	}
	// After an odd number of flips the patched megabyte lives in slot B.
	flipByte(t, vfs.Default, path, int64(s.slotBase)+1<<20+9)
	if _, err := s.Read("1.0", "vol", 1<<20, 4096); !IsCorruption(err) {
		t.Fatalf("a corrupted block in slot B: err = %v, want corruption", err)
	}
	if got, err := s.Read("1.0", "vol", 0, 1<<20); err != nil || !bytes.Equal(got, want[:1<<20]) {
		t.Fatalf("blocks in slot A next to a corrupted one: %v", err)
	}
}

// TestWriteUncachedAnyBuffer: O_DIRECT needs aligned memory; a buffer that
// is not aligned is copied into one, an aligned one is written as it is;
// a write asked to be durable (RWF_DSYNC) says so.
func TestWriteUncachedAnyBuffer(t *testing.T) {
	s := openReal(t, t.TempDir())
	defer s.Close()
	const fid = 1 << 40
	if err := os.WriteFile(s.filePath(fid), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := pattern(7, 256<<10)
	aligned := bufpool.Aligned(len(want))
	copy(aligned, want[:128<<10])
	unaligned := make([]byte, 128<<10+1)[1:]
	copy(unaligned, want[128<<10:])
	df, err := s.openFile(fid)
	if err != nil {
		t.Fatal(err)
	}
	defer s.releaseFile(df)
	for i, b := range [][]byte{aligned[:128<<10], unaligned} {
		ok, durable, err := s.writeUncached(df, fid, uint64(i)*128<<10, b, i == 1)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Skip("this filesystem refuses O_DIRECT")
		}
		if durable != (i == 1 && !s.noDsync.Load()) {
			t.Fatalf("write %d: durable = %v", i, durable)
		}
	}
	got, err := os.ReadFile(s.filePath(fid))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file holds %d bytes, not what was written (%v)", len(got), err)
	}
}

// reopenReal closes s and opens the store under dir again.
func reopenReal(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openReal(t, dir)
}

// openReal opens a store on the real filesystem under dir.
func openReal(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Large reads land in recycled buffers, which are not zeroed: the blocks of
// a sparse object that were never written must still read as zeros.
func TestLargeReadOfSparseObjectReadsZeros(t *testing.T) {
	s := openReal(t, t.TempDir())
	defer s.Close()
	const size = 1 << 20
	tail := pattern(5, 4096)
	var tx Txn
	tx.Write("1.0", "sparse", size-4096, tail) // only the last block
	if err := s.Apply(&tx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		dirty := bufpool.Get(size)
		for i := range dirty {
			dirty[i] = 0xaa
		}
		bufpool.Put(dirty) // the next large read may well get this buffer
		// Past the read cache, into a pooled buffer.
		got, _, sums, release, err := s.read("1.0", "sparse", 0, size, viaDisk)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[size-4096:], tail) {
			t.Fatal("the written block reads back wrong")
		}
		if i := bytes.IndexFunc(got[:size-4096], func(r rune) bool { return r != 0 }); i >= 0 {
			t.Fatalf("byte %d of a never-written block reads %#x, want 0", i, got[i])
		}
		// The checksums come with the read, written blocks and holes alike.
		if len(sums) != size/blockSize {
			t.Fatalf("%d checksums for a read of %d blocks", len(sums), size/blockSize)
		}
		for b, sum := range sums {
			if sum != blockCRC(got[b*blockSize:(b+1)*blockSize]) {
				t.Fatalf("block %d: checksum %#x does not match its data", b, sum)
			}
		}
		release()
	}
}

// TestAlignedDataWrittenInPlace: large data at an aligned address (as it
// arrives in a frame) is written to disk from where it lies, the caller's
// buffer is never changed, and a txn that writes the same blocks twice
// still gets its own copies.
func TestAlignedDataWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	s := openReal(t, dir)
	defer s.Close()
	src := bufpool.Aligned(4 << 20)
	copy(src, pattern(7, len(src)))
	orig := bytes.Clone(src)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "a", src) })
	if n := s.inPlace.Load(); n != 1024 {
		t.Fatalf("%d of 1024 blocks written from the caller's buffer", n)
	}
	if got := mustRead(t, s, "1.0", "a", 0, 0); !bytes.Equal(got, orig) {
		t.Fatal("object written in place reads back differently")
	}

	// Unaligned data (4 MiB + 100 bytes, off by 512) takes the copying path.
	odd := bufpool.Aligned(5 << 20)[512 : 512+4<<20+100]
	copy(odd, pattern(8, len(odd)))
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "b", odd) })
	if n := s.inPlace.Load(); n != 1024 {
		t.Fatalf("unaligned data: %d blocks written in place, want still 1024", n)
	}
	if got := mustRead(t, s, "1.0", "b", 0, 0); !bytes.Equal(got, odd) {
		t.Fatal("unaligned object reads back differently")
	}

	// Two writes to the same blocks in one txn: the second must not land
	// in the first one's buffer.
	patch := pattern(9, 8192)
	apply(t, s, func(tx *Txn) {
		tx.Write("1.0", "c", 0, src)
		tx.Write("1.0", "c", 4096, patch)
	})
	if n := s.inPlace.Load(); n != 1024 {
		t.Fatalf("a txn with two writes wrote %d blocks in place, want none", n-1024)
	}
	if !bytes.Equal(src, orig) {
		t.Fatal("Apply changed the caller's data")
	}
	want := bytes.Clone(orig)
	copy(want[4096:], patch)
	if got := mustRead(t, s, "1.0", "c", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object with two writes reads back differently")
	}

	// Checksums that came with the data are used, not recomputed
	// (verifySums, on in this package's tests, recomputes and compares).
	sums := make([]uint32, len(src)/blockSize)
	for i := range sums {
		sums[i] = blockCRC(src[i*blockSize : (i+1)*blockSize])
	}
	apply(t, s, func(tx *Txn) { tx.PutSummed("1.0", "d", src, sums) })
	apply(t, s, func(tx *Txn) { tx.WriteSummed("1.0", "d", 1<<20, src[:1<<20], sums[:256]) })
	if n := s.presummed.Load(); n != 1024+256 {
		t.Fatalf("%d of %d blocks took the checksums given", n, 1024+256)
	}
	want = bytes.Clone(orig)
	copy(want[1<<20:], orig[:1<<20])
	if got := mustRead(t, s, "1.0", "d", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object written with its checksums reads back differently")
	}

	// A wrong checksum makes its block unreadable, never wrong data
	// readable.
	verifySums = false
	defer func() { verifySums = true }()
	bad := slices.Clone(sums)
	bad[3] ^= 1
	apply(t, s, func(tx *Txn) { tx.PutSummed("1.0", "e", src, bad) })
	if _, err := s.Read("1.0", "e", 3*blockSize, blockSize); !IsCorruption(err) {
		t.Fatalf("block with a wrong checksum: err = %v, want corruption", err)
	}
	if got := mustRead(t, s, "1.0", "e", 4*blockSize, blockSize); !bytes.Equal(got, orig[4*blockSize:5*blockSize]) {
		t.Fatal("the next block reads back differently")
	}
}

// A checkpoint of deferred writes to many files syncs the filesystem once;
// one of a few files syncs each of them.
func TestCheckpointOfManyFilesSyncsFilesystem(t *testing.T) {
	defer func(d time.Duration) { checkpointInterval = d }(checkpointInterval)
	checkpointInterval = time.Hour // only the test's checkpoints run
	dir := t.TempDir()
	s := openReal(t, dir)
	want := map[string][]byte{}
	for i := range syncfsMinFiles + 2 {
		name := fmt.Sprintf("vol.%d", i)
		want[name] = pattern(i, 256<<10)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", name, want[name]) })
	}
	overwrite := func(names ...string) {
		for _, name := range names {
			patch := pattern(len(name)*7+int(name[len(name)-1]), 4096)
			apply(t, s, func(tx *Txn) { tx.Write("1.0", name, 8192, patch) })
			copy(want[name][8192:], patch)
			if !s.hasPending(fileIDOf(t, s, name)) {
				t.Fatalf("a 4 KiB overwrite of %s was not deferred", name)
			}
		}
	}
	checkpoint := func(wantFSSyncs int64) {
		t.Helper()
		if err := s.checkpoint(); err != nil {
			t.Fatal(err)
		}
		if got := s.fsSyncs.Load(); got != wantFSSyncs {
			t.Fatalf("%d filesystem syncs, want %d", got, wantFSSyncs)
		}
		for name := range want {
			if s.hasPending(fileIDOf(t, s, name)) {
				t.Fatalf("the checkpoint left a journal record of %s", name)
			}
		}
	}

	var all []string
	for name := range want {
		all = append(all, name)
	}
	overwrite(all...)
	checkpoint(1)
	overwrite(all[:syncfsMinFiles-1]...)
	checkpoint(1) // too few files: each is synced on its own
	s = reopenReal(t, s, dir)
	defer s.Close()
	for name, w := range want {
		if got := mustRead(t, s, "1.0", name, 0, 0); !bytes.Equal(got, w) {
			t.Fatalf("%s differs after the checkpoints and a reopen", name)
		}
	}
}

// A small overwrite is journaled from the caller's data as it lies, even
// unaligned, and the caller's buffer is never changed; the journal record
// and the page cache get the right bytes, before and after a checkpoint.
func TestSmallOverwriteFromCallersData(t *testing.T) {
	defer func(d time.Duration) { checkpointInterval = d }(checkpointInterval)
	checkpointInterval = time.Hour // only the test's checkpoints run
	dir := t.TempDir()
	s := openReal(t, dir)
	want := pattern(1, 256<<10)
	apply(t, s, func(tx *Txn) { tx.Put("1.0", "v", want) })
	n0 := s.inPlace.Load()

	src := make([]byte, 4096+1)[1:] // unaligned
	copy(src, pattern(2, 4096))
	orig := bytes.Clone(src)
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "v", 8192, src) })
	copy(want[8192:], orig)
	if n := s.inPlace.Load() - n0; n != 1 {
		t.Fatalf("%d blocks of a 4 KiB overwrite taken from the caller's data, want 1", n)
	}
	if !s.hasPending(fileIDOf(t, s, "v")) {
		t.Fatal("the 4 KiB overwrite was not journaled")
	}
	// Two writes of the same block: the second must not land in the
	// caller's data of the first.
	patch := pattern(3, 100)
	apply(t, s, func(tx *Txn) {
		tx.Write("1.0", "v", 16384, src)
		tx.Write("1.0", "v", 16384+50, patch)
	})
	copy(want[16384:], orig)
	copy(want[16384+50:], patch)
	if !bytes.Equal(src, orig) {
		t.Fatal("Apply changed the caller's data")
	}
	if got := mustRead(t, s, "1.0", "v", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object differs before the checkpoint")
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, s, "1.0", "v", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object differs after the checkpoint")
	}
	// A journal record replayed at Open holds the same bytes.
	apply(t, s, func(tx *Txn) { tx.Write("1.0", "v", 32768, src) })
	copy(want[32768:], orig)
	copy(src, pattern(4, 4096)) // the caller reuses its buffer
	rec := journalOf(t, s)
	if j, err := decodeJrec(rec); err != nil || !bytes.Equal(j.data, orig) {
		t.Fatalf("journal record holds other bytes than were written (%v)", err)
	}
	s = reopenReal(t, s, dir)
	defer s.Close()
	if got := mustRead(t, s, "1.0", "v", 0, 0); !bytes.Equal(got, want) {
		t.Fatal("object differs after a reopen")
	}
}

// journalOf returns the value of the only journal record left in s: in
// the commit log, which recovery replays, not in the index.
func journalOf(t *testing.T, s *Store) []byte {
	t.Helper()
	recs := logJournal(t, s)
	if len(recs) != 1 {
		t.Fatalf("%d journal records in the commit log, want 1", len(recs))
	}
	for _, v := range recs {
		return v
	}
	return nil
}

// logJournal returns the journal records a replay of s's commit log would
// leave (sets not followed by their deletion), by sequence number.
func logJournal(t *testing.T, s *Store) map[uint64][]byte {
	t.Helper()
	var all []logGroup
	for i := range s.log.segs {
		run, _, err := s.log.scanSegment(i)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, run...)
	}
	slices.SortFunc(all, func(a, b logGroup) int { return cmp.Compare(a.seq, b.seq) })
	out := map[uint64][]byte{}
	for _, g := range all {
		_, _, recs, _, err := decodeLogGroup(g.body)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			var b pebble.Batch
			if err := b.SetRepr(r); err != nil {
				t.Fatal(err)
			}
			rd := b.Reader()
			for {
				kind, k, v, ok, err := rd.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if len(k) != 9 || k[0] != tagJournal {
					continue
				}
				seq := binary.BigEndian.Uint64(k[1:])
				switch kind {
				case pebble.InternalKeyKindSet:
					out[seq] = bytes.Clone(v)
				case pebble.InternalKeyKindDelete:
					delete(out, seq)
				}
			}
		}
	}
	return out
}
