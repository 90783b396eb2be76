// Package rpc carries proto messages between clients and daemons, and between
// daemons, over persistent, authenticated, pipelined connections: TCP, or a
// daemon's local Unix socket when both ends share a host (local.go). It owns
// the sockets, the framing and the cluster-key handshake; it knows nothing of
// what a request means (the Handler does). It imports only proto from this
// project, and must never import daemon or storage packages.
//
// # Use it for / do not use it for
//
// Use it for the data path: many small and large requests in flight on one
// connection per peer, with the least CPU per request. Do not use it for the
// cluster map or leases (package meta talks to etcd), nor for bulk streams
// that need flow control per transfer: one frame holds at most
// proto.MaxFrameBytes.
//
// # Connection lifecycle
//
// Every connection begins with a handshake in which each side proves, with
// HMAC-SHA256 over both sides' fresh nonces, that it holds the cluster key;
// the key itself is never sent. A client without the key is refused with a
// message saying so; a client also refuses a server that cannot prove it
// holds the key. On its own the handshake authenticates the peers only:
// frames after it are checked by crc32c sums, not encrypted or MACed. With
// encryption on (DialOptions.Encrypt, ServerOptions.Encrypt; cairn.conf's
// encrypt) the connection is TLS 1.3 first and the handshake runs inside
// it, bound to the session (tls.go), so frames are encrypted and
// authenticated too.
//
// After the handshake both directions carry frames:
//
//	0       4      5          8                16            20          24
//	+-------+------+----------+----------------+-------------+-----------+--------+
//	| magic | kind | reserved | request id     | body length | body sum  | body   |
//	| CRNF  | 1|2  | 0 0 0    | u64            | u32         | u32       | ...    |
//	+-------+------+----------+----------------+-------------+-----------+--------+
//
// all big-endian; kind 1 is a request (body: proto.Request), 2 a response
// (body: proto.Response) carrying its request's id. The body sum is the
// crc32c of the crc32c of each 4 KiB block of the body (big-endian, the
// last block may be short). The reader takes the block checksums as the
// bytes arrive and hands those of a large request's payload to the handler
// (Request.DataSums, TxnSums): proto puts large payloads at block
// boundaries, so the object store uses them as its own block checksums and
// never reads the payload again to checksum it. A frame with a wrong magic,
// kind or reserved byte, a length over proto.MaxFrameBytes or a sum
// mismatch means the stream can no longer be trusted: that one connection is
// closed and the reason logged. An intact frame whose body does not decode
// is answered with StatusInvalid and the connection kept.
//
// # Concurrency contract
//
// A Conn is safe for concurrent use; its Calls share one socket. Each Conn and
// each server connection has exactly one reader and one writer goroutine.
// Callers encode their own frames into pooled buffers, so encoding runs in
// parallel; the writer copies whatever frames have queued into one buffer and
// flushes once the queue is empty, so a burst costs one write syscall. A
// caller whose call is the only one in flight on its connection writes its
// own frame of up to 64 KiB when the writer has nothing to do, and a handler
// answering the only request in flight its own reply, without blocking
// (inline.go): a hand-over to the writer would wake an idle thread, which
// cost more than the network at one request in flight.
// StartShared sends a request without waiting for its answer, so a primary
// sends to every replica from one goroutine before it writes its own copy.
// The locks on the client's IO path guard the table of pending calls and the
// socket. A server runs the requests of a connection concurrently,
// at most ServerOptions.MaxInFlightPerConn at once, on goroutines that it
// starts as concurrency demands and keeps until the connection ends (a fresh
// goroutine per request would regrow its stack every time); when all are
// busy the reader stops reading and TCP pushes back on the client.
//
// When a connection breaks, every pending Call returns an error matching
// ErrClosed at once and Conn.Err reports it; a Conn never reconnects by
// itself (the caller redials, perhaps to a different OSD after a map change,
// or lets a Pool do it per address).
// A cancelled Call returns its ctx's error and its late response is dropped.
// Handler panics are not recovered: they are bugs in the daemon and crash it.
package rpc
