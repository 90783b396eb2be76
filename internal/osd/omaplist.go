package osd

import (
	"bytes"

	"github.com/cairn-storage/cairn/internal/proto"
)

// Delimiter listings of an omap (proto.OpOmapListDelim), the shape of an
// S3 ListObjects page: the keys after `after` that start with the prefix,
// where a key holding the delimiter after the prefix counts only as its
// common prefix (the key up to and including that delimiter), once. The
// listing jumps past a common prefix with one seek, so a page costs its
// entries and prefixes, never the keys under a prefix it rolls up.

// listDelimBytes bounds the keys and values of one reply (one item is
// always sent, whatever its size: a key of proto.MaxKeyLen and a value of
// proto.MaxOmapValueLen fit a frame easily).
const listDelimBytes = 4 << 20

// omapSeeker is what listDelim reads: an omap in key order that can jump
// forward (objstore.OmapIter).
type omapSeeker interface {
	SeekGE(key []byte) bool
	Next() bool
	Key() []byte
	Value() []byte
}

// delimListing is one page of a delimiter listing.
type delimListing struct {
	entries  []proto.KV // copies
	prefixes [][]byte   // copies, in order, each once
	more     bool       // another entry or prefix follows
}

// listDelim lists the omap it reads: the keys > after that start with
// prefix; with a delimiter, a key that holds it after the prefix stands
// for its common prefix prefix+…+delim, listed once and only if it sorts
// after `after` (a page that ended on a common prefix resumes after it).
// At most limit entries and prefixes together, and no more than maxBytes
// of keys and values unless that would leave the page empty. A key
// starting with NUL is listed only if prefix starts with NUL too: those
// keys are their owner's bookkeeping, never a user's.
//
// It reads at most one key per item listed, one more to know whether more
// follow, and one to skip the keys under `after`'s common prefix.
func listDelim(it omapSeeker, prefix, delim, after []byte, limit, maxBytes int) delimListing {
	var out delimListing
	start := prefix
	if bytes.Compare(after, prefix) >= 0 {
		start = append(bytes.Clone(after), 0) // the successor of after
	}
	if len(prefix) == 0 && (len(start) == 0 || start[0] == 0) {
		// No prefix: skip the NUL keys, which sort before all others.
		start = []byte{1}
	}
	n, size := 0, 0
	full := func(b int) bool { return n == limit || n > 0 && size+b > maxBytes }
	for ok := it.SeekGE(start); ok; {
		k := it.Key()
		if !bytes.HasPrefix(k, prefix) {
			break // sorted: every key that has the prefix came before
		}
		if i := delimAt(k[len(prefix):], delim); i >= 0 {
			cp := k[:len(prefix)+i+len(delim)]
			if bytes.Compare(cp, after) > 0 {
				if full(len(cp)) {
					out.more = true
					break
				}
				out.prefixes = append(out.prefixes, bytes.Clone(cp))
				n, size = n+1, size+len(cp)
			}
			next := prefixEnd(cp)
			if next == nil {
				break // cp is all 0xff: no key sorts after its keys
			}
			ok = it.SeekGE(next)
			continue
		}
		v := it.Value()
		if full(len(k) + len(v)) {
			out.more = true
			break
		}
		out.entries = append(out.entries, proto.KV{Key: bytes.Clone(k), Value: bytes.Clone(v)})
		n, size = n+1, size+len(k)+len(v)
		ok = it.Next()
	}
	return out
}

// delimAt is the index of delim in rest, -1 if absent or delim is empty.
func delimAt(rest, delim []byte) int {
	if len(delim) == 0 {
		return -1
	}
	return bytes.Index(rest, delim)
}

// prefixEnd is the least key greater than every key starting with p, nil
// if there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// omapListDelim serves OpOmapListDelim from this OSD's copy. The caller
// holds the object's lock for reading.
func (s *Server) omapListDelim(coll string, req *proto.Request) *proto.Response {
	if len(req.Keys) != 2 {
		return s.fail(proto.StatusInvalid, "omap delimiter listing: want a prefix and a delimiter, got %d keys", len(req.Keys))
	}
	it, err := s.store.NewOmapIter(coll, req.Object)
	if err != nil {
		return s.failErr(err)
	}
	l := listDelim(it, req.Keys[0], req.Keys[1], req.Start, limit(req.Limit, proto.MaxListDelim), listDelimBytes)
	if err := it.Close(); err != nil {
		return s.failErr(err)
	}
	r := s.ok()
	r.KVs, r.More = l.entries, l.more
	r.Data = proto.AppendListPrefixes(nil, l.prefixes)
	return r
}
