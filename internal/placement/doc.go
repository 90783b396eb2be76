// Package placement decides which OSDs hold each placement group. Clients
// and OSDs run it on their own copy of the cluster map and must agree
// bit for bit, so it is pure and deterministic: no IO, no clocks, no
// randomness, no Go map iteration in results, and it imports only
// clustermap and a hash. Keep it that way.
//
// # Object to PG
//
// PGOf hashes the object name with XXH3-64 (seed 0) and folds the hash into
// [0, pg_num) with a stable mod: the low bits under the next power of two,
// folded onto the lower half when they land beyond pg_num. Growing pg_num
// by one then moves only the objects of one parent PG into the new PG.
//
// # PG to OSDs
//
// The map is a tree root → rack → host → osd. For a pool, the draw only
// looks at OSDs that are In, have Weight > 0 and match the pool's device
// class, grouped by the pool's failure domain level (osd, host or rack); a
// domain weighs the sum of its eligible OSDs. Then:
//
//  1. every domain draws a straw2 score with input (pg, domain), and the
//     size best scores, best first, are the PG's domains;
//  2. in each, the OSD is the straw2 winner among that domain's OSDs, drawn
//     with input (pg, osd), so a domain keeps its OSD whatever its slot.
//
// Taking the best scores of one race has the same distribution as drawing
// one straw2 winner per replica and redrawing on a collision, but needs
// one pass, never runs out of tries and never returns a duplicate: the
// result always has min(size, domains) OSDs in distinct domains. It also
// moves less: per-replica draws let a domain that changes slot push a third
// domain out of the PG, a single race does not. A pool of size k is a
// prefix of the same pool at size k+1, so raising size only adds copies.
//
// At level osd, OSDs of one host whose index lives on the same flash
// device (OSD.Flash) are one domain: losing that device loses all of them,
// so a PG never holds two of them. A device named by a single OSD keeps
// that OSD's own key and moves nothing.
//
// The domain draw goes straight to the failure domain level instead of
// walking every tree level: an extra rack → host step would only move more
// data when a weight changes, without making placement any safer.
//
// Choosing distinct domains has one known skew: a domain
// holding more than about 1/size of the weight cannot get its share, as a
// PG holds it at most once, and heavier domains get somewhat less than
// their share (two hosts of twice the weight among eight, size 3: about 9%
// less). Keep failure domains of similar weight.
//
// Up/Down is ignored by Place, so an OSD restarting does not move data.
// Acting is Place without the down OSDs; its first OSD is the primary.
//
// # Why straw2
//
// Each item draws u = hash(pg, item, selector) in (0, 1] and scores
// ln(u) / weight; the highest score wins. ln(u)/w is the negated
// exponential variable of rate w, so the winner is chosen with probability
// weight / total. Each item's score depends only on its own hash and weight,
// so changing one item's weight (or removing it) only moves PGs to or from
// that item: the others keep comparing the same scores. Hash-ring and
// list/tree schemes do not have this property and move more data.
//
// # Frozen formats
//
// Changing any of the following moves data in every running cluster:
//
//   - object name → PG: XXH3-64(name), stable mod pg_num (see PGOf);
//   - PG key: SplitMix64 finalizer of ((pool<<32 | seed) + 0x9e3779b97f4a7c15);
//   - draw hash: mix(mix(pgkey ^ item) + (sel+1)·0x9e3779b97f4a7c15), where
//     item is the OSD id, or XXH3-64(name, seed 1) for a host, seed 2
//     for a rack and seed 3 for a flash device shared by OSDs, and sel is 1<<32 for the domain draw and 2<<32 for the
//     OSD draw inside a domain;
//   - u = (hash>>11 + 1) / 2^53, and ln(u) computed by lnUnit with explicit
//     IEEE-754 rounding, bit-identical on all platforms (math.Log is not:
//     it is assembly on amd64 and may be FMA-fused on arm64);
//   - domains sorted by name (OSD level: by id, OSDs alone first), OSDs in
//     a domain by id,
//     domain weight summed in that order, ties won by the earlier item.
//
// The golden tests pin these formats; if one fails, the change moves data.
//
// # Shards
//
// Erasure-coded PGs are placed by position (Shards, shards.go): a position
// that loses its OSD leaves a hole or draws again without moving the
// others, and an OSD marked out still weighs in every draw so that no
// other position's race changes. The OSDs of erasure-coded pools keep
// each position's shards apart (internal/osd, ecshard.go).
//
// # Table
//
// Place rebuilds the eligible view of the map on every call. Table caches
// the view per (class, level) and the result per PG, filled lazily, so the
// IO path costs a hash of the name and a few loads.
package placement
