package objstore

// Checks too costly for production, compiled in with -tags invariants (as
// make test builds) and out otherwise: every call sits behind a test of
// the constant invariantsOn. Each asserts an invariant of doc.go, and
// panics when it does not hold: that is a bug of this package, never an
// operating error.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// checkCommitted asserts the index cache's invariant for the keys of a
// batch that just committed, before its objects' locks go: every entry
// of such a key holds the key's committed value (see indexCache). Other
// keys may belong to a transaction between its commit and its update of
// the cache, so only the batch's own are checked.
func (s *Store) checkCommitted(b *pebble.Batch) {
	r := b.Reader()
	for {
		_, k, _, ok, err := r.Next()
		if err != nil {
			panic(fmt.Sprintf("objstore: committed batch is illegible: %v", err))
		}
		if !ok {
			return
		}
		if !cachedKey(k) {
			continue
		}
		s.idx.mu.RLock()
		v, cached := s.idx.m[string(k)]
		s.idx.mu.RUnlock()
		if !cached {
			continue
		}
		got, err := s.get(k)
		if errors.Is(err, pebble.ErrNotFound) && v == nil {
			continue // known absent, and absent
		}
		if errors.Is(err, pebble.ErrNotFound) {
			panic(fmt.Sprintf("objstore: index cache holds %x, which the committed index does not", k))
		}
		if err == nil && v == nil {
			panic(fmt.Sprintf("objstore: index cache holds %x as absent, which the committed index holds", k))
		}
		if err != nil {
			continue // an IO error of the index is not this invariant's business
		}
		if !bytes.Equal(got, v) {
			panic(fmt.Sprintf("objstore: index cache holds %x = %x, the committed index %x", k, v, got))
		}
	}
}

// checkDirectTarget asserts that a write before the commit of blocks ext
// of an existing file into slot B (or A) touches no block live there in
// the committed state, and that the file has no journal record whose
// deletion is not committed, since its replay would overwrite the write
// (doc.go, "Crash consistency").
func (a *applyCtx) checkDirectTarget(st *objState, fid uint64, ext []uint64, slotB bool) {
	for _, b := range ext {
		ch, bit := st.chunks[b/chunkBlocks], uint64(1)<<(b%chunkBlocks)
		if ch.origUnknown {
			panic(fmt.Sprintf("objstore: direct write of block %d of %q/%q, whose committed slot is unknown", b, st.coll, st.name))
		}
		if ch.orig&bit != 0 && (ch.origSlotB&bit != 0) == slotB {
			panic(fmt.Sprintf("objstore: direct write of block %d of %q/%q into its live slot (B: %v)", b, st.coll, st.name, slotB))
		}
	}
	if a.s.hasPending(fid) {
		panic(fmt.Sprintf("objstore: direct write into file %016x of %q/%q, which has journal records", fid, st.coll, st.name))
	}
}

// checkChunks asserts that the checksum chunks of an object's file, as
// the batch will hold them, decode to what was encoded and give each
// block the transaction wrote its present bit, its slot, and the checksum
// of its new content (unless a test turned verifySums off to store a
// checksum a caller got wrong).
func checkChunks(st *objState) {
	decoded := map[uint64]*chunk{}
	for c, ch := range st.chunks {
		if !ch.dirty || ch.bits == 0 {
			continue
		}
		d, err := decodeChunk(ch.encode())
		if err != nil || d.bits != ch.bits || d.slotB != ch.slotB&ch.bits {
			panic(fmt.Sprintf("objstore: chunk %d of %q/%q does not decode as encoded (%v)", c, st.coll, st.name, err))
		}
		decoded[c] = d
	}
	for b, blk := range st.dirty {
		d, i := decoded[b/chunkBlocks], b%chunkBlocks
		if d == nil || !d.present(i) {
			panic(fmt.Sprintf("objstore: block %d of %q/%q written but not present in its chunk", b, st.coll, st.name))
		}
		if d.crc[i] != st.chunks[b/chunkBlocks].crc[i] || verifySums && d.crc[i] != blockCRC(blk) {
			panic(fmt.Sprintf("objstore: block %d of %q/%q has checksum %08x, its content %08x", b, st.coll, st.name, d.crc[i], blockCRC(blk)))
		}
		if d.inB(i) != (st.chunks[b/chunkBlocks].slotB&(1<<i) != 0) {
			panic(fmt.Sprintf("objstore: block %d of %q/%q changed slot in encoding", b, st.coll, st.name))
		}
	}
}

// checkJournalRecord asserts that a journal record holds whole blocks at
// a block boundary, so that its replay is idempotent.
func checkJournalRecord(off uint64, data []byte) {
	if off%blockSize != 0 || len(data) == 0 || len(data)%blockSize != 0 {
		panic(fmt.Sprintf("objstore: journal record of %d bytes at %d is not whole blocks", len(data), off))
	}
}

// checkGroup asserts that a commit-log group decodes to what was encoded
// into it: its number, tail and records.
func checkGroup(b []byte, seq, tail uint64, recs [][]byte) {
	gseq, gtail, grecs, n, err := decodeLogGroup(b)
	if err != nil || gseq != seq || gtail != tail || n > len(b) ||
		!slices.EqualFunc(grecs, recs, bytes.Equal) {
		panic(fmt.Sprintf("objstore: commit-log group %d does not decode as encoded (%v)", seq, err))
	}
}
