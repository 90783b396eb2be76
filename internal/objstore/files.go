package objstore

// Data files: where they live, the slot geometry, and the cache of open
// handles (one per file, referenced while in use).

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

type dataFile struct {
	f    vfs.File
	refs int
	dead bool

	directOnce sync.Once
	direct     int           // O_DIRECT descriptor, or -1 (directio.go)
	readBefore atomic.Uint64 // regionBits of the large reads that missed the cache
}

func (s *Store) fanDir(fileID uint64) string {
	return s.fs.PathJoin(s.dataDir, fmt.Sprintf("%02x", fileID&0xff))
}

func (s *Store) filePath(fileID uint64) string {
	return s.fs.PathJoin(s.fanDir(fileID), fmt.Sprintf("%016x", fileID))
}

// phys is the file offset of block b in slot A or B.
func (s *Store) phys(b uint64, slotB bool) uint64 {
	if slotB {
		return s.slotBase + b*blockSize
	}
	return b * blockSize
}

// openFile returns a referenced handle to a data file, creating it if absent.
func (s *Store) openFile(id uint64) (*dataFile, error) {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if df, ok := s.files[id]; ok {
		df.refs++
		return df, nil
	}
	if len(s.files) >= maxOpenFilesCleanup {
		for k, df := range s.files {
			if df.refs == 0 {
				df.close()
				delete(s.files, k)
			}
		}
	}
	f, err := s.fs.OpenReadWrite(s.filePath(id), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("objstore: open data file %016x: %w", id, err)
	}
	df := &dataFile{f: f, refs: 1, direct: -1}
	s.files[id] = df
	return df, nil
}

func (s *Store) releaseFile(df *dataFile) {
	if df == nil {
		return
	}
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	df.refs--
	if df.dead && df.refs == 0 {
		df.close()
	}
}

// dropFile forgets a data file's handle and has the file removed (see
// remover).
func (s *Store) dropFile(id uint64) {
	s.filesMu.Lock()
	if df, ok := s.files[id]; ok {
		delete(s.files, id)
		df.dead = true
		if df.refs == 0 {
			df.close()
		}
	}
	s.filesMu.Unlock()
	s.rm.remove(s.fs, s.filePath(id))
	if s.rm == nil {
		s.spaceFreed()
	}
}

func (s *Store) closeFiles() {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	for id, df := range s.files {
		df.close()
		delete(s.files, id)
	}
}

// close closes the file's descriptors; the caller holds filesMu and refs is 0.
func (df *dataFile) close() {
	df.f.Close()
	df.directOnce.Do(func() { df.direct = -1 })
	if df.direct >= 0 {
		unix.Close(df.direct)
		df.direct = -1
	}
}
