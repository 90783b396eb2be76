// Package objstore is the local object store of one OSD: it turns one data
// device (plus optionally a faster metadata device) into a transactional
// store of objects addressed by (collection, name). It knows nothing about
// peers, placement groups or the network; the OSD uses the placement-group id
// ("1.2a") as the collection and ships Txns to replicas in Txn.Marshal form.
//
// It must not import anything of cairn outside this package but the leaf
// bufpool: it sits at the bottom of the dependency graph and is tested on
// its own.
//
// # Where things are
//
//	store.go       Options, Store, locks, ID allocation, failure
//	open.go        Open (format, replay, orphans, counting) and Close
//	storeid.go     the store's identity: an index and a data directory of one store
//	apply.go       Apply: lock, run the ops, commit, what follows the commit
//	objstate.go    each op on an object's working copy
//	finalize.go    where new blocks go: direct, copy-on-write or journaled
//	checkpoint.go  the background checkpointer of deferred writes
//	pacer.go       slows writers to the data disk's sync rate when checkpoints fall behind
//	writeback.go   the write-back area: deferred writes kept on the meta device
//	destage.go     the destager, which moves the area's blocks to the data disk
//	read.go        the read path of object data; lookup.go everything else
//	omapiter.go    OmapIter: one object's omap in key order, with SeekGE
//	files.go       data file handles and slots; directio.go their O_DIRECT IO
//	space.go       free-space checks (checkSpace, AdmitBelow) and Usage
//	commitlog.go   the commit log: why, its state; logformat.go, logwriter.go,
//	               logreplay.go, logsegments.go its format, group commit,
//	               replay and segment files; records.go and txn.go the encodings
//	invariants.go  checks compiled in by -tags invariants (make test)
//	iofaults.go    where tests inject IO errors (iofaults_test.go)
//
// # What it owns
//
// Object data, per-object extended attributes (xattrs), per-object sorted
// key/value maps (omap), per-4-KiB-block crc32c checksums, a deferred-write
// journal and a superblock with the format version. Every byte returned by
// Read has been checked against its checksum; a mismatch is a
// CorruptionError (see IsCorruption) and the bytes are never returned, so the
// OSD can repair the object from a replica.
//
// The index (pebble) checks its own blocks' checksums as it reads them. A
// damaged index file is an IndexCorruptionError (IsCorruption too), never a
// crash: Open refuses the store (pebble's damage reports, and its panics,
// while it opens and while Open reads the index; every live sstable must
// open), and VerifyIndex reads every block of every live sstable, for a
// background check. A store with a damaged index is not repaired in place:
// its OSD is replaced by an empty one and the other copies fill it.
//
// # On-disk layout
//
//	MetaDir/            pebble database (sstables, no WAL): the index and journal
//	MetaDir/commitlog-0 .. commitlog-2   the commit log (commitlog.go), preallocated
//	Dir/data/00 .. ff/  256 fan-out directories, created and synced at format
//	Dir/data/ab/<16 hex digits of fileID>   one bulk data file per large object
//	Dir/store-id        the store's identity, also in the index (storeid.go):
//	                    Open refuses an index and a data directory of two stores
//
// Every block of a data file has two homes: slot A at its logical offset and
// slot B at that offset plus 4 TiB (a sparse hole until used). Its checksum
// chunk says which one is live.
//
// Key space of the pebble database (one tag byte, then fixed-width big-endian
// integers or order-preserving escaped strings; esc(s) writes 0x00 as
// 0x00 0xff and ends with 0x00 0x01, so escaped names sort exactly like the
// names, and one collection's keys never interleave with another's):
//
//	0x00 "sb"                         -> format version (uvarint)
//	0x00 "id"                         -> id high-water mark (ids are handed out in batches)
//	0x00 "si"                         -> the store's id (hex), as Dir/store-id holds it
//	'O' esc(coll) esc(name)           -> object record
//	'A' objID(8) xattr-key            -> xattr value
//	'M' objID(8) omap-key             -> omap value (OmapList = one range scan)
//	'K' fileID(8) chunk(4)            -> checksum chunk of blocks chunk*64 .. chunk*64+63
//	'F' fileID(8)                     -> objID(8): this data file is referenced
//	'J' seq(8)                        -> journal record (deferred write; see below)
//	'W' fileID(8) block(8)            -> 4 KiB block in the write-back area (writeback.go)
//
// Object record:
//
//	ver(1) flags(1) objID(8) size(8) mtime(8) fileID(8)
//	[inline only: crc32c(4) per 4 KiB block | data (size bytes)]
//
// A transaction rewrites the record only when it creates the object or
// changes its data or size; xattr and omap changes leave it, and mtime, as
// they were (as POSIX does), since every client write sets a version xattr.
//
// Checksum chunk: presence bitmap(8), then one crc32c(4) per set bit, then
// (only if some present block lives in slot B) the slot-B bitmap(8). A block
// whose bit is clear was never written or was truncated away; it reads as
// zeros without touching the file, so sparse objects cost nothing. A block's
// checksum always covers the full 4 KiB with zeros past the object's end.
//
// Journal record: ver(1) fileID(8) offset(8) whole-block data.
//
// Objects get a fresh objID when created, so Delete is a few range deletions
// and a re-created object can never see its predecessor's xattrs or omap.
// Since xattrs, omap, checksums and data hang off the objID and fileID, not
// the name, Rename rewrites two records whatever the object's size.
//
// # Why one design fits VM disks and S3 objects
//
// Every Apply builds one pebble batch and commits it through the commit log
// (commitlog.go), the index's write-ahead log: the first committer writes
// the batches queued behind it in one O_DIRECT|O_DSYNC write, then applies
// them to the index (pebble, without a WAL of its own) in log order.
//
// Objects of at most InlineMax (64 KiB) live entirely in their pebble record:
// creating or rewriting a 4 KiB object is one batch, made durable by one
// log write shared with concurrent Applies.
//
// Larger objects have a data file. Two write paths keep both workloads cheap:
//
//   - Deferred write (random 4 KiB overwrites of a VM-disk object, small
//     appends): the new blocks go into a journal record, committed with
//     the batch that sets their checksums and the new size. The record
//     lives in the commit log only, never in the index's memtable, until a
//     replay puts it there (commitlog.go says why and what it costs). One
//     group-committed log write makes the transaction durable; afterwards the blocks are
//     written to the data file's page cache while the object lock is still
//     held, so readers see them (blocks that held nothing are written
//     there before the commit; see Space). A background checkpointer
//     fdatasyncs the touched files every checkpointInterval (sooner when
//     journalKickBytes, or a quarter of the pacer's limit, are pending),
//     or syncs the whole filesystem once when they are many
//     (syncfs.go; never on FUSE, where syncfs makes nothing durable: each
//     file is fdatasynced there), then lets the log reuse the records' space, and deletes
//     them (a deletion the log keeps, so a replay skips them; checkpoints
//     delete in the order they synced, or a replay could apply an older
//     record of a block whose newer one is gone). While checkpoints fall
//     behind a slow data disk, the pacer holds what is not yet synced to
//     checkpointTarget of the disk's measured sync rate (pacer.go). Partial-block
//     writes read, verify and rewrite the whole block, so journal records
//     always hold whole blocks.
//   - Direct write (a Put of a large object, or a write of at least 128 KiB
//     into blocks that hold no committed data of a file with no pending
//     journal records): the data is written to the file and fdatasynced
//     (plus its directory entry, for a new file), then the batch that points
//     at it commits. A 4 MiB S3 object is written once, never through the
//     journal. Data at an aligned address (a frame buffer: the transaction
//     encoding aligns large data) is written from where it lies when the
//     transaction changes data in one op, and checksums that came with it
//     (Txn.PutSummed, UnmarshalTxnSummed: the rpc layer takes them as the
//     bytes arrive) are used instead of reading it from memory again;
//     together they spare the OSDs a copy and a checksum pass over every
//     large write. A Put over a large object writes a new file and removes the
//     old one after the commit. On a real filesystem the extent is
//     fallocated and written with O_DIRECT (directio.go): buffered writes
//     into fresh blocks, racing with other files' syncs, cost ext4 far more
//     CPU. Into an existing file the write carries RWF_DSYNC, so it
//     returns durable and the file needs no fdatasync: one blocking syscall
//     instead of two.
//   - Write-back (Options.WritebackBytes, writeback.go): while the area is
//     on, a deferred write's blocks go into W keys of its batch instead of
//     a journal record, and do not touch the data file: a W key overrides
//     the block's slot for every read until the destager (destage.go) has
//     written it there, synced the file, and deleted the key. Direct and
//     copy-on-write writes still bypass it, deleting the W keys of the
//     blocks they overwrite in their batch; deletes, Put-over and
//     truncates drop a file's W keys with a range deletion in theirs.
//   - Copy-on-write (an overwrite of at least 128 KiB of committed blocks,
//     all in one slot, of a file with no pending journal records: a VM's
//     large sequential writes): the data goes with O_DIRECT to the blocks'
//     other slot, which nothing live uses, durably (RWF_DSYNC), and the batch
//     flips the blocks' slot bits with their new checksums. After the commit
//     the old slot is punched out (fallocate PUNCH_HOLE), so the object
//     still takes its size on disk. The data is written once, never through
//     pebble, so large overwrites run faster than through the journal.
//
// Reads of at least 128 KiB that the page cache does not hold use O_DIRECT
// the first time a region is read, and the cache from the second time on
// (directio.go): data read once does not pass through the cache, whose
// copies were the largest CPU cost of a 4 MiB read, and data read again is
// cached. Reads of 2 MiB or more (whole objects) always go direct unless
// already cached: for them the cache's copy costs more than it saves.
// Client reads of 128 KiB to 4 MiB repeated in the same shape are answered
// from the store's own read cache instead (readcache.go, ReadShared):
// checked data and checksums, in memory outside the Go heap, sent as they
// lie. Small client reads that go to the data disk fill a read cache on
// the meta device if the store has one (flashcache.go,
// Options.FlashCacheBytes), which serves them from flash next time.
//
// The index's memtable is 1/64 of its disk, 4 to 64 MiB, and each of the
// three commit-log segments its size: a small disk keeps room for data.
// The index has a block cache (half of Options.CacheBytes, 256 MiB by
// default; the index cache below takes the other half), bloom filters (most writes look
// up a record that does not exist yet) and no block compression (object
// data rarely compresses). Deletes remove an object's xattr, omap and
// checksum keys one by one while there are few, because range tombstones
// slow every later read until compaction drops them. Files go through
// indexFS (indexfs.go): new sstables gather pebble's one-block writes into
// 256 KiB ones (a memtable flush under small writes was otherwise 16k
// syscalls). Commit-log segments are zero-filled and synced when created,
// so a commit's write changes the data alone, not also the inode of a
// growing file (with pebble's WAL, zero-filling its files already shortened
// every synced commit).
//
// Above pebble sits an index cache (indexcache.go) of object records,
// checksum chunks and xattrs (an erasure-coded shard's meta is one), the
// lookups every read and write makes; in a 64 MiB
// memtable each costs a chain of CPU cache misses. The records of objects
// up to 16 KiB hold their data, so it is also their read cache. An
// entry is filled only under its object's lock and updated from every
// committed batch before the locks are released, so it always equals the
// committed value; it is never a source of truth across a restart.
// Beside it, a Bloom filter of every object key (objfilter.go, 10 bits per
// key, built by Open's scan of the records and added to by every batch
// before it commits) answers the lookup of an object that does not exist
// yet, which every create makes, without pebble: under 4 KiB creates that
// lookup was a large part of an OSD's CPU, and the filter costs a small
// fraction of it.
//
// # Crash consistency
//
// The write of an Apply's batch to the commit log is its single commit
// point. Open replays the log into the index before anything else (see
// logreplay.go for why replaying batches the index already has is safe, and
// why a damaged log refuses to open instead of dropping commits).
//
//   - Before the commit nothing visible has changed: direct writes, and
//     deferred writes of fresh blocks, touch only blocks that are not live
//     in the committed state (fresh blocks, or the slot a copy-on-write
//     overwrite moves to), or new files that
//     nothing references yet. A crash leaves at most an orphan file, which
//     Open removes (a file without an 'F' key), or garbage in non-live blocks.
//
//   - The data files of objects a commit deleted or replaced are unlinked
//     after it, in the background (remover.go): nothing points at them any
//     more, and a crash before their unlink leaves orphans Open removes.
//
//   - After the commit the journal records hold every deferred block, so a
//     lost page-cache write is redone by Open, which replays all journal
//     records in sequence order, syncs the files and only then deletes the
//     records. Replay is idempotent (whole blocks, commit order) and skips
//     records of files that were dropped later. A journal record is only in
//     the commit log (or, for a batch too large for it, in the index), so
//     the log keeps the segment holding it until a checkpoint has synced
//     its file; its deletion, committed later, is in the log wherever the
//     record still is, so a replay never redoes a record a direct write has
//     since overtaken.
//
//   - Replay never overwrites newer data: for one file, journal records are
//     created in commit order under the object lock, and a direct write into
//     a file is only allowed once that file has no journal records left
//     whose deletion is not yet committed.
//
//   - Data files are created, written and synced, and their directory entry
//     synced, before any committed record refers to them.
//
//   - A journal record names the physical offset (slot) it rewrites; a
//     block changes slot only by a copy-on-write, which requires the file to
//     have no journal records left, so replay never writes a slot that has
//     become free (and perhaps reused) since.
//
//   - A punch that a crash loses leaves garbage in a slot no block lives in.
//
//   - A W key is durable with the checksum chunk that covers its block (one
//     batch); it is deleted only after its value was written to the
//     block's live slot and the file synced, and after every journal
//     record of the file older than it is deleted (journalBarrier: a
//     replay of one would overwrite the destaged block). A crash before the
//     deletion commits leaves the key, which still overrides the slot; the
//     destager writes it again. A deletion never removes a newer value:
//     it checks the generation each set of the key gets, under a guard
//     that writers changing W keys hold from their commit until the store
//     knows it. The destager reads what to write under the object's lock
//     (after checking that the key is still there) and a writer that would
//     write the file's blocks itself (direct, copy-on-write, journaled)
//     waits until the destager's writes to that file are done, so a write
//     that moved the block or journaled it is never undone.
//
// TestCrashConsistency checks this on crash clones of a vfs.MemFS taken
// during concurrent Applies, keeping 0%, 50% or 90% of unsynced writes;
// TestIOErrorsModel on crash clones taken after injected IO errors; and
// TestPowerCut on the real filesystem paths (O_DIRECT, RWF_DSYNC, punches,
// the commit log), through internal/powercut's FUSE filesystem that drops
// or tears what was not made durable at each cut.
//
// # Durability, write by write
//
// What makes each kind of write durable before Apply returns (and so
// before an OSD acknowledges it); durability_test.go records both IO
// seams and fails if a path drops a sync or stops being taken:
//
//	small put, xattr, omap, truncate, delete
//	    the commit-log write (O_DIRECT|O_DSYNC) of the batch, which holds
//	    the data of an inline object
//	small overwrite; write into fresh blocks while a journal record is
//	pending for the file (the deferred path)
//	    the commit-log write, whose journal record holds the blocks; the
//	    buffered write to the data file (before the commit for fresh
//	    blocks, after it for others) is made durable later by the
//	    checkpointer, before the log reuses the record
//	large put, large put over a large object (a new data file)
//	    O_DIRECT write, fdatasync of the file and of its directory, then
//	    the commit-log write
//	large overwrite (the blocks' other slot); large write into fresh
//	blocks of an existing file
//	    O_DIRECT pwritev2(RWF_DSYNC), then the commit-log write; the old
//	    slot is punched after the commit
//	small overwrite, or write into fresh blocks, with the write-back area on
//	    the commit-log write, whose batch holds the blocks in W keys; no
//	    data-file write before or after it. The destager later writes the
//	    blocks to their slots (buffered), fdatasyncs the files (or syncs
//	    the filesystem, past the area's low watermark), and only then
//	    commits the keys' deletion; TestWritebackCrashDuringDestage
//	    crashes between each of those steps
//
// Where O_DIRECT is off (tmpfs, some overlay filesystems) the log segment
// is written and fdatasynced, and data writes are buffered and
// fdatasynced before the commit.
//
// # Concurrency
//
// All methods are safe for concurrent use. There is no global lock on the IO
// path: objects hash to one of 1024 RW-locked shards. Apply write-locks the
// shards of all objects it touches (in index order, so transactions never
// deadlock) from building the batch until the deferred writes are in the
// page cache; reads take the read lock of one shard, so reads of different
// objects and Applies to different objects run in parallel and their
// commits share one log write. Collections and List are pebble scans without
// object locks and see a consistent snapshot of committed state.
//
// # Space
//
// A failed log write fails the store (it may be on disk and come back at
// the next Open), so Apply first checks free space
// on Dir and MetaDir (statfs cached for spaceCacheValidity and debited by admitted
// transactions) against ReserveBytes plus twice the transaction size and
// refuses with ErrNoSpace without changing anything. Deletion-only
// transactions skip the reserve so a full OSD can be drained. The fresh
// blocks of a deferred write (nothing committed in them) go to the page
// cache before the commit, where the filesystem reserves their space, so a
// full disk fails the Apply with ErrNoSpace there; after the commit only
// allocated blocks are rewritten, which cannot hit ENOSPC. (Reserving them
// with fallocate instead cost an OSD more CPU under random 4 KiB
// writes to a new volume.) A direct write that hits ENOSPC also fails the
// Apply with ErrNoSpace and leaves the store unchanged. Blocks in the
// write-back area take their space on the data disk only when destaged;
// a destage the data disk refuses for space leaves them in the area,
// durable, and is tried again later, while the area's back-pressure slows
// writers once it fills.
package objstore
