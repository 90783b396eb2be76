// Package keeper owns the policy that keeps each OSD's up, down and out
// flags in the cluster map true to its liveness: an OSD whose lease is gone
// is marked down, one whose lease is back is marked up, one down longer
// than the map's down-out interval is marked out (so placement moves its
// data elsewhere), and one marked out that way is marked in again when it
// returns. An operator's `cairn osd out` is never undone here.
//
// Decide is the whole policy and is pure: it takes the map, the OSDs that
// hold a live lease and the time, and returns the changed map and a log
// line per change. It does no IO, starts no goroutine and reads no clock.
// The driver that runs it (the keeper election, the watch of the leases and
// the compare-and-swap of the map) is meta.Store.RunKeeper, since only meta
// talks to etcd.
//
// Use it for: deciding what the elected keeper changes in the map.
// Not for: an OSD marking itself up when it starts (osd does that itself),
// or an operator's out/in/rm (the CLI changes the map directly).
//
// It must not import anything of cairn but clustermap.
package keeper
