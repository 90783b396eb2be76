// Package dashboard is the cluster's web dashboard, served by cairn mon so
// that one exists wherever a cluster does: health in plain words with what
// to do, capacity and when it runs out at the current rate, client IOPS
// and throughput over the last hour, the OSD tree with usage, PG states,
// recovery and scrub progress, pools, volumes and buckets.
//
// The pages are rendered on the server (html/template, charts as inline
// SVG) and refresh themselves: no script, no external asset, so it works
// on a machine without internet and in any browser. /api/status serves the
// same view as JSON.
//
// Where the figures come from: the map, the stats every OSD publishes
// under its lease (usage, PG states, work, client request counters) and
// the health events, all read from etcd on each request; the history
// (rates, usage) is sampled by the serving mon and kept in memory, so a
// restarted mon starts a new hour; volumes and buckets are listed from the
// pools by a catalog the caller supplies, refreshed in the background.
//
// Use it for: what an operator looks at. Not for: judging health (package
// health), metrics for Prometheus (each daemon's --metrics-listen), or
// changing anything: it is read-only.
package dashboard
