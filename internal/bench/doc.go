// Package bench owns the numbers and pictures of `cairn bench`: a latency
// histogram with bounded relative error, the per-second samples and the
// end-of-run Summary (text and JSON), the per-second progress line, and an
// SVG chart of a run.
//
// It deliberately does no IO of its own besides the io.Writers passed in and
// imports no cairn package, so the statistics can be tested exactly without
// a cluster and reused by any driver (the CLI, e2e benchmarks). Running the
// workload, timing operations and measuring cluster CPU belong to the caller.
package bench
