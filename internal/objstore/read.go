package objstore

// The read path of object data: Read, ReadInfo and ReadShared (through
// the read cache of readcache.go), every block checked against its
// checksum before it is returned.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

// Read returns up to length bytes at off (length 0 = to the end). Every block
// returned is checksum-verified.
func (s *Store) Read(coll, name string, off, length uint64) ([]byte, error) {
	data, _, err := s.ReadInfo(coll, name, off, length)
	return data, err
}

// ReadInfo is Read that also returns the object's Info, from the same
// lookup of its record (a read of a small object is then one index lookup).
// It reads past the read cache: scrubs use it to check the disk.
func (s *Store) ReadInfo(coll, name string, off, length uint64) ([]byte, Info, error) {
	data, info, _, _, err := s.read(coll, name, off, length, viaDisk)
	return data, info, err
}

// ReadShared is ReadInfo for a client's read: a large read at a block
// boundary is answered from the store's read cache if it holds it, and
// fills the cache if not (readcache.go). data and sums are the caller's to
// read, not to modify, until it calls release (never nil), once. sums, for
// a large read at a block boundary, are the crc32c of each whole 4 KiB
// block of data, as checked: a sender can checksum its frame without
// reading the data again.
func (s *Store) ReadShared(coll, name string, off, length uint64) (data []byte, info Info, sums []uint32, release func(), err error) {
	return s.read(coll, name, off, length, viaCaches)
}

// ReadSharedNoFill is ReadShared for a read whose blocks are about to be
// overwritten (the old bytes of a partial write): the caches answer it if
// they hold it, but it fills none of them.
func (s *Store) ReadSharedNoFill(coll, name string, off, length uint64) (data []byte, info Info, sums []uint32, release func(), err error) {
	return s.read(coll, name, off, length, viaCachesNoFill)
}

// readVia says which caches a read goes through.
type readVia int

const (
	viaDisk         readVia = iota // past the caches: scrubs check the disk
	viaCaches                      // a client's read: answered from, and filling, the caches
	viaCachesNoFill                // answered from the caches, filling none
)

func (s *Store) read(coll, name string, off, length uint64, via readVia) (data []byte, info Info, sums []uint32, release func(), err error) {
	cached := via != viaDisk
	if err := checkName(coll, name); err != nil {
		return nil, Info{}, nil, nil, err
	}
	s.rc.busy()
	defer s.rlock(coll, name)()
	r, ok, err := s.loadRec(coll, name)
	if err != nil {
		return nil, Info{}, nil, nil, err
	}
	if !ok {
		return nil, Info{}, nil, nil, notFound(coll, name)
	}
	info = Info{Size: r.size, Mtime: time.Unix(0, r.mtime)}
	end := r.size
	if length > 0 && off < r.size && length < r.size-off {
		end = off + length
	}
	// Only reads the cache takes look at it: a small read costs no lock.
	if via == viaCaches && s.rc != nil && !r.inline && off < r.size && off%blockSize == 0 && readClass(int(end-off)) >= 0 {
		k := readKey{fileID: r.fileID, off: off, end: end}
		if e := s.rc.get(k); e != nil {
			return e.data, info, e.sums, e.release, nil
		}
		fb, lb := off/blockSize, (end-1)/blockSize
		n := int(lb-fb+1) * blockSize
		if e := s.rc.alloc(k, n); e != nil {
			sums := make([]uint32, lb-fb+1)
			if err := s.readBlocks(coll, name, r.fileID, fb, lb, e.buf[:n], sums, fcRead{}); err != nil {
				e.release()
				return nil, Info{}, nil, nil, err
			}
			e.data = e.buf[: end-off : end-off]
			sums = sums[:len(e.data)/blockSize]
			s.rc.add(k, e, sums)
			return e.data, info, sums, e.release, nil
		}
	}
	var fc fcRead
	if cached {
		fc = fcRead{c: s.fc, fill: via == viaCaches}
	}
	data, pooled, sums, err := s.readRec(coll, name, &r, off, length, fc)
	if err != nil {
		return nil, Info{}, nil, nil, err
	}
	if pooled == nil {
		return data, info, sums, noRelease, nil // small reads: no closure to allocate
	}
	return data, info, sums, func() { bufpool.Put(pooled) }, nil
}

// noRelease is the release of a read whose buffer nothing takes back.
var noRelease = func() {}

// readRec reads [off, off+length) of the object whose record is r, into a
// bufpool buffer (returned as pooled) if the read is large, with its blocks'
// checksums if it starts at a block (see ReadPooled), through the flash
// read cache as fc says.
func (s *Store) readRec(coll, name string, r *objRec, off, length uint64, fc fcRead) (data, pooled []byte, sums []uint32, err error) {
	if off >= r.size {
		return []byte{}, nil, nil, nil
	}
	end := r.size
	if length > 0 && length < r.size-off {
		end = off + length
	}
	fb, lb := off/blockSize, (end-1)/blockSize
	if r.inline {
		for b := fb; b <= lb; b++ {
			if inlineBlockCRC(r.data, b) != r.crcs[b] {
				return nil, nil, nil, &CorruptionError{Coll: coll, Name: name, Offset: b * blockSize, Detail: "inline block checksum mismatch"}
			}
		}
		return r.data[off:end:end], nil, nil, nil
	}
	var buf []byte
	if n := (lb - fb + 1) * blockSize; n >= directReadMin {
		// Aligned, so the read can bypass the page cache.
		buf = bufpool.Get(int(n))
		pooled = buf
		if off%blockSize == 0 {
			sums = make([]uint32, lb-fb+1)
		}
	} else {
		buf = make([]byte, n)
	}
	if err := s.readBlocks(coll, name, r.fileID, fb, lb, buf, sums, fc); err != nil {
		bufpool.Put(pooled)
		return nil, nil, nil, err
	}
	base := fb * blockSize
	data = buf[off-base : end-base : end-base]
	if sums != nil {
		sums = sums[:len(data)/blockSize] // whole blocks of data only
	}
	return data, pooled, sums, nil
}

