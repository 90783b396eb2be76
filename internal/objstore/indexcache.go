package objstore

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// indexCache keeps the committed values of recently read object records
// and checksum chunks: the two index entries every read and write of an
// object looks up. A small write on an OSD looks up its object's record,
// the record of its PG's metadata object and a checksum chunk; in pebble
// each lookup is a seek through a 64 MiB memtable skiplist (nearly every
// step a CPU cache miss) and a bloom probe per sstable, which took 15% of
// an OSD's CPU under 4 KiB writes.
//
// Invariant: every entry equals its key's committed value. It holds
// because
//   - entries are filled only by a reader holding the object's shard lock
//     (read or write; a chunk's key belongs to the object owning its data
//     file), so no commit of that key runs between the read and the fill;
//   - Apply updates the entries of every cached key its batch writes after
//     the commit and before it releases the write locks;
//   - nothing else writes these keys while the store is open.
//
// Values are shared: get hands out a copy.
type indexCache struct {
	mu  sync.RWMutex
	m   map[string][]byte
	max int

	hits, misses atomic.Int64
}

// indexCacheEntries bounds the cache: about 10 MiB when full of checksum
// chunks (at most 272 bytes each), under 20 MiB at the largest values.
const indexCacheEntries = 32 << 10

// indexCacheMaxValue keeps inline objects' data out of the cache: file
// records are 34 bytes, chunks at most 272, the record of an empty inline
// object (a PG's metadata object) a few dozen.
const indexCacheMaxValue = 512

func newIndexCache(max int) *indexCache {
	return &indexCache{m: make(map[string][]byte), max: max}
}

func cachedKey(k []byte) bool {
	return len(k) > 0 && (k[0] == tagObject || k[0] == tagCsum)
}

func (c *indexCache) get(key []byte) ([]byte, bool) {
	c.mu.RLock()
	v, ok := c.m[string(key)]
	c.mu.RUnlock()
	if !ok {
		c.misses.Add(1)
		return nil, false
	}
	c.hits.Add(1)
	return bytes.Clone(v), true
}

// fill records the committed value a lookup found; see the invariant.
func (c *indexCache) fill(key, v []byte) {
	if !cachedKey(key) || len(v) > indexCacheMaxValue {
		return
	}
	c.mu.Lock()
	if _, ok := c.m[string(key)]; !ok && len(c.m) >= c.max {
		for k := range c.m { // an arbitrary victim
			delete(c.m, k)
			break
		}
	}
	c.m[string(key)] = bytes.Clone(v)
	c.mu.Unlock()
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
			clear(c.m)
			return
		}
		if !ok {
			return
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if _, cached := c.m[string(k)]; cached {
				if len(v) > indexCacheMaxValue {
					delete(c.m, string(k))
				} else {
					c.m[string(k)] = bytes.Clone(v)
				}
			}
		case pebble.InternalKeyKindRangeDelete:
			// Rare (clearing more than pointDeleteMax keys), so a scan is fine.
			if overlaps(k, v, tagCsum) || overlaps(k, v, tagObject) {
				for ck := range c.m {
					if ck >= string(k) && ck < string(v) {
						delete(c.m, ck)
					}
				}
			}
		default:
			// Deletes, and any other kind: drop the entry.
			delete(c.m, string(k))
		}
	}
}

// overlaps says whether [lo, hi) holds keys starting with tag.
func overlaps(lo, hi []byte, tag byte) bool {
	return bytes.Compare(lo, []byte{tag + 1}) < 0 && bytes.Compare([]byte{tag}, hi) < 0
}

// reset forgets everything, after a commit whose outcome is unknown.
func (c *indexCache) reset() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
