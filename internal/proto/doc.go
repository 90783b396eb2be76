// Package proto defines the messages that clients and OSDs exchange and their
// binary encoding. It owns no sockets (package rpc does) and imports only
// clustermap for its ID types. Every decoder here takes bytes from the network
// and is fuzzed.
//
// # Use it for / do not use it for
//
// Use it for the bytes of one Request or Response. Do not use it for framing,
// authentication or connection state (package rpc), nor for on-disk formats:
// a message may change with the protocol Version, a disk format may not.
//
// # Concurrency
//
// The functions are pure. A decoded message aliases its input buffer (see
// DecodeRequest), so the buffer belongs to the message from then on: whoever
// holds the message may keep its slices, and nobody may reuse the buffer.
//
// # FORMAT
//
// Integers are unsigned LEB128 varints (encoding/binary Uvarint) and must be
// minimally encoded, so each message has exactly one encoding. Byte strings
// are a uvarint length followed by that many bytes; a list is a uvarint count
// followed by its elements. The message fills its buffer exactly: trailing
// bytes are an error. Fields appear in this fixed order whatever the op.
//
// Request:
//
//	+---------+----+-------+-------+------+--------+----------+--------+--------+-------+
//	| version | op | flags | epoch | pool | pgseed | object   | offset | length | limit |
//	| u8 = 1  | u8 | uvar  | uvar  | uvar | uvar   | len+byte | uvar   | uvar   | uvar  |
//	+---------+----+-------+-------+------+--------+----------+--------+--------+-------+
//	+----------+----------+----------+----------+---------------+-----------------------+
//	| key      | start    | end      | data     | keys          | kvs                   |
//	| len+byte | len+byte | len+byte | len+byte | n, n×len+byte | n, n×(len+key len+val)|
//	+----------+----------+----------+----------+---------------+-----------------------+
//	+-----------+----------+
//	| pgversion | txn      |
//	| uvar      | len+byte |
//	+-----------+----------+
//
// Response:
//
//	+---------+--------+-------+----------+------+---------+----------+------------+
//	| version | status | epoch | message  | size | version | data     | kvs        |
//	| u8 = 1  | u8     | uvar  | len+byte | uvar | uvar    | len+byte | as request |
//	+---------+--------+-------+----------+------+---------+----------+------------+
//	+-----------------+----------------+
//	| names           | more           |
//	| n, n×len+byte   | u8 (0 or 1)    |
//	+-----------------+----------------+
//
// Two ops carry payloads of their own, each with its own version byte
// (see omaptxn.go for the byte layouts). OpOmapTxn's Data is an OmapTxn:
// flags (create, range), an 8-byte token, guards (key absent, or key with
// value), keys to set with their values (strictly increasing), keys to
// remove (strictly increasing) and a range [from, to). At most
// MaxOmapTxnGuards guards and MaxKeys keys set and removed together; keys
// of MaxKeyLen and values of MaxOmapValueLen at most, objstore's limits.
// OpOmapListDelim's request puts the marker in Start and the prefix and
// delimiter in Keys; its reply's Data is the list of common prefixes
// (AppendListPrefixes), at most MaxListDelim with the entries in KVs.
//
// flags, pool, pgseed and limit must fit in 32 bits; op and status must be
// known values. Limits (MaxObjectNameLen, MaxKeyLen, MaxKeys, MaxDataLen,
// MaxMessageLen, MaxFrameBytes) are checked before anything is allocated, and
// a length or count larger than the bytes remaining is an error. Changing
// the layout means bumping Version; the golden-bytes tests fail if it changes
// by accident.
package proto