// readBlocks fills buf with verified blocks fb..lb of a data file, zeros
// for blocks never written, and sums (if not nil) with their checksums. A
// small read goes through the flash read cache fc.c, if not nil: a block it
// holds is read from flash, and blocks read from the disk fill it if
// fc.fill.
func (s *Store) readBlocks(coll, name string, fileID, fb, lb uint64, buf []byte, sums []uint32, fc fcRead) error {
	chunks, err := s.loadChunks(coll, name, fileID, fb/chunkBlocks, lb/chunkBlocks)
	if err != nil {
		return err
	}
	present := func(b uint64) (uint32, bool) {
		c := chunks[b/chunkBlocks]
		if c == nil || !c.present(b%chunkBlocks) {
			return 0, false
		}
		return c.crc[b%chunkBlocks], true
	}
	inB := func(b uint64) bool { return chunks[b/chunkBlocks].inB(b % chunkBlocks) }
	if (lb-fb+1)*blockSize > flashAdmitMax {
		fc.c = nil
	}
	wset := s.wb.blocksIn(fileID, fb, lb) // blocks whose W key overrides the file
	var df *dataFile
	defer func() { s.releaseFile(df) }()
	for b := fb; b <= lb; {
		blk := buf[(b-fb)*blockSize : (b-fb+1)*blockSize]
		want, present0 := present(b)
		copied := false
		if !present0 {
			clear(blk) // buf may be recycled
			want, copied = zeroBlockCRC, true
		} else if wset[b] || fc.c != nil {
			if copied, err = s.readCopy(coll, name, fileID, b, blk, want, wset[b], fc.c); err != nil {
				return err
			}
		}
		if copied {
			if sums != nil {
				sums[b-fb] = want
			}
			b++
			continue
		}
		// One file read per run of present blocks in the same slot.
		e := b
		for e+1 <= lb {
			if _, ok := present(e + 1); !ok || inB(e+1) != inB(b) || wset[e+1] {
				break
			}
			e++
		}
		if df == nil {
			if df, err = s.openFile(fileID); err != nil {
				return err
			}
		}
		seg := buf[(b-fb)*blockSize : (e-fb+1)*blockSize]
		n, err := s.readSegment(df, fileID, seg, s.phys(b, inB(b)))
		if err != nil && err != io.EOF {
			return fmt.Errorf("objstore: read %q/%q: %w", coll, name, err)
		}
		clear(seg[n:])
		for x := b; x <= e; x++ {
			want, _ := present(x)
			blk := buf[(x-fb)*blockSize : (x-fb+1)*blockSize]
			if blockCRC(blk) != want {
				return &CorruptionError{Coll: coll, Name: name, Offset: x * blockSize, Detail: "data block checksum mismatch"}
			}
			if sums != nil {
				sums[x-fb] = want
			}
			if fc.c != nil && fc.fill {
				fc.c.admit(fileID, x, blk)
			}
		}
		b = e + 1
	}
	return nil
}

// fcRead is how a read uses the flash read cache: c (nil: not at all),
// and whether blocks read from the disk fill it.
type fcRead struct {
	c    *flashCache
	fill bool
}

// readCopy fills dst with block b from where a copy of it may be: its W key
// if inWB (see writeback.go), else the flash read cache fc. false: neither
// holds it, the data file does.
func (s *Store) readCopy(coll, name string, fileID, b uint64, dst []byte, want uint32, inWB bool, fc *flashCache) (bool, error) {
	if inWB {
		// false: destaged since blocksIn, the file holds it now.
		return s.readWB(coll, name, fileID, b, dst, want)
	}
	return fc.read(fileID, b, dst, want), nil
}

// readWB fills dst with block b of file fileID from its W key (see
// writeback.go), checked against want. false: the key is gone (the
// destager deleted it after syncing the block into the file).
func (s *Store) readWB(coll, name string, fileID, b uint64, dst []byte, want uint32) (bool, error) {
	v, err := s.get(wbKey(fileID, b))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(v) != blockSize || blockCRC(v) != want {
		return false, &CorruptionError{Coll: coll, Name: name, Offset: b * blockSize, Detail: "write-back block checksum mismatch"}
	}
	copy(dst, v)
	return true, nil
}

// loadChunks returns the checksum chunks first..last of a data file that
// exist. One chunk (every read up to 256 KiB that is aligned) is a point
// lookup, much cheaper than an iterator.
func (s *Store) loadChunks(coll, name string, fileID, first, last uint64) (map[uint64]*chunk, error) {
	chunks := map[uint64]*chunk{}
	bad := &CorruptionError{Coll: coll, Name: name, Detail: "bad checksum chunk"}
	if first == last {
		v, err := s.getIndexed(csumKey(fileID, first))
		if errors.Is(err, pebble.ErrNotFound) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		c, err := decodeChunk(v)
		if err != nil {
			return nil, bad
		}
		chunks[first] = c
		return chunks, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: csumKey(fileID, first),
		UpperBound: csumKey(fileID, last+1),
	})
	if err != nil {
		return nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		c, err := decodeChunk(it.Value())
		if err != nil || len(k) != 13 {
			it.Close()
			return nil, bad
		}
		chunks[uint64(binary.BigEndian.Uint32(k[9:]))] = c
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return chunks, nil
}
