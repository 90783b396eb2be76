package proto

import (
	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Op is the operation a Request asks for.
type Op uint8

const (
	OpPing Op = iota + 1
	// Object data.
	OpWrite    // write Data at Offset (creates the object)
	OpPut      // replace the whole object's data with Data (creates it)
	OpRead     // read Length bytes at Offset (Length 0: to the end)
	OpTruncate // set size to Offset
	OpDelete   // remove data, xattrs and omap
	OpStat     // size and existence
	OpCreate   // create empty if absent; Flags&FlagExclusive fails if it exists
	// Extended attributes: Key names the attribute.
	OpSetXattr
	OpGetXattr
	OpRmXattr
	OpListXattrs // all, as KVs
	// Omap: a sorted key→value map per object.
	OpOmapSet     // KVs
	OpOmapGet     // Keys → KVs of those present
	OpOmapRm      // Keys
	OpOmapList    // from Start (inclusive) to End (exclusive, empty: no end), at most Limit
	OpOmapRmRange // Start..End
	// Listing the objects of one placement group, names after Start, at most Limit.
	OpList
	// OSD to OSD: apply Txn (an encoded objstore transaction) as a replica of
	// PG at PGVersion.
	OpReplicate
	// OSD to OSD: read Object's full state from a replica (repair after a
	// local checksum error). For a PG of an erasure-coded pool: read the
	// receiver's shard, Length bytes at Offset (none when Length is 0),
	// with its encoded pg.ShardMeta as the reply's one KV and the object's
	// logical size as Size.
	OpReadReplica
	// Any client to an OSD: the OSD's own figures as KVs (keys StatusKey*,
	// decimal values); no epoch check, so it works during map changes.
	OpStatus
	// OSD to OSD: list the objects of PG held by this OSD after Start, at
	// most Limit, each as a KV of name → encoded ObjectState (version and
	// size); Version of the reply is the OSD's last PG version. FlagDigest
	// adds a digest of xattrs and omap; FlagDeep also reads every object
	// (verifying checksums) and adds a digest of its data.
	OpPGList
	// Client to the primary of PG: scrub it now (FlagDeep: deep scrub);
	// the reply's KVs are the scrub's counts (keys ScrubKey*).
	OpScrub
	// Snapshots of one object (see package snapset). OpSnaps reads the
	// head's snapshot state: Data is the encoded snapset.Set, Size the
	// head's size. OpSnapTrim deletes the clones no snapshot in Data (an
	// encoded list, snapset.EncodeSnaps) needs any more.
	OpSnaps
	OpSnapTrim
	// OpOmapTxn: a guarded omap transaction on Object, Data its encoding
	// (EncodeOmapTxn). The primary checks every guard under the object's
	// lock; if all hold, the mutations apply as one replicated write,
	// else nothing changes and the reply is StatusPrecondition: Data
	// names the first failing guard's key, and KVs hold that key's
	// current value unless it is absent.
	OpOmapTxn
	// OpOmapListDelim lists Object's omap keys after Start that start
	// with Keys[0] (the prefix), rolling up those that contain Keys[1]
	// (the delimiter, may be empty) after the prefix into common
	// prefixes; at most Limit (≤ MaxListDelim) entries and prefixes
	// together. The reply's KVs are the entries, its Data the encoded
	// prefixes (EncodeListPrefixes), More whether more follow.
	OpOmapListDelim
	// OSD to OSD, erasure-coded PGs: roll the receiver's shards back
	// (OpShardRollBack) or drop what they keep to roll back
	// (OpShardTrim), for the objects of Data (EncodeShardEntries) at the
	// versions it names. An entry whose shard is at another version is
	// left alone (a trim) or fails the request (a rollback).
	OpShardRollBack
	OpShardTrim
	// OpShardTrims: OSD to OSD, the trims of several erasure-coded PGs at
	// once (Data: AppendPGShardEntries), applied as one transaction to the
	// receiver's positions of them as its map places them; PG and Object
	// are unused. The trimmer sends one a batch to each OSD instead of one
	// per PG and position.
	OpShardTrims
	// OpStage: a client to each position of an erasure-coded PG, ahead of
	// a put it asks the primary for with FlagStaged: keep Data, the shard
	// of position Limit of Object, in memory for a short while under the
	// token Key. Nothing is written; a shard no put takes expires.
	OpStage
	opMax
)

// Valid reports whether op is a known operation.
func (op Op) Valid() bool { return op >= OpPing && op < opMax }

// Keys of an OpScrub reply (decimal values).
const (
	ScrubKeyObjects  = "objects"  // objects compared
	ScrubKeyBytes    = "bytes"    // bytes read (deep) on the primary
	ScrubKeyErrors   = "errors"   // inconsistencies found
	ScrubKeyRepaired = "repaired" // of those, repaired
)

// Request is one operation on one object of one placement group. Fields an
// op does not use are left zero; encoding is the same for every op.
type Request struct {
	Op     Op
	Flags  uint32
	Epoch  clustermap.Epoch // sender's map epoch
	PG     clustermap.PGID
	Object string
	Offset uint64
	Length uint64
	Limit  uint32
	Key    string // xattr name
	Start  []byte // omap/list range start
	End    []byte // omap range end
	Data   []byte
	Keys   [][]byte
	KVs    []KV
	// Replication (OpReplicate): the PG version this transaction creates and
	// the encoded transaction.
	PGVersion uint64
	Txn       []byte
	// SnapSeq (writes): the newest snapshot of the object's set (volume) the
	// writer knows; the primary keeps the object's older content for it
	// first (copy-on-write). 0: no snapshots, and a delete also removes
	// every clone.
	SnapSeq uint64
	// Snap (OpRead, OpStat): read the object as it was at this snapshot;
	// 0 is the head.
	Snap uint64

	// DataSums and TxnSums are not encoded. The receiving rpc layer fills
	// them with the crc32c of each whole Align-byte block of Data and Txn,
	// taken as the bytes arrived, when the payload lies block-aligned in
	// the message (see AlignMin); the object store then need not read the
	// data again to checksum it.
	DataSums, TxnSums []uint32
	// Frame and Kept are not encoded either. Frame is the pooled buffer the
	// receiving rpc layer decoded the request from: the request's byte
	// slices point into it, and it is reused once the handler returns. A
	// handler that sets Kept keeps the buffer (to send data on from where
	// it lies after returning, say) and gives it back with bufpool.Put.
	Frame []byte
	Kept  bool
}

// KV is one key/value pair of an omap or xattr listing.
type KV struct {
	Key   []byte
	Value []byte
}

// Status is the outcome of a Request.
type Status uint8

const (
	StatusOK Status = iota
	StatusNotFound
	StatusExists
	StatusInvalid     // bad request: Message says what
	StatusNoSpace     // the OSD's disk is full
	StatusCorrupt     // checksum mismatch (on every copy tried)
	StatusWrongEpoch  // sender's map is older or newer: Epoch holds the OSD's
	StatusNotPrimary  // this OSD is not the PG's primary in the sender's epoch
	StatusUnavailable // fewer than min_size copies can be written now
	StatusIOError
	StatusAuth // authentication failed
	// StatusPrecondition: a guard of an OpOmapTxn did not hold; nothing
	// changed. Data is the failing key, KVs its current value if any.
	StatusPrecondition
	// StatusNoStage: a put with FlagStaged found a position's staged shard
	// gone (expired, taken by an earlier attempt, or sent to another OSD).
	// The put was not acknowledged; the client sends the object whole.
	StatusNoStage
	statusMax
)

// MsgNoSuchObject is the Message of a StatusNotFound for a request's own
// object: the client names the object and pool in its error.
const MsgNoSuchObject = "no such object"

// Response answers one Request.
type Response struct {
	Status  Status
	Epoch   clustermap.Epoch // responder's map epoch
	Message string           // human-readable detail for non-OK statuses
	Size    uint64           // OpStat/OpRead: object size; OpWrite: bytes written
	Version uint64           // PG version after a write
	Data    []byte
	KVs     []KV
	Names   []string // OpList
	More    bool     // a listing stopped at Limit

	// Pooled, when not nil, is a bufpool buffer that Data (and the other
	// byte fields) may point into. It is not sent. The response's last
	// user calls Release once done with it; a response never released is
	// only garbage.
	Pooled []byte
	// Free, when not nil, is called by Release instead: Data belongs to
	// something else (a cache) until then.
	Free func()
	// DataSums, when not nil, are the crc32c of each whole Align-byte
	// block of Data, known to the responder (a read checked them): the rpc
	// layer puts them into the frame's sum instead of reading Data again.
	// Not sent: on a response received, the rpc layer fills them as the
	// frame's bytes arrived (for large aligned Data), so a primary that
	// forwards what its peers sent need not read it again either.
	DataSums []uint32
}

// Release hands the response's pooled buffer back; the response's byte
// fields must not be used afterwards.
func (r *Response) Release() {
	if r.Free != nil {
		r.Free()
		r.Free, r.Pooled, r.Data, r.KVs = nil, nil, nil, nil
		return
	}
	if r.Pooled != nil {
		bufpool.Put(r.Pooled)
		r.Pooled, r.Data, r.KVs = nil, nil, nil
	}
}

// Keys of an OpStatus reply.
const (
	StatusKeyCPUNanos = "cpu_ns"        // user+system CPU time of the OSD process
	StatusKeyMaxRSS   = "max_rss_bytes" // peak resident memory
)
