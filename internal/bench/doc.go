// Package bench owns `cairn bench`, the rados bench of cairn: the workload
// driver (Workload: write, seq and rand runs against a pool with -t
// operations in flight, the per-second samples, the CPU the OSDs spent,
// the cleanup of a run's objects), and the numbers and pictures of a run:
// a latency histogram with bounded relative error, the end-of-run Summary
// (text and JSON) with its efficiency against the hardware baseline, the
// per-second progress line, and an SVG chart.
//
// The statistics (histogram, summary, progress line, chart) do no IO of
// their own besides the io.Writers passed in, so they are tested exactly
// without a cluster and reused by any driver (the CLI, e2e benchmarks).
// The workload reaches the cluster through the public client only: bench
// must not import daemon internals (osd, mon, objstore, meta directly) or
// cli. The CLI keeps the flags, the process's runtime policy (passed in as
// Begin and End) and what is printed around a run.
//
// Use it for: measuring a cluster, and the statistics of any run.
// Not for: measuring the raw hardware (baseline).
package bench
