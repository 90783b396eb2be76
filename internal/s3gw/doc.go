// Package s3gw is cairn's S3 gateway: the S3 API (path and virtual-host
// style) over a Store, which is a cairn pool in production (client.Pool
// through a thin adapter in cli) and MemStore in tests. It is stateless
// but for a two-second cache of bucket records, so several gateways may
// serve one pool.
//
// # Use it for / do not use it for
//
// Use it for serving S3: `cairn s3` wraps a Gateway in an http.Server and
// runs its collector (Run). Do not use it for SigV4 itself (s3/sigv4),
// checksum arithmetic (s3/checksum), users and keys (meta; the gateway only
// calls a Lookup), or the HTTP server's limits on header size and
// timeouts (its caller sets them).
//
// # Layout in the pool (ARCHITECTURE.md, "S3 gateway", has the walk-through)
//
// s3.buckets is the bucket registry (an omap: name → record). Each bucket
// has index shards s3i.<id>.<n> whose omap maps object keys to Entry
// records, next to bookkeeping keys under 0x00 (open mark, GC records,
// write intents, multipart uploads and parts) so that every change to an
// object and its bookkeeping is one guarded omap transaction on one
// shard. Data lives in 4 MiB stripes s3d.<id>.<data id>.<n>, written
// before the commit that names them and never changed after it.
//
// # Concurrency
//
// A Gateway is safe for concurrent use. Every write reads the key's
// entry, decides, and commits with a guard that the entry is unchanged
// (update in commit.go), so conditional requests are atomic and an
// overwrite is visible at once and whole. The collector (gc.go) may run
// in every gateway at once: all its steps are idempotent.
//
// # Imports
//
// It imports s3/sigv4 and s3/checksum and nothing else of cairn: not
// client (its Store interface is the seam, so its tests build without
// etcd), nor meta, nor daemon internals.
package s3gw
