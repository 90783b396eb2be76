package objstore

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// slowDiskFS is an in-memory filesystem whose data files sync like a slow
// disk: a sync takes as long as writing back, at rate bytes a second,
// everything written to data files since the last sync.
type slowDiskFS struct {
	vfs.FS
	rate  float64
	slow  atomic.Bool // off while a test sets up
	dirty atomic.Int64
}

type slowDiskFile struct {
	vfs.File
	fs *slowDiskFS
}

func (f *slowDiskFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.Contains(name, "/data/") {
		return file, err
	}
	return &slowDiskFile{File: file, fs: f}, nil
}

func (f *slowDiskFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f *slowDiskFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	return f.wrap(name, file, err)
}

func (f *slowDiskFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.dirty.Add(int64(len(p)))
	return f.File.WriteAt(p, off)
}

func (f *slowDiskFile) Write(p []byte) (int, error) {
	f.fs.dirty.Add(int64(len(p)))
	return f.File.Write(p)
}

func (f *slowDiskFile) writeBack() {
	n := f.fs.dirty.Swap(0)
	if !f.fs.slow.Load() {
		return
	}
	time.Sleep(time.Duration(float64(n) / f.fs.rate * float64(time.Second)))
}

func (f *slowDiskFile) Sync() error     { f.writeBack(); return f.File.Sync() }
func (f *slowDiskFile) SyncData() error { f.writeBack(); return f.File.SyncData() }

// TestPacerKeepsBacklogToDisk: 4 KiB overwrites from 8 writers, with the
// commit log on fast memory and the data files on a disk that syncs 1 MB a
// second. Unpaced (the control run), the writers fill the commit log with
// records the slow checkpoints have not released and wait for them; paced,
// the backlog stays near the high watermark, no writer waits for the log,
// and every write reads back.
func TestPacerKeepsBacklogToDisk(t *testing.T) {
	defer func(a, b time.Duration, c int64) {
		checkpointInterval, checkpointTarget, minPaceHigh = a, b, c
	}(checkpointInterval, checkpointTarget, minPaceHigh)
	checkpointInterval, checkpointTarget, minPaceHigh = 50*time.Millisecond, 300*time.Millisecond, 64<<10
	const rate = 1 << 20
	for _, paced := range []bool{false, true} {
		t.Run(fmt.Sprint("paced=", paced), func(t *testing.T) {
			fs := &slowDiskFS{FS: vfs.NewMem(), rate: rate}
			s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: fs, ReserveBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !paced {
				s.pace.stop()
			}
			peak := runOverwrites(t, s, 8, 1500*time.Millisecond, func() { fs.slow.Store(true) })
			held := s.log.heldWaits.Load()
			c := s.Counters()
			t.Logf("peak backlog %d KiB, %d waits for held log records, %d writes paced (%v), sync rate %d KiB/s",
				peak>>10, held, c.PacedWrites, time.Duration(c.PacedNanos), c.SyncRate>>10)
			if !paced {
				if held == 0 {
					t.Fatal("the unpaced control run never waited for the log: the setup does not reproduce the stall")
				}
				return
			}
			// The high watermark is 300 ms of the disk's rate; the
			// writes admitted while the backlog was measured, and those
			// in flight then, may add a little.
			if limit := int64(2 * rate * checkpointTarget.Seconds()); peak > limit {
				t.Fatalf("backlog peaked at %d KiB, over %d KiB", peak>>10, limit>>10)
			}
			if held != 0 || c.PacedWrites == 0 {
				t.Fatalf("paced run: %d waits for held log records (want 0), %d paced writes (want some)", held, c.PacedWrites)
			}
		})
	}
}

// runOverwrites has writers overwrite 4 KiB blocks of their own 1 MiB
// object for d (after ready), checks that every object reads back as
// written, and returns the largest backlog seen once the disk's rate was
// measured and the backlog was under the high watermark it gave.
func runOverwrites(t *testing.T, s *Store, writers int, d time.Duration, ready func()) int64 {
	want := make([][]byte, writers)
	for w := range want {
		want[w] = pattern(w, 1<<20)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", fmt.Sprint("vol", w), want[w]) })
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	ready()
	stop := make(chan struct{})
	var peak atomic.Int64
	go func() {
		armed := false
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			b := s.pace.backlog.Load()
			// Until a checkpoint measured the disk, only the log's
			// size bounds the backlog; what piled up then takes a
			// checkpoint or two to drain below the first high
			// watermark, and only from there does the pacer hold it.
			if !armed {
				s.pace.mu.Lock()
				_, high := s.pace.watermarks()
				armed = s.pace.rate > 0 && b <= high
				s.pace.mu.Unlock()
				continue
			}
			if b > peak.Load() {
				peak.Store(b)
			}
		}
	}()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				off := (i * 37 % 256) * blockSize
				blk := pattern(w*100000+i, blockSize)
				var tx Txn
				tx.Write("1.0", fmt.Sprint("vol", w), uint64(off), blk)
				if err := s.Apply(&tx); err != nil {
					t.Error(err)
					return
				}
				copy(want[w][off:], blk)
			}
		}()
	}
	wg.Wait()
	close(stop)
	for w := range want {
		got, err := s.Read("1.0", fmt.Sprint("vol", w), 0, 1<<20)
		if err != nil || string(got) != string(want[w]) {
			t.Fatalf("vol%d reads back wrong after the run (err %v)", w, err)
		}
	}
	return peak.Load()
}
