// Package report owns what the daemons tell the cluster about themselves,
// as plain values with their JSON form: an OSD's usage, PG states and
// background work (OSDStats, WorkProgress; published under its lease) and
// health events worth an operator's attention (Event: checksum errors,
// repairs, index damage).
//
// meta stores these values in etcd (and names them OSDStats, WorkProgress
// and Report too); health judges them. The JSON field names are stored
// and read by every version of cairn: change them only compatibly.
//
// Use it for: the shape of what an OSD publishes and of a health event.
// Not for: storing or watching them (meta), or what they mean for the
// cluster's health (health).
//
// It must not import anything of cairn but clustermap.
package report
