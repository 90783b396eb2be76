package osd

import (
	"encoding/binary"

	"github.com/cairn-storage/cairn/internal/proto"
)

// A PG's version numbers its writes in order, across intervals: peering
// makes the new primary continue from the highest any copy has seen, and
// picks, among the copies that hold every acknowledged write, the one that
// has seen the highest. The version is not logged per write: every write
// leaves it on the objects it changes (their pg.EVersion, versionXattr), which
// the peering listings carry anyway, so the highest version a copy has
// applied is the highest of its objects'. Only a write that leaves its
// object gone (a delete) has nowhere to put it; it records its version in
// the PG's metadata object instead (keyDeleteVersion). Deletes of one PG
// applied concurrently may leave the older of their versions there; that
// can only make a restarted copy look older than it is when peering picks
// among complete copies, and reusing a version in a later interval is
// harmless, since the interval's epoch leads every pg.EVersion.
//
// Earlier builds kept a PG log: one omap key per write (version → op,
// epoch, object name) on the metadata object, trimmed to the newest 2,048
// every 64 writes. Nothing read it but the version, and it cost a store
// two more index keys per small write (the entry and, once trimming ran,
// the point delete of an old one) and an OSD 6-9% of its CPU under
// 4 KiB volume writes. A store written by such a build keeps its entries;
// loading a PG still takes its version from them.

// pgMetaObject holds a placement group's own state in its collection: the
// version of its newest delete and its scrub times, in its omap. Its name
// starts with the reserved prefix, so no client object can collide with it.
const pgMetaObject = proto.ReservedPrefix + "pgmeta"

// Omap keys of the PG metadata object. Legacy log keys are 8-byte
// versions; every other key starts with 0xff and sorts after them.
var (
	legacyLogEnd     = []byte{0xff}
	keyDeleteVersion = []byte{0xff, 'v'}
)

// encodeVersion and decodeVersion give a PG version's 8 bytes, big-endian
// (the legacy log keys' form).
func encodeVersion(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

func decodeVersion(b []byte) (uint64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}
