package objstore

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"

	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// Large fresh extents (a new 4 MiB object, say) are written with O_DIRECT on
// a real filesystem. With three writer processes on one ext4 disk,
// buffered writes into newly allocated blocks, racing with fdatasyncs, cost
// the kernel several times the CPU of O_DIRECT writes and moved less data
// together. The data is durable once the
// file's fdatasync (for the block allocation) returns, as before.
//
// O_DIRECT needs block-aligned offsets, lengths and memory: the direct path
// only ever writes whole 4 KiB blocks at block offsets, and the data is
// copied into an aligned buffer unless it is in one already (large writes
// assemble their blocks in one; a memcpy is cheap next to the kernel work
// it saves anyway). Filesystems that refuse O_DIRECT, and the in-memory FS of
// the crash tests, keep buffered writes.

const directAlign = 4096

// aligned reports whether b starts at a directAlign-aligned address.
func aligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%directAlign == 0
}

// Large reads (a 4 MiB object, a 1 MiB volume read) come from the page cache
// when it holds them (see cached), and otherwise with O_DIRECT the first time a region of
// the file is read and through the cache the second time. Data written with
// O_DIRECT is not in the cache; copying it through the cache on its way to
// the client was the largest part of an OSD's CPU under 4 MiB reads, so data read once
// (a backup, a scan, a sequential pass) should not go there. Data read again
// is worth caching: the page cache is the OSD's read cache, as the ARC keeps
// blocks seen twice. Reads of directOnlyMin or more (a whole object) are the
// exception: they go direct every time the cache does not already hold them.
// A cached read costs the OSD a kernel copy of every byte, and filling the
// cache under memory pressure costs reclaim on top; a direct read costs
// neither. With much of the machine's memory taken by another process
// (as the Ceph of the side-by-side comparison takes it), 4 MiB random
// re-reads ran faster direct than cached, on less OSD CPU; with memory
// free, both ran alike. Smaller reads
// always use the cache, so hot 4 KiB blocks stay there. A file with deferred
// writes waiting for a checkpoint (dirty pages of ours) is read through the
// cache: a direct read would first have to write those pages back.
const directReadMin = 128 << 10

// directOnlyMin is the read size from which a region read before still goes
// direct (see above).
const directOnlyMin = 2 << 20

// writeUncached writes buf at off of data file fid with O_DIRECT, and with
// RWF_DSYNC if dsync: the write then returns durable, with the metadata that
// finds it (the allocation, the size), so the file needs no fdatasync of its
// own; one blocking syscall instead of two. It reports whether it wrote
// (false: direct IO is off or unsupported, and the caller writes buffered)
// and whether the write is durable.
func (s *Store) writeUncached(df *dataFile, fid, off uint64, buf []byte, dsync bool) (ok, durable bool, err error) {
	if !s.directIO.Load() || off%directAlign != 0 || len(buf)%directAlign != 0 {
		return false, false, nil
	}
	fd := s.directFD(df, fid)
	if fd < 0 {
		return false, false, nil
	}
	ab := buf
	if !aligned(buf) {
		ab = bufpool.Aligned(len(buf))
		defer bufpool.Put(ab)
		copy(ab, buf)
	}
	durable = dsync && !s.noDsync.Load()
	for done := 0; done < len(ab); {
		var n int
		if injectIO != nil {
			op := ioDirectWrite
			if durable {
				op = ioDirectWriteDSync
			}
			err = injectIO(op, s.filePath(fid))
		}
		switch {
		case err != nil:
		case durable:
			n, err = unix.Pwritev2(fd, [][]byte{ab[done:]}, int64(off)+int64(done), unix.RWF_DSYNC)
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
				s.noDsync.Store(true) // a kernel before 4.7: write, and let the caller sync
				durable, err = false, nil
				continue
			}
		default:
			n, err = unix.Pwrite(fd, ab[done:], int64(off)+int64(done))
		}
		if err != nil {
			if isNoSpace(err) {
				return true, false, fmt.Errorf("objstore: osd disk full writing data file %016x: %w", fid, ErrNoSpace)
			}
			return true, false, fmt.Errorf("objstore: write data file %016x: %w", fid, err)
		}
		if n == 0 {
			return true, false, fmt.Errorf("objstore: write data file %016x: no progress", fid)
		}
		done += n
	}
	return true, durable, nil
}

// directFD returns the file's O_DIRECT descriptor, opened on first use, or -1
// (and direct IO is switched off if the filesystem refuses it).
func (s *Store) directFD(df *dataFile, fid uint64) int {
	df.directOnce.Do(func() {
		fd, err := unix.Open(s.filePath(fid), unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				s.directIO.Store(false) // the filesystem does not do O_DIRECT
			}
			fd = -1
		}
		df.direct = fd
	})
	return df.direct
}

// readSegment reads len(seg) bytes of the data file at off (see above for
// which way).
func (s *Store) readSegment(df *dataFile, fid uint64, seg []byte, off uint64) (int, error) {
	if len(seg) < directReadMin || !s.directIO.Load() || off%directAlign != 0 ||
		uintptr(unsafe.Pointer(&seg[0]))%directAlign != 0 || s.hasPending(fid) {
		return df.f.ReadAt(seg, int64(off))
	}
	if s.cached(df, off, len(seg)) {
		return df.f.ReadAt(seg, int64(off))
	}
	if r := regionBits(off, len(seg)); df.readBefore.Or(r)&r == r && len(seg) < directOnlyMin {
		return df.f.ReadAt(seg, int64(off)) // second touch: into the cache
	}
	if s.directFD(df, fid) < 0 {
		return df.f.ReadAt(seg, int64(off))
	}
	done := 0
	for done < len(seg) {
		if injectIO != nil {
			if err := injectIO(ioDirectRead, s.filePath(fid)); err != nil {
				return done, fmt.Errorf("objstore: read data file %016x: %w", fid, err)
			}
		}
		n, err := unix.Pread(df.direct, seg[done:], int64(off)+int64(done))
		if err != nil {
			return done, fmt.Errorf("objstore: read data file %016x: %w", fid, err)
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
		if done%directAlign != 0 {
			return done, io.EOF // a short read ends at the end of the file
		}
	}
	return done, nil
}

// cached reports whether the page cache holds all of [off, off+n) of the
// file, asking the kernel (cachestat, Linux 6.5) without causing any IO. On
// older kernels it says no, and a region's second read fills the cache.
func (s *Store) cached(df *dataFile, off uint64, n int) bool {
	if s.noCachestat.Load() {
		return false
	}
	fd := df.f.Fd()
	if fd == vfs.InvalidFd {
		return false
	}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{Off: off, Len: uint64(n)}, &st, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			s.noCachestat.Store(true)
		}
		return false
	}
	return st.Cache*directAlign >= uint64(n)
}

// regionBits marks the 1 MiB regions of a file that [off, off+n) touches,
// modulo 64: it only decides whether a read goes through the cache.
func regionBits(off uint64, n int) uint64 {
	var bits uint64
	for r := off >> 20; r <= (off+uint64(n)-1)>>20 && bits != ^uint64(0); r++ {
		bits |= 1 << (r % 64)
	}
	return bits
}

// punchHole gives [off, off+n) of a data file back to the filesystem. It is
// best effort: a range left allocated (an error, a crash before the punch
// reached the disk) is only garbage in a slot no block lives in.
func punchHole(f vfs.File, off uint64, n int) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(n))
	}
}
