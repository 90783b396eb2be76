// Package devcluster owns `cairn dev`: a complete cluster on one machine
// as child processes of the cairn binary (a mon, hosts × OSDs on
// 127.0.0.1, .2, …, and an NBD server), and their supervision. Start
// brings the cluster up (its config, the map's down-out interval, the
// "default" pool) and returns once every OSD is up; the supervisor then
// starts a process that exits again after a backoff that doubles up to
// 30 s (never an OSD removed from the map), restarts one on request over
// the unix socket DIR/dev.sock (RequestRestart), and keeps DIR/dev.json
// (Info, Process: its schema, which the e2e tests read) equal to the
// running pids.
//
// It drives the daemons as processes only: it must not import osd, mon,
// objstore or cli. It talks to the cluster through meta (the map) and
// client (the pool).
//
// Use it for: a local cluster to try cairn, develop and test against.
// Not for: running a production cluster (run cairn mon and cairn osd under
// the host's service manager), or the dev command's flags and output
// (cli).
package devcluster
