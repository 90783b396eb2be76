package pg

import "github.com/cairn-storage/cairn/internal/clustermap"

// Record is what the cluster must remember about a placement group between
// primaries: the acting set it last went active with, and which OSDs hold
// every acknowledged write. A new primary may only go active after it heard
// from one of Complete, so no acknowledged write can be lost by electing a
// stale primary. It is stored as JSON in etcd (package meta), written by
// the primary with a compare-and-swap before the PG goes active.
type Record struct {
	Epoch    clustermap.Epoch   `json:"epoch"` // map epoch of the interval that wrote it
	Acting   []clustermap.OSDID `json:"acting"`
	Complete []clustermap.OSDID `json:"complete"`
	// Positions, for an erasure-coded PG: the OSD of each position of
	// Acting (-1 in a hole). An OSD of Complete holds every acknowledged
	// write only at the position it has here (DecideShardsPG).
	Positions []clustermap.OSDID `json:"positions,omitempty"`
	// Sources, for an erasure-coded PG: for each position whose OSD is
	// not complete, an OSD that held that position complete before
	// placement moved it (-1: none), whose shards recovery may copy as
	// they are instead of rebuilding them from K (BackfillSources).
	Sources []clustermap.OSDID `json:"sources,omitempty"`
}
