// Package health owns the cluster's health model: what `cairn status`
// concludes from the cluster map, the stats the OSDs publish and the
// recorded health events. Compute turns them into a Status (HEALTH_OK,
// HEALTH_WARN or HEALTH_ERR) with its checks in plain words (OSD_DOWN,
// PG_DEGRADED, RECOVERY_STALLED, OSD_FULL, OBJECT_CORRUPT, ...), the PG
// counts, the usage totals (each shared filesystem once) and the
// background work with its rate and ETA.
//
// It is pure: no IO, no goroutine, no clock (the caller passes now), so
// every check is tested from a constructed map without a cluster. The
// Status JSON is `cairn status --json`'s output: change it only
// compatibly.
//
// Use it for: deciding what is healthy and what an operator is told.
// Not for: reading the inputs from etcd (meta) or printing them (cli).
//
// It must not import anything of cairn but clustermap, placement and
// report.
package health
