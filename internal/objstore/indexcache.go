package objstore

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// indexCache keeps the committed values of recently read object records,
// checksum chunks and xattrs: the index entries every read and write of an
// object looks up (an erasure-coded shard's meta is an xattr, read by each
// write, read and trim of the shard). A small write on an OSD looks up its object's record,
// the record of its PG's metadata object and a checksum chunk; in pebble
// each lookup is a seek through a 64 MiB memtable skiplist (nearly every
// step a CPU cache miss) and a bloom probe per sstable: three of them per
// small write added up to a large part of an OSD's CPU.
//
// The records of small objects hold their data, so the cache is also the
// read cache of small objects (up to indexCacheMaxValue), in front of
// pebble's block cache: a 4 KiB object read from here costs a map lookup
// and a copy, from pebble a seek through the memtable and every level.
// Caching them makes a small random read cost an OSD less CPU, so it serves
// more of them (records of at most 512 bytes were cached before). It
// is bounded in bytes, and takes half of the store's CacheBytes. A value
// larger than smallValue enters on its key's second miss (seen), as the
// ARC keeps blocks seen twice: a scan that reads every object once (a
// backup, a listing with data) then neither pays for filling the cache
// nor pushes out what is read again.
//
// It also remembers object records known absent (a nil value): those a
// commit deleted and those a lookup missed. The bloom filter in front of
// it (objFilter) answers for names that never existed, but not for deleted
// ones: an erasure-coded shard's rollback object is created by a write
// and deleted by its trim, and each write and trim of the shard looks it
// up; in pebble, a lookup that ends at a deletion walks the memtable and
// every level. Xattrs a lookup missed are remembered absent too.
//
// Invariant: every entry equals its key's committed value (nil: absent).
// It holds because
//   - entries are filled only by a reader holding the object's shard lock
//     (read or write; a chunk's key belongs to the object owning its data
//     file), so no commit of that key runs between the read and the fill;
//   - Apply updates the entries of every cached key its batch writes after
//     the commit and before it releases the write locks;
//   - nothing else writes these keys while the store is open.
//
// Values are shared: get hands out a copy.
type indexCache struct {
	mu       sync.RWMutex
	m        map[string][]byte
	bytes    int // cost of the entries in m
	maxBytes int
	// chunks holds, for each data file with cached checksum chunks, their
	// numbers: a range tombstone over a file's chunks (deleting or
	// truncating an object of more than pointDeleteMax chunks) then costs
	// the chunks that file has cached, not a walk of every entry under the
	// lock while each read and commit of the OSD waits (long, in a large
	// cache). Invariant: chunk c of file f is in chunks[f] iff
	// csumKey(f, c) is in m.
	chunks map[uint64]map[uint32]struct{}
	// xattrs holds, for each object ID with cached xattrs, their keys, so
	// that the range tombstone deleting an object's xattrs costs what it
	// has cached. Invariant: k is in xattrs[id] iff k, an xattr key of
	// object id, is in m.
	xattrs map[uint64]map[string]struct{}
	// seen remembers the hashes of keys whose large value missed once,
	// direct-mapped (a collision forgets the older key).
	seen     []atomic.Uint64
	seenSeed maphash.Seed

	hits, misses atomic.Int64
}

// indexCacheMaxValue is the largest value cached: the record of a 16 KiB
// object. File records are 34 bytes, chunks at most 272; larger inline
// objects would each push out dozens of the entries writes need.
const indexCacheMaxValue = 16<<10 + 256

// smallValue is the largest value filled on its first miss: file records
// (34 bytes), checksum chunks (272 at most), the records of empty objects,
// small xattrs.
const smallValue = 512

// seenSlots sizes indexCache.seen: 2 MiB. With the keys of 32k objects
// (a 128 MiB cache full of 4 KiB ones) about one in eight first misses is
// forgotten by a collision before its second.
const seenSlots = 256 << 10

// entryOverhead is what an entry costs besides its key and value bytes:
// the map slot, the string and slice headers.
const entryOverhead = 64

func entryCost(k string, v []byte) int { return len(k) + len(v) + entryOverhead }

