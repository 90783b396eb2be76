package baseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// runDisk prepares the test file f and runs the six disk measurements.
func runDisk(ctx context.Context, o Options, f *os.File, r *Result) error {
	size := o.FileSize
	o.Progress(fmt.Sprintf("disk: preparing a %s test file (preallocate, write, fdatasync)", mib(size)))
	if err := prepare(ctx, f, size); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	defer runtime.KeepAlive(f)
	fd := int(f.Fd())
	d := &r.Disk

	steps := []step{
		{"disk: sync 4 KiB writes, 1 in flight", "sync_write_4k_qd1", &d.SyncWrite4KQD1,
			func() (Measure, error) { return syncWrites(ctx, o.Duration, fd, size, 1) }},
		{fmt.Sprintf("disk: sync 4 KiB writes, %d in flight", SharedCopies), "sync_write_4k_qd3", &d.SyncWrite4KQD3,
			func() (Measure, error) { return syncWrites(ctx, o.Duration, fd, size, SharedCopies) }},
		{fmt.Sprintf("disk: sync 4 KiB writes, %d in flight", QueueDepth), "sync_write_4k_qd32", &d.SyncWrite4KQD32,
			func() (Measure, error) { return syncWrites(ctx, o.Duration, fd, size, QueueDepth) }},
		{"disk: sequential 1 MiB writes, then fdatasync", "seq_write_1m", &d.SeqWrite1M,
			func() (Measure, error) { return seqWrite(ctx, o.Duration, fd, size) }},
	}
	if err := runSteps(ctx, o, steps, ""); err != nil {
		return err
	}

	if err := ctx.Err(); err != nil {
		return err
	}
	rd, err := openReader(f.Name(), o.forceBuffered)
	if err != nil {
		return err
	}
	defer rd.f.Close()
	reads := []step{
		{"disk: random 4 KiB reads, 1 in flight", "rand_read_4k_qd1", &d.RandRead4KQD1,
			func() (Measure, error) { return rd.randReads(ctx, o.Duration, size, 1) }},
		{fmt.Sprintf("disk: random 4 KiB reads, %d in flight", QueueDepth), "rand_read_4k_qd32", &d.RandRead4KQD32,
			func() (Measure, error) { return rd.randReads(ctx, o.Duration, size, QueueDepth) }},
		{"disk: sequential 1 MiB reads", "seq_read_1m", &d.SeqRead1M,
			func() (Measure, error) { return rd.seqRead(ctx, o.Duration, size) }},
	}
	return runSteps(ctx, o, reads, rd.note)
}

// step is one measurement: announced, run, stored.
type step struct {
	progress string
	name     string
	out      *Measure
	fn       func() (Measure, error)
}

// runSteps runs steps in order until ctx ends, adding note to each result.
func runSteps(ctx context.Context, o Options, steps []step, note string) error {
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		o.Progress(s.progress)
		m, err := s.fn()
		if err != nil {
			return fmt.Errorf("baseline: %s: %w", s.name, err)
		}
		m.Note = joinNote(m.Note, note)
		*s.out = m
	}
	return nil
}

// prepare preallocates f to size and writes every byte of it once, then
// syncs, so that the measurements overwrite allocated, written blocks.
func prepare(ctx context.Context, f *os.File, size int64) error {
	fd := int(f.Fd())
	defer runtime.KeepAlive(f)
	err := unix.Fallocate(fd, 0, 0, size)
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("baseline: not enough free space in %s: need %s", f.Name(), mib(size))
	}
	// Any other failure (no fallocate on this filesystem) is fine: the
	// writes below allocate the blocks.
	buf := alignedBuf(chunkSize)
	fillRandom(buf, rand.New(rand.NewPCG(seed, 1<<32)))
	for off := int64(0); off < size; off += chunkSize {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := pwriteFull(fd, buf, off); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return fmt.Errorf("baseline: not enough free space in %s: need %s", f.Name(), mib(size))
			}
			return fmt.Errorf("baseline: writing the test file: %w", err)
		}
	}
	if err := unix.Fdatasync(fd); err != nil {
		return fmt.Errorf("baseline: fdatasync of the test file: %w", err)
	}
	return nil
}

// syncWrites: workers goroutines each pwrite 4 KiB at random aligned offsets
// of their own 1/workers of the file, each followed by fdatasync.
func syncWrites(ctx context.Context, d time.Duration, fd int, size int64, workers int) (Measure, error) {
	region := size / blockSize / int64(workers) // blocks per worker
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i] = alignedBuf(blockSize)
		fillRandom(bufs[i], rand.New(rand.NewPCG(seed, uint64(1<<33+i))))
	}
	m, err := run(ctx, d, workers, blockSize, func(w *worker) error {
		off := (int64(w.id)*region + w.rng.Int64N(region)) * blockSize
		if err := pwriteFull(fd, bufs[w.id], off); err != nil {
			return err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
		return nil
	}, nil)
	if workers > 1 {
		m.Note = fmt.Sprintf("%d goroutines on one file, each in its own 1/%d of it; concurrent fdatasyncs may share a device flush",
			workers, workers)
	}
	return m, err
}

