package objstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The flash read cache's index survives a clean close, so an OSD
// restarted for an upgrade finds its hot blocks on flash instead of
// reading them all from its disks again (OpenZFS's persistent L2ARC).
// Close writes which block each slot holds (after syncing the cache file,
// so the blocks it names are on flash) to flashIndexFile; the next Open
// reads it and removes it before serving anything, so an index is used at
// most once, and only one written after every change of the data files:
// a crash leaves no index, and the cache starts empty as before. Open
// loads it only when the commit log had nothing to replay into the data
// files (a clean close leaves none). Every block read from the cache is
// still checked against the checksum the index holds.
//
// Format (big-endian): [8 magic][4 slots][4 head][4 n] then n times
// [4 slot][8 file id][8 block], then [4 crc32c of all before].

const (
	flashIndexFile  = "flashcache.index"
	flashIndexMagic = "cairnFC1"
	flashIndexEntry = 4 + 8 + 8
)

// saveIndex writes the cache's index beside its file, durably. The
// caller has stopped the writer.
func (c *flashCache) saveIndex(dir string) error {
	if err := c.f.Sync(); err != nil {
		return err
	}
	c.mu.Lock()
	b := c.encodeIndex()
	c.mu.Unlock()
	tmp := filepath.Join(dir, flashIndexFile+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, flashIndexFile))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDirPath(dir)
}

// encodeIndex encodes the ready slots. Called with mu held.
func (c *flashCache) encodeIndex() []byte {
	n := 0
	for _, o := range c.owner {
		if o.ready {
			n++
		}
	}
	b := make([]byte, 0, 20+n*flashIndexEntry+4)
	b = append(b, flashIndexMagic...)
	b = binary.BigEndian.AppendUint32(b, c.slots)
	b = binary.BigEndian.AppendUint32(b, c.head)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for slot, o := range c.owner {
		if o.ready {
			b = binary.BigEndian.AppendUint32(b, uint32(slot))
			b = binary.BigEndian.AppendUint64(b, o.fileID)
			b = binary.BigEndian.AppendUint64(b, o.block)
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// loadIndex takes the index a clean close left in dir, if any, and
// removes it; it returns how many blocks the cache holds from it. An
// index that does not decode for this cache is dropped with an error
// that says why; the cache then starts empty.
func (c *flashCache) loadIndex(dir string) (int, error) {
	path := filepath.Join(dir, flashIndexFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err == nil {
		if err = os.Remove(path); err == nil {
			err = syncDirPath(dir)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("objstore: flash read cache index %s: %w", path, err)
	}
	entries, head, err := decodeFlashIndex(b, c.slots)
	if err != nil {
		return 0, fmt.Errorf("objstore: flash read cache index %s: %w; the cache starts empty", path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range entries {
		c.owner[e.slot] = slotOwner{fileID: e.fileID, block: e.block, gen: 1, used: true, ready: true}
		m := c.files[e.fileID]
		if m == nil {
			m = map[uint64]uint32{}
			c.files[e.fileID] = m
		}
		m[e.block] = e.slot
	}
	c.head = head
	return len(entries), nil
}

// restore loads the index a clean close saved in dir when use says the
// data files are as that close left them (the commit log replayed nothing
// into them), and drops it either way.
func (c *flashCache) restore(dir string, use bool) {
	if !use {
		os.Remove(filepath.Join(dir, flashIndexFile))
		return
	}
	n, err := c.loadIndex(dir)
	c.restored = int64(n)
	if err != nil {
		c.restoreErr = err.Error()
	}
}

// flashIndexed is one cached block of a saved index.
type flashIndexed struct {
	slot          uint32
	fileID, block uint64
}

// decodeFlashIndex reads what encodeIndex wrote, for a cache of slots
// slots: each slot and each block named once.
func decodeFlashIndex(b []byte, slots uint32) ([]flashIndexed, uint32, error) {
	if len(b) < 24 || string(b[:8]) != flashIndexMagic {
		return nil, 0, errors.New("not an index of this format")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, 0, errors.New("its checksum does not match")
	}
	if got := binary.BigEndian.Uint32(body[8:]); got != slots {
		return nil, 0, fmt.Errorf("it is for a cache of %d slots, this one has %d (its size changed)", got, slots)
	}
	head, n := binary.BigEndian.Uint32(body[12:]), binary.BigEndian.Uint32(body[16:])
	if head >= slots || n > slots || uint64(len(body)-20) != uint64(n)*flashIndexEntry {
		return nil, 0, errors.New("its head or count is out of range")
	}
	out := make([]flashIndexed, 0, n)
	seen := make(map[uint32]bool, n)
	blocks := make(map[[2]uint64]bool, n)
	for p := body[20:]; len(p) > 0; p = p[flashIndexEntry:] {
		e := flashIndexed{slot: binary.BigEndian.Uint32(p), fileID: binary.BigEndian.Uint64(p[4:]), block: binary.BigEndian.Uint64(p[12:])}
		key := [2]uint64{e.fileID, e.block}
		if e.slot >= slots || seen[e.slot] || blocks[key] {
			return nil, 0, fmt.Errorf("entry %d names slot %d or block %d of file %016x again, or a slot past the end", len(out), e.slot, e.block, e.fileID)
		}
		seen[e.slot], blocks[key] = true, true
		out = append(out, e)
	}
	return out, head, nil
}

// syncDirPath makes dir's entries durable.
func syncDirPath(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
