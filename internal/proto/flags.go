package proto

// Request flags (Request.Flags), each with the ops it applies to: a flag
// changes how the receiver serves a request, so one whose meaning changes
// comes with a new protocol version (internal/rpc).
const (
	FlagExclusive uint32 = 1 << iota // OpCreate/OpPut: fail with StatusExists if the object exists
	FlagBalanced                     // reserved: reads may go to any up replica
	// FlagLocal: OSD to OSD, serve a read op from this OSD's own copy even
	// if it is not the primary (recovery reads the authoritative copy).
	FlagLocal
	FlagDeep   // OpPGList, OpScrub: read and verify all data (implies FlagDigest)
	FlagDigest // OpPGList: also digest each object's xattrs and omap (light scrub)
	// FlagBackground: OpReplicate of a background recovery copy, which
	// an OSD past its backfill-full mark refuses (StatusNoSpace).
	FlagBackground
	// FlagRetry: the sender sent this request before and does not know
	// whether it applied (the client sets it on every resend). An
	// OpOmapTxn with it first looks for its token among those the object
	// keeps; other ops are idempotent and ignore it.
	FlagRetry
	// FlagShardWrite: OpReplicate of a client write to an erasure-coded
	// PG. KVs[0] is the new shard's pg.ShardMeta; the receiver keeps, in
	// the same transaction, what it needs to roll the shard back, and
	// writes the meta with it.
	FlagShardWrite
	// FlagPrevShard: OpReadReplica of an erasure-coded PG reads the
	// shard the receiver's newest write rolls back to, and its meta.
	FlagPrevShard
	// FlagShardPartial: with FlagShardWrite, the write changes part of
	// the shard (a write at an offset, a truncate): the meta's Prev is
	// the version the receiver's shard must hold (zero: none, or a
	// tombstone), and a shard at another version refuses it with
	// StatusPrecondition, so bytes are never written over a stale shard.
	FlagShardPartial
	// FlagShardKeys: with FlagShardWrite, the write changes the object's
	// xattrs or omap (a create, an xattr or omap change, a delete): the
	// receiver keeps them with the old shard, so a rollback restores them.
	FlagShardKeys
	// FlagFold: OpReadReplica of an erasure-coded PG answers, with the
	// shard's meta, the XOR of its chunks (ec.Layout.FoldInto) instead of
	// its bytes: deep scrub checks parity with it.
	FlagFold
	// FlagForWrite: OpReadReplica of an erasure-coded PG reads the old
	// bytes a partial write replaces: the store's caches may answer it,
	// but it fills none (the write is about to change those blocks).
	FlagForWrite
	// FlagPosition: OpReadReplica of an erasure-coded PG reads this OSD's
	// shard of position Limit, whether or not placement puts that
	// position here now: recovery copies a moved position's shards from
	// the OSD that held it (pg.BackfillSources).
	FlagPosition
	// FlagShardXor: with FlagShardPartial, the write's bytes are parity
	// deltas (ec.Codec.WriteDelta) that the receiver XORs into its
	// shard's bytes at their offsets, once: a shard already at the write's
	// version applies nothing, one at another version than Prev refuses,
	// and one whose old bytes fail their checksums refuses too
	// (StatusPrecondition: it is rebuilt before the write is sent again).
	FlagShardXor
	// FlagSettled: OpReadReplica of an erasure-coded PG from a client
	// reading the positions itself (client.Pool.ReadSettledPieces): the
	// receiver reads the shard's meta and bytes under the shard's lock,
	// so no write lands between the two (a primary's own reads need not:
	// it holds the object's lock while it reads).
	FlagSettled
	// FlagStaged: OpPut of an erasure-coded object whose client sent each
	// position its shard first (OpStage, token Key): Data is empty and
	// Length is the object's size. With FlagShardWrite, the OpReplicate
	// to a position carries the token, and the receiver's shard data is
	// the one staged there (the transaction puts none). A position
	// without it refuses with StatusNoStage.
	FlagStaged
)
