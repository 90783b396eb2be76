// Package nbdgw is the NBD gateway: it serves cairn volumes through the
// NBD protocol server. It adapts the volumes of every pool to nbd.Exports
// (export POOL/NAME, a snapshot read-only as POOL/NAME@SNAP; a volume is an
// nbd.Device whose size follows resizes, whose FLUSH has nothing to do and
// whose full cluster answers ENOSPC) and builds the server's TLS
// configuration from PEM files. `cairn nbd` wires it to a listener.
//
// It imports nbd and volume (and client) and is the only place that joins
// them: nbd imports nothing of cairn and volume nothing of nbd. It must not
// import daemon internals (osd, mon, objstore) or cli.
//
// Use it for: serving volumes over NBD.
// Not for: the NBD protocol itself (nbd) or how a volume maps onto objects
// (volume).
package nbdgw
