// Package pg is the placement group's logic, kept pure: what the cluster
// must remember about a PG (Record), how its writes are ordered (EVersion),
// how one copy of an object is summarised (ObjState), how peering picks the
// authoritative copy and what each member lacks (Decide), how the primary
// keeps that bookkeeping while recovery and client writes bring members up
// to date (Primary), how scrub picks the copy to repair from (Choose), and
// the two rules that keep a primary with an old map from acknowledging
// what a newer one cannot see (Admit, Replaces; epoch.go), and, for the
// erasure-coded pools, which positions of a PG vote and which version of
// an object its shards keep, roll back to or rebuild (ShardsPeerable,
// DecideShards, DecideShardsPG; shards.go and shardpeer.go, with their
// own simulation), the positions a partial write leaves as they are
// (shardheld.go), and when a read of some or all positions may serve
// without peering (shardread.go).
//
// It does no IO, starts no goroutine, reads no clock and draws no random
// number: it imports only clustermap and the standard library's pure
// packages (imports_test.go says which). The OSD (internal/osd) is its
// driver: it lists copies, writes records to etcd, copies objects and
// serialises calls on one PG's state; this package decides. So the seeded
// simulation in sim_test.go drives exactly the code the OSD runs: a pool of
// several PGs on 5 to 9 OSDs whose maps arrive in different orders, through
// crashes, restarts, lapsed leases, outs, writes whose messages reach some
// members, arrive late or are refused, peering interleaved with all of
// that, recovery and scrub of rotten copies (`go test ./internal/pg -seed N`
// replays one run and prints its history). The scenario scripts in
// testdata/ tell the stories a reviewer wants to read.
//
// Its shape is a set of decisions (Decide, Choose, Admit, Replaces,
// AfterRecovery) over values the caller keeps (Record, Primary), not one
// event loop: an OSD runs client writes, recovery copies and scrub of one
// PG at once, each under its object's lock, and only the bookkeeping they
// share is serialised (by the caller's lock on Primary). A single step
// function would serialise the IO too.
//
// # Use it for / do not use it for
//
// Use it for every decision about which copy of a PG is right and what must
// be copied where. Do not use it for moving bytes (osd), for the map
// (clustermap) or for where a PG lives (placement).
//
// # Formats
//
// EVersion (16 bytes, big-endian: epoch, version) is stored on every object
// in a reserved xattr; ObjState (42 bytes, see objstate.go) crosses the
// network in peering and scrub listings; Record is JSON in etcd. All three
// decoders are fuzzed.
package pg
