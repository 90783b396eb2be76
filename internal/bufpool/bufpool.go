// Package bufpool recycles the large byte buffers of the data path: frame
// bodies on both ends of a connection, object reads and the slabs of large
// writes. A fresh multi-megabyte buffer costs page faults, zeroing and
// garbage collection every time, more than the copy that fills it: under
// 1 MiB reads, allocating the frame body was a large part of the NBD
// gateway's CPU and of an OSD's.
//
// Buffers come in power-of-two classes from MinSize to MaxSize, each
// starting at an Align-aligned address (usable for O_DIRECT). The pool holds
// no buffer against the garbage collector: sync.Pool lets idle ones go.
//
// Buffers of HugePage bytes or more start at a HugePage boundary and ask the
// kernel for transparent huge pages. An O_DIRECT read or write then pins two
// physically contiguous pieces per 4 MiB instead of up to 1,024 scattered
// pages: a disk takes a bounded number of segments per request (a virtio
// disk's max_segments), so a 4 MiB read into scattered pages can go out as
// several requests, and large object reads run slower. Under 4 MiB writes
// the OSDs also spend less CPU per GiB (fewer faults, pins and TLB misses).
// The slack before and after such a buffer costs address space; the OSDs'
// resident memory after 4 MiB writes did not grow from it.
//
// The rule that keeps this safe: a buffer is handed back (Put) exactly once,
// by its last user, after which nothing may touch it. Tests can set
// CAIRN_BUFPOOL_POISON=1 so that every Put overwrites the buffer, turning a
// use after Put into visibly wrong data.
package bufpool

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// Align is the alignment of every buffer's first byte.
	Align    = 4096
	minShift = 16
	maxShift = 26
	// MinSize is the smallest pooled size: smaller buffers are cheap to
	// allocate and Get just makes them.
	MinSize = 1 << minShift
	// MaxSize is the largest pooled size.
	MaxSize = 1 << maxShift
	// HugePage is the size of a transparent huge page on x86-64 and arm64
	// (with 4 KiB base pages), and the alignment of buffers at least that
	// large.
	HugePage = 2 << 20
)

var pools [maxShift - minShift + 1]sync.Pool

// poison makes Put fill buffers with a pattern (see the package doc).
var poison = os.Getenv("CAIRN_BUFPOOL_POISON") == "1"

// class returns the pool index of buffers able to hold n bytes, or -1 if n is
// not pooled.
func class(n int) int {
	if n < MinSize || n > MaxSize {
		return -1
	}
	c := 0
	for MinSize<<c < n {
		c++
	}
	return c
}

// Get returns a buffer of length n. Its contents are undefined: the caller
// overwrites all of it before anyone reads it. Pooled sizes (MinSize to
// MaxSize) start at an Align-aligned address; smaller and larger buffers
// are freshly allocated (and zero), and small ones are not aligned: see
// Aligned.
func Get(n int) []byte {
	c := class(n)
	if c < 0 {
		if n < MinSize {
			return make([]byte, n) // cheap, and exact: no alignment slack
		}
		return aligned(n)
	}
	if p, _ := pools[c].Get().(*[]byte); p != nil {
		return (*p)[:n]
	}
	return aligned(MinSize << c)[:n]
}

// Aligned is Get for callers that need an Align-aligned buffer whatever its
// size (O_DIRECT IO).
func Aligned(n int) []byte {
	if n < MinSize {
		return aligned(n)
	}
	return Get(n)
}

// Put hands back a buffer from Get. Slices that cannot be a whole buffer
// (another capacity, a sub-slice not starting at an aligned address) are
// left to the garbage collector, so handing back the wrong slice never
// corrupts anything; handing back a buffer still in use does.
func Put(b []byte) {
	c := class(cap(b))
	if c < 0 || cap(b) != MinSize<<c {
		return
	}
	b = b[:cap(b)]
	if uintptr(unsafe.Pointer(&b[0]))%Align != 0 {
		return
	}
	if poison {
		b[0] = 0xdb
		for n := 1; n < len(b); n *= 2 {
			copy(b[n:], b[:n])
		}
	}
	pools[c].Put(&b)
}

// Contains reports whether b, not empty, lies within buf's capacity: a
// slice of it, whose bytes stay valid as long as buf.
func Contains(buf, b []byte) bool {
	if len(b) == 0 || cap(buf) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p-lo+uintptr(len(b)) <= uintptr(cap(buf))
}

// aligned allocates n bytes starting at an Align-aligned address (a
// HugePage-aligned one from HugePage bytes on), with capacity n.
func aligned(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	align := Align
	if n >= HugePage {
		align = HugePage
	}
	b := make([]byte, n+align)
	off := (align - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(align))) % align
	b = b[off : off+n : off+n]
	if align == HugePage {
		// Before the first touch, so the faults take huge pages. A kernel
		// without them says EINVAL, and the buffer works as it is.
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
	return b
}