// seqWrite makes one pass of buffered 1 MiB writes over the file (or as much
// of it as Duration allows), then one fdatasync, counted in the time.
func seqWrite(ctx context.Context, d time.Duration, fd int, size int64) (Measure, error) {
	buf := alignedBuf(chunkSize)
	fillRandom(buf, rand.New(rand.NewPCG(seed, 1<<34)))
	var off int64
	var syncTime time.Duration
	m, err := run(ctx, d, 1, chunkSize, func(*worker) error {
		if off >= size {
			return errDone
		}
		if err := pwriteFull(fd, buf, off); err != nil {
			return err
		}
		off += chunkSize
		return nil
	}, func() error {
		t0 := time.Now()
		err := unix.Fdatasync(fd)
		syncTime = time.Since(t0)
		if err != nil {
			return fmt.Errorf("fdatasync: %w", err)
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	m.Note = fmt.Sprintf("buffered writes of %s, then one fdatasync (%.1f ms, counted); latencies are the writes'",
		mib(off), float64(syncTime.Microseconds())/1e3)
	return m, nil
}

// reader reads the test file, with O_DIRECT where the filesystem allows it.
type reader struct {
	f      *os.File
	fd     int
	direct bool
	note   string // why reads are buffered, if they are
}

func openReader(name string, forceBuffered bool) (*reader, error) {
	why := "forced by the caller"
	if !forceBuffered {
		f, err := os.OpenFile(name, os.O_RDONLY|unix.O_DIRECT, 0)
		if err == nil {
			// Some filesystems accept the flag but refuse the reads.
			buf := alignedBuf(blockSize)
			_, err = unix.Pread(int(f.Fd()), buf, 0)
			if err == nil {
				return &reader{f: f, fd: int(f.Fd()), direct: true}, nil
			}
			f.Close()
		}
		if !errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("baseline: opening the test file with O_DIRECT: %w", err)
		}
		why = "refused by this filesystem (tmpfs?)"
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("baseline: opening the test file: %w", err)
	}
	fd := int(f.Fd())
	// Best effort: no readahead, nothing of the file left in the page cache.
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM)
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	return &reader{f: f, fd: fd, note: "O_DIRECT " + why +
		": buffered reads with posix_fadvise DONTNEED after each; where that cannot evict (tmpfs) this is memory speed, not a disk's"}, nil
}

func (r *reader) read(buf []byte, off int64) error {
	for done := 0; done < len(buf); {
		n, err := unix.Pread(r.fd, buf[done:], off+int64(done))
		if err != nil {
			return fmt.Errorf("pread: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("pread at %d: %w", off+int64(done), io.ErrUnexpectedEOF)
		}
		done += n
	}
	if !r.direct {
		_ = unix.Fadvise(r.fd, off, int64(len(buf)), unix.FADV_DONTNEED)
	}
	return nil
}

func (r *reader) randReads(ctx context.Context, d time.Duration, size int64, workers int) (Measure, error) {
	defer runtime.KeepAlive(r.f)
	blocks := size / blockSize
	bufs := make([][]byte, workers)
	for i := range bufs {
		bufs[i] = alignedBuf(blockSize)
	}
	return run(ctx, d, workers, blockSize, func(w *worker) error {
		return r.read(bufs[w.id], w.rng.Int64N(blocks)*blockSize)
	}, nil)
}

func (r *reader) seqRead(ctx context.Context, d time.Duration, size int64) (Measure, error) {
	defer runtime.KeepAlive(r.f)
	if !r.direct {
		_ = unix.Fadvise(r.fd, 0, 0, unix.FADV_SEQUENTIAL)
		_ = unix.Fadvise(r.fd, 0, 0, unix.FADV_DONTNEED)
	}
	buf := alignedBuf(chunkSize)
	var off int64
	return run(ctx, d, 1, chunkSize, func(*worker) error {
		if off >= size {
			off = 0
		}
		err := r.read(buf, off)
		off += chunkSize
		return err
	}, nil)
}

func pwriteFull(fd int, buf []byte, off int64) error {
	for done := 0; done < len(buf); {
		n, err := unix.Pwrite(fd, buf[done:], off+int64(done))
		if err != nil {
			return fmt.Errorf("pwrite: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("pwrite at %d: %w", off+int64(done), io.ErrShortWrite)
		}
		done += n
	}
	return nil
}

func fillRandom(b []byte, rng *rand.Rand) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}

func joinNote(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
