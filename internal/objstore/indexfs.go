package objstore

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// tableWriteSize is how much of a new sstable is gathered before one
// write(2). Pebble writes a table one block (4 KiB) per call: under small
// writes, whose data lives in the index, a memtable flush of 64 MiB was 16k
// syscalls, 5% of an OSD's CPU.
const tableWriteSize = 256 << 10

// indexFS is the file system under the index (pebble). Files it creates
// are the underlying ones except for two kinds:
//   - sstables gather their writes (tableFile);
//   - a new WAL file is written with zeros up to walFill bytes, and synced,
//     before pebble appends to it. Pebble reuses a WAL file once its
//     memtable is flushed, but the first two after every Open are new. In a
//     new file each commit's fdatasync also wrote the inode (the file grew,
//     preallocated blocks turned written): on ext4 without a journal
//     (the machines these figures come from) a second device write per
//     commit. 4 KiB writes at depth 1 to 3 copies on a fresh
//     cluster: p50 821 µs before, 616 µs with the fill. Low-rate clusters
//     spend most of their time on those two files: 64 MiB of small writes
//     take hours to fill. Filling 70 MiB takes 30-50 ms, once at Open and
//     once at the first WAL switch.
//
// Pebble reads a WAL that ends in zeros as it reads a preallocated one: the
// records end at the first zeroed chunk.
type indexFS struct {
	vfs.FS
	walFill int64 // 0: no fill (file systems in memory)
}

func (fs indexFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return f, err
	}
	switch {
	case strings.HasSuffix(name, ".sst"):
		return &tableFile{File: f}, nil
	case strings.HasSuffix(name, ".log") && fs.walFill > 0:
		// Best effort, as pebble's own preallocation: on a full disk the
		// OSD must still open (to serve deletes). Zeros written before a
		// failure do no harm, and a real IO error shows at pebble's sync.
		_ = fillZeros(f, fs.walFill)
	}
	return f, nil
}

// fillZeros writes n zero bytes from offset 0 with WriteAt, so the file's
// own offset, where pebble appends, stays at 0, and syncs them.
func fillZeros(f vfs.File, n int64) error {
	zeros := make([]byte, min(n, 1<<20))
	for off := int64(0); off < n; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), n-off)], off); err != nil {
			return err
		}
	}
	return f.SyncData()
}

// tableFile gathers appends in a pooled buffer and writes them out before
// anything that observes the file (sync, stat, read, close). Bytes not yet
// written are like bytes not yet synced: pebble syncs a table before it
// uses it, and that flushes them.
type tableFile struct {
	vfs.File
	buf []byte // nil until the first small write, and after Close
	err error  // the first failed write: the file is unusable after it
}

func (f *tableFile) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if len(f.buf)+len(p) > tableWriteSize {
		if err := f.flush(); err != nil {
			return 0, err
		}
	}
	if len(p) >= tableWriteSize {
		n, err := f.File.Write(p)
		if err != nil {
			f.err = err
		}
		return n, err
	}
	if f.buf == nil {
		f.buf = bufpool.Get(tableWriteSize)[:0]
	}
	f.buf = append(f.buf, p...)
	return len(p), nil
}

// flush writes the gathered bytes.
func (f *tableFile) flush() error {
	if f.err != nil {
		return f.err
	}
	if len(f.buf) == 0 {
		return nil
	}
	_, err := f.File.Write(f.buf)
	if err != nil {
		f.err = err
		return err
	}
	f.buf = f.buf[:0]
	return nil
}

func (f *tableFile) Close() error {
	err := f.flush()
	if f.buf != nil {
		bufpool.Put(f.buf)
		f.buf = nil
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *tableFile) Sync() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *tableFile) SyncData() error {
	if err := f.flush(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *tableFile) SyncTo(length int64) (bool, error) {
	if err := f.flush(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

func (f *tableFile) Stat() (vfs.FileInfo, error) {
	if err := f.flush(); err != nil {
		return nil, err
	}
	return f.File.Stat()
}

func (f *tableFile) Read(p []byte) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.Read(p)
}

func (f *tableFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.ReadAt(p, off)
}

func (f *tableFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.flush(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}
