package objstore

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// objFilter is a Bloom filter of every object record key in the index, so
// that looking up an object that does not exist, which every write that
// creates one does, seldom reaches pebble: in pebble a missing key is a seek
// through the memtable's skiplist (a CPU cache miss nearly every step) and a
// probe of each level, a large part of an OSD's CPU under 4 KiB object
// creates.
//
// Invariant: every object key in the index was added, so mayContain never
// says no to a key that exists. It holds because
//   - Open adds every key its scan of the index finds before the store
//     serves anything;
//   - Apply adds every object key its batch sets before it commits, whether
//     or not the commit then succeeds;
//   - nothing else writes object keys while the store is open.
//
// Deleted keys stay in: they only cost a lookup in pebble. Once far more
// keys were added than it was sized for, it says yes to nearly everything,
// so the store stops consulting it (disabled); the next Open sizes a new
// one for the objects there are then.
//
// Layout: blocked, one 512-bit block (one cache line) per key, 6 bits in
// it; at 10 bits per key about 1% of absent keys get a false yes.
type objFilter struct {
	seed     maphash.Seed
	words    []atomic.Uint64 // 8 per block
	blocks   uint64
	capacity int64
	added    atomic.Int64 // adds that set a new bit: about the distinct keys
}

// filterBitsPerKey sizes a filter; filterMinKeys is the least it is sized
// for (1.25 MiB). Tests lower it to reach the disabled state.
const filterBitsPerKey = 10

var filterMinKeys int64 = 1 << 20

// filterMaxKeys bounds the keys Open collects for a filter (8 bytes each
// while it scans): a store with more objects runs without one.
const filterMaxKeys = 1 << 24

func newObjFilter(keys int64, seed maphash.Seed) *objFilter {
	c := max(2*keys, filterMinKeys)
	blocks := uint64(c*filterBitsPerKey+511) / 512
	return &objFilter{seed: seed, words: make([]atomic.Uint64, 8*blocks), blocks: blocks, capacity: c}
}

// filterHash is the one hash of key that both add and mayContain use.
func filterHash(seed maphash.Seed, key []byte) uint64 { return maphash.Bytes(seed, key) }

// block returns the first word of h's block, and the 6 bit positions in it.
func (f *objFilter) probe(h uint64) (base uint64, bits [6]uint16) {
	base = 8 * ((h >> 32) * f.blocks >> 32) // h's high half picks the block
	g := h * 0x9e3779b97f4a7c15             // the rest, mixed, picks the bits
	for i := range bits {
		bits[i] = uint16(g>>(9*i)) & 511
	}
	return base, bits
}

// addHash adds a key by its filterHash.
func (f *objFilter) addHash(h uint64) {
	base, bits := f.probe(h)
	grew := false
	for _, b := range bits {
		w := &f.words[base+uint64(b>>6)]
		m := uint64(1) << (b & 63)
		if w.Load()&m == 0 {
			w.Or(m)
			grew = true
		}
	}
	if grew {
		f.added.Add(1)
	}
}

func (f *objFilter) add(key []byte) { f.addHash(filterHash(f.seed, key)) }

// mayContain is false only for a key never added.
func (f *objFilter) mayContain(key []byte) bool {
	base, bits := f.probe(filterHash(f.seed, key))
	for _, b := range bits {
		if f.words[base+uint64(b>>6)].Load()&(uint64(1)<<(b&63)) == 0 {
			return false
		}
	}
	return true
}

// overfull says the filter has taken four times the keys it was sized
// for, past which its false yeses (about a third) make it not worth asking.
func (f *objFilter) overfull() bool { return f.added.Load() > 4*f.capacity }

// addToFilter adds the object keys batch sets to the filter, before the
// batch commits (see objFilter).
func (s *Store) addToFilter(batch *pebble.Batch) {
	f := s.filter.Load()
	if f == nil {
		return
	}
	r := batch.Reader()
	for {
		kind, k, _, ok, err := r.Next()
		if err != nil {
			// Built here, so legible; if not, stop trusting the filter.
			s.filter.Store(nil)
			return
		}
		if !ok {
			break
		}
		if kind == pebble.InternalKeyKindSet && len(k) > 0 && k[0] == tagObject {
			f.add(k)
		}
	}
	if f.overfull() {
		s.filter.CompareAndSwap(f, nil)
	}
}
