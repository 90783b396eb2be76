// Package baseline measures what the hardware under a cairn OSD allows, before
// any cluster is involved, so that every benchmark can print its efficiency
// against that bound (`cairn bench --baseline DIR`).
//
// It must not import anything of cairn: it measures the machine, not the code.
//
// # What it measures
//
// Disk, in a temporary file inside Options.Dir (removed afterwards). The file
// is preallocated and fully written and synced first, so that every
// measurement overwrites allocated, written blocks: appending to a growing
// file would add a metadata commit per sync, which a log-structured store
// with recycled segments does not pay.
//
//	sync_write_4k_qd1   pwrite 4 KiB at a random aligned offset + fdatasync, 1 at a time
//	sync_write_4k_qd3   the same from 3 goroutines sharing the one file: the commits of
//	                    a write's three copies when their OSDs share this disk
//	sync_write_4k_qd32  the same from 32 goroutines sharing the one file, each in its
//	                    own 1/32 of it; concurrent fdatasyncs may share a device flush
//	                    (as group commit does)
//	rand_read_4k_qd1    O_DIRECT 4 KiB random reads (page-aligned buffer), 1 at a time
//	rand_read_4k_qd32   the same from 32 goroutines
//	seq_write_1m        one sequential pass of buffered 1 MiB writes, then one fdatasync,
//	                    whose time is counted
//	seq_read_1m         O_DIRECT sequential 1 MiB reads (wrapping at the end of the file)
//
// Where O_DIRECT is refused (tmpfs on older kernels), reads fall back to
// buffered reads with FADV_RANDOM and posix_fadvise(DONTNEED) after each read,
// and the Note of each read measurement says so. A Dir on tmpfs or ramfs is
// measured anyway, and every disk Note says it is memory, not a disk.
//
// Network, against an echo server started inside the process, over the
// kernel's TCP loopback (127.0.0.1:0, the path between hosts) and over a Unix
// socket in the abstract namespace (the path between the daemons of one
// host: rpc's local sockets):
//
//	rtt_4k         a 4 KiB request and a 16 B reply, one at a time
//	stream         one TCP stream of 1 MiB writes; MB/s counted by the receiver,
//	               with its sender's and receiver's CPU per GiB
//	rtt_4k_local   rtt_4k over a local socket
//	stream_local   stream over a local socket
//
// CPU, in this process (hashes.go):
//
//	s3_put_hashes  MD5 and SHA-256 of 4 MiB bodies on one core: what every S3
//	               server spends per GiB of signed PUTs before it stores a byte
//
// Random offsets come from a PRNG with a fixed seed, so two runs issue the same
// IO. Every measurement runs for Options.Duration (or until the context ends)
// and records each operation's latency; beyond 2 million operations a uniform
// reservoir sample is kept for the percentiles, while Ops and AvgUs still count
// every operation. MB/s means 10^6 bytes per second.
//
// # The bounds
//
// A replicated write is two network round trips (client → primary, primary →
// replicas in parallel) plus one synced commit on every OSD, also in parallel:
//
//	replicated_write_us = 2 × rtt_4k.p50_us + sync_write_4k_qd1.p50_us
//	replicated_write_shared_disk_us = 2 × rtt_4k.p50_us + sync_write_4k_qd3.p50_us
//	read_us             = 1 × rtt_4k.p50_us + rand_read_4k_qd1.p50_us
//
// The second is the floor when every copy's OSD is on this one disk (a `cairn
// dev` cluster): their three commits overlap there, and on a disk that
// flushes its cache for each, take longer than one.
//
// The round trip over a local socket (rtt_4k_local; rtt_4k in files saved
// before it was measured) stands in for the network between hosts, so on a
// real cluster these are floors, never targets that can be beaten.
//
// The CPU floors, through processes that do only the write's work
// (replicated.go, erasure.go; `cairn baseline-copy`):
//
//	write_4m     4 MiB writes to SharedCopies copies: CPU s/GiB
//	write_4m_ec  4 MiB writes coded ECProfile (2+1) over as many positions
//
// A Result is saved and loaded as JSON (Save, Load) so that later runs of
// `cairn bench` can compare themselves with a saved baseline.
package baseline