func newIndexCache(maxBytes int64) *indexCache {
	return &indexCache{m: make(map[string][]byte), chunks: make(map[uint64]map[uint32]struct{}), xattrs: make(map[uint64]map[string]struct{}), maxBytes: int(maxBytes),
		seen: make([]atomic.Uint64, seenSlots), seenSeed: maphash.MakeSeed()}
}

// secondMiss reports whether key missed before (and remembers that it did).
func (c *indexCache) secondMiss(key []byte) bool {
	h := maphash.Bytes(c.seenSeed, key)
	slot := &c.seen[c.seenSlot(h)]
	h |= 1 // 0 marks an empty slot
	if slot.Load() == h {
		return true
	}
	slot.Store(h)
	return false
}

// seenSlot is where the hash h of a key is remembered: keys that share a
// slot forget each other's first miss.
func (c *indexCache) seenSlot(h uint64) uint64 { return (h >> 32) % seenSlots }

func cachedKey(k []byte) bool {
	return len(k) > 0 && (k[0] == tagObject || k[0] == tagCsum || k[0] == tagXattr)
}

// absentKnown says whether a lookup that misses k remembers it absent:
// for object records and xattrs, as a lookup of an absent key walks the
// memtable and every level of pebble.
func absentKnown(k []byte) bool {
	return len(k) > 0 && (k[0] == tagObject || k[0] == tagXattr)
}

// get returns key's committed value, nil if the key is known absent; ok
// false if the cache does not know.
func (c *indexCache) get(key []byte) (v []byte, ok bool) {
	c.mu.RLock()
	v, ok = c.m[string(key)]
	c.mu.RUnlock()
	if !ok {
		c.misses.Add(1)
		return nil, false
	}
	c.hits.Add(1)
	return bytes.Clone(v), true
}

// fillAbsent records that an object record or xattr a lookup missed is
// absent; see the invariant.
func (c *indexCache) fillAbsent(key []byte) {
	if !absentKnown(key) {
		return
	}
	c.mu.Lock()
	c.set(string(key), nil)
	c.mu.Unlock()
}

// fill records the committed value a lookup found; see the invariant.
func (c *indexCache) fill(key, v []byte) {
	if !cachedKey(key) || len(v) > indexCacheMaxValue || len(v) > smallValue && !c.secondMiss(key) {
		return
	}
	c.mu.Lock()
	c.set(string(key), present(v))
	c.mu.Unlock()
}

// set stores a copy of v under k, evicting arbitrary entries while the
// cache would exceed its bound. Called with mu held.
func (c *indexCache) set(k string, v []byte) {
	c.drop(k)
	cost := entryCost(k, v)
	for c.bytes+cost > c.maxBytes && len(c.m) > 0 {
		for victim := range c.m {
			c.drop(victim)
			break
		}
	}
	if cost > c.maxBytes {
		return
	}
	c.m[k] = bytes.Clone(v) // nil stays nil: absent
	c.bytes += cost
	if fid, chunk, ok := parseCsumKey(k); ok {
		set := c.chunks[fid]
		if set == nil {
			set = make(map[uint32]struct{})
			c.chunks[fid] = set
		}
		set[chunk] = struct{}{}
	}
	if id, ok := parseXattrKey(k); ok {
		set := c.xattrs[id]
		if set == nil {
			set = make(map[string]struct{})
			c.xattrs[id] = set
		}
		set[k] = struct{}{}
	}
}

// drop removes k's entry, if any. Called with mu held.
func (c *indexCache) drop(k string) {
	v, ok := c.m[k]
	if !ok {
		return
	}
	c.bytes -= entryCost(k, v)
	delete(c.m, k)
	if fid, chunk, ok := parseCsumKey(k); ok {
		set := c.chunks[fid]
		delete(set, chunk)
		if len(set) == 0 {
			delete(c.chunks, fid)
		}
	}
	if id, ok := parseXattrKey(k); ok {
		set := c.xattrs[id]
		delete(set, k)
		if len(set) == 0 {
			delete(c.xattrs, id)
		}
	}
}

// parseXattrKey returns the object ID of an xattr's key (idKey).
func parseXattrKey(k string) (id uint64, ok bool) {
	if len(k) < 9 || k[0] != tagXattr {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(k[1:9])), true
}

