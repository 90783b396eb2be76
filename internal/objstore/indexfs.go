package objstore

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// tableWriteSize is how much of a new sstable is gathered before one
// write(2). Pebble writes a table one block (4 KiB) per call: under small
// writes, whose data lives in the index, a memtable flush of 64 MiB was 16k
// syscalls; gathered, it is 256.
const tableWriteSize = 256 << 10

// indexFS is the file system under the index (pebble). New sstables
// gather their writes (tableFile); every other file is the underlying one.
// (The index writes no WAL: see commitlog.go.)
type indexFS struct {
	vfs.FS
}

func (fs indexFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil {
		return f, err
	}
	if strings.HasSuffix(name, ".sst") {
		return &tableFile{File: f}, nil
	}
	return f, nil
}

// fillZeros writes n zero bytes from offset 0, and syncs them: writes into
// the file after that change no metadata (size, allocation) that a sync
// would have to commit too.
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
