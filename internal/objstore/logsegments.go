package objstore

// The commit log's segment files: created zero-filled at their full size
// (smaller on a nearly full disk), opened for O_DIRECT|O_DSYNC writes when
// the file system allows.

import (
	"errors"
	"fmt"
	iofs "io/fs"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// openSegments opens the segment files, creating missing ones. A segment
// is filled under a temporary name and renamed, so a crash never leaves a
// short one.
func (l *commitLog) openSegments(dir string) error {
	for i := range l.segs {
		p := l.fs.PathJoin(dir, fmt.Sprintf("commitlog-%d", i))
		l.segs[i] = &logSegment{path: p, fd: -1}
	}
	// Segments that exist keep their size (the disk's may have changed).
	var missing []*logSegment
	for i := len(l.segs) - 1; i >= 0; i-- {
		st, err := l.fs.Stat(l.segs[i].path)
		switch {
		case err == nil:
			l.segSize = st.Size()
		case errors.Is(err, iofs.ErrNotExist):
			missing = append(missing, l.segs[i])
		default:
			return fmt.Errorf("objstore: commit log: %w", err)
		}
	}
	if err := l.createSegments(missing); err != nil {
		return err
	}
	for _, seg := range l.segs {
		st, err := l.fs.Stat(seg.path)
		if err != nil {
			return fmt.Errorf("objstore: commit log: %w", err)
		}
		if st.Size() != l.segSize {
			return &CorruptionError{Detail: fmt.Sprintf("commit log segment %s is %d bytes, the others %d", seg.path, st.Size(), l.segSize)}
		}
		if seg.f, err = l.fs.OpenReadWrite(seg.path, vfs.WriteCategoryUnspecified); err != nil {
			return fmt.Errorf("objstore: open commit log: %w", err)
		}
	}
	if l.segSize < 4*logHeaderLen*logMaxGroupFrac || l.segSize%4096 != 0 {
		return &CorruptionError{Detail: fmt.Sprintf("commit log segments of %d bytes", l.segSize)}
	}
	if len(missing) == 0 {
		return nil
	}
	d, err := l.fs.OpenDir(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("objstore: sync %s: %w", dir, err)
	}
	return nil
}

// logMinSegment is the smallest segment createSegments falls back to.
const logMinSegment = 1 << 20

// createSegments creates the missing segments. A store without any (new,
// or upgraded from a format without the log) on a disk too full for
// segments of the wanted size gets smaller ones, down to logMinSegment,
// rather than not opening: an operator upgrading a nearly full OSD must
// still be able to start it and delete data. Smaller segments only mean
// more frequent index flushes.
func (l *commitLog) createSegments(missing []*logSegment) error {
	for {
		var err error
		var made []*logSegment
		for _, seg := range missing {
			if err = createSegment(l.fs, seg.path, l.segSize); err != nil {
				break
			}
			made = append(made, seg)
		}
		if err == nil || !errors.Is(err, ErrNoSpace) || len(missing) < logSegments || l.segSize/2 < logMinSegment {
			return err
		}
		for _, seg := range made {
			if e := l.fs.Remove(seg.path); e != nil {
				return fmt.Errorf("objstore: commit log: %w", e)
			}
		}
		l.segSize /= 2
	}
}

// createSegment writes a zero-filled segment of size bytes at path.
func createSegment(fs vfs.FS, path string, size int64) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("objstore: create commit log: %w", err)
	}
	err = fillZeros(f, size)
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		fs.Remove(tmp)
		if isNoSpace(err) {
			return fmt.Errorf("objstore: no room for the commit log (%d segments of %d bytes): %w", logSegments, size, ErrNoSpace)
		}
		return fmt.Errorf("objstore: create commit log: %w", err)
	}
	return nil
}

// openDirect opens each segment for O_DIRECT|O_DSYNC writes, aligned to
// what the filesystem asks (512 bytes on most disks: a 4 KiB batch then
// takes 4.5 KiB of log, not 8). Without it, writes go through the page
// cache and each is synced.
func (l *commitLog) openDirect() {
	for _, s := range l.segs {
		fd, err := unix.Open(s.path, unix.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, s := range l.segs {
				if s.fd >= 0 {
					unix.Close(s.fd)
					s.fd = -1
				}
			}
			return
		}
		s.fd = fd
	}
	l.align = 4096
	var st unix.Statx_t
	if unix.Statx(l.segs[0].fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st) == nil &&
		st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align >= logMinAlign && st.Dio_offset_align <= 4096 &&
		st.Dio_mem_align <= 4096 && 4096%st.Dio_offset_align == 0 {
		l.align = int64(st.Dio_offset_align)
	}
}

func (s *logSegment) writeDurable(b []byte, off int64) error {
	if s.fd < 0 {
		if _, err := s.f.WriteAt(b, off); err != nil {
			return err
		}
		return s.f.SyncData()
	}
	if injectIO != nil {
		if err := injectIO(ioLogWrite, s.path); err != nil {
			return fmt.Errorf("write %s: %w", s.path, err)
		}
	}
	for done := 0; done < len(b); {
		n, err := unix.Pwrite(s.fd, b[done:], off+int64(done))
		if err != nil {
			return fmt.Errorf("write %s: %w", s.path, err)
		}
		if n <= 0 {
			return fmt.Errorf("write %s: no progress", s.path)
		}
		done += n
	}
	return nil
}