// parseCsumKey splits a checksum chunk's key (csumKey) into its data file
// and chunk number.
func parseCsumKey(k string) (fileID uint64, chunk uint32, ok bool) {
	if len(k) != 13 || k[0] != tagCsum {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64([]byte(k[1:9])), binary.BigEndian.Uint32([]byte(k[9:])), true
}

// dropRange removes every entry with a key in [lo, hi).
func (c *indexCache) dropRange(lo, hi string) {
	inRange := func(k string) bool { return k >= lo && k < hi }
	if overlaps([]byte(lo), []byte(hi), tagCsum) {
		fid, _, ok := parseCsumKey(lo)
		if ok && (hi <= string(csumKey(fid+1, 0))) {
			// Within one file: the only range Apply writes over checksums.
			c.dropChunks(fid, inRange)
		} else {
			for fid := range c.chunks {
				c.dropChunks(fid, inRange)
			}
		}
	}
	if overlaps([]byte(lo), []byte(hi), tagXattr) {
		id, ok := parseXattrKey(lo)
		if ok && hi <= string(idKey(tagXattr, id+1, nil)) {
			// Within one object: the only range Apply writes over xattrs.
			c.dropKeys(c.xattrs[id], inRange)
		} else {
			for _, set := range c.xattrs {
				c.dropKeys(set, inRange)
			}
		}
	}
	if overlaps([]byte(lo), []byte(hi), tagObject) {
		// Apply never writes a range tombstone over object records (objects
		// are removed one by one), so a walk is fine here.
		for k := range c.m {
			if k[0] == tagObject && inRange(k) {
				c.drop(k)
			}
		}
	}
}

// dropChunks drops the cached checksum chunks of file fid whose keys are
// inRange.
func (c *indexCache) dropChunks(fid uint64, inRange func(string) bool) {
	for chunk := range c.chunks[fid] {
		if k := string(csumKey(fid, uint64(chunk))); inRange(k) {
			c.drop(k)
		}
	}
}

// dropKeys drops the keys of set that are inRange.
func (c *indexCache) dropKeys(set map[string]struct{}, inRange func(string) bool) {
	for k := range set {
		if inRange(k) {
			c.drop(k)
		}
	}
}

// forget empties the cache. Called with mu held.
func (c *indexCache) forget() {
	clear(c.m)
	clear(c.chunks)
	clear(c.xattrs)
	c.bytes = 0
}

// committed brings the cached entries up to date with a batch just
// committed. Keys not cached stay uncached: most writes create objects
// nobody reads soon, and caching those would only evict hot entries.
func (c *indexCache) committed(b *pebble.Batch) {
	r := b.Reader()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			// The batch was built here and committed: it cannot be
			// illegible. Forget everything rather than risk a stale entry.
			c.forget()
			return
		}
		if !ok {
			return
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if _, cached := c.m[string(k)]; cached {
				if len(v) > indexCacheMaxValue {
					c.drop(string(k))
				} else {
					c.set(string(k), present(v))
				}
			}
		case pebble.InternalKeyKindRangeDelete:
			c.dropRange(string(k), string(v))
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindSingleDelete:
			// A record cached is known absent now. One not cached stays
			// out: a mass delete (a volume's removal, S3's garbage
			// collection) does not push out what reads need. A deleted
			// xattr is dropped: most go with their object, whose ID
			// nothing looks up again.
			if _, cached := c.m[string(k)]; cached && k[0] == tagObject {
				c.set(string(k), nil)
			} else {
				c.drop(string(k))
			}
		default:
			// Deletes, and any other kind: drop the entry.
			c.drop(string(k))
		}
	}
}

// present is v as a value that is there: an empty value is not nil,
// which the cache keeps for absent keys (an xattr may be empty).
func present(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

// overlaps says whether [lo, hi) holds keys starting with tag.
func overlaps(lo, hi []byte, tag byte) bool {
	return bytes.Compare(lo, []byte{tag + 1}) < 0 && bytes.Compare([]byte{tag}, hi) < 0
}

// reset forgets everything, after a commit whose outcome is unknown.
func (c *indexCache) reset() {
	c.mu.Lock()
	c.forget()
	c.mu.Unlock()
}
