package osd

import (
	"encoding/binary"
	"errors"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Guarded omap transactions (proto.OpOmapTxn): the guards are checked on
// the primary under the object's lock, which every write to the object
// holds from its checks to its last replica's answer, so no other write
// changes the omap between the check and the change; the change is then
// an ordinary write (one transaction, the object's next version,
// replicated, retried by the client after an unknown outcome).
//
// A guarded transaction is not idempotent: resent after it applied, its
// guards would fail on its own change. So the transaction carries a token,
// and the object keeps the tokens of its newest txnTokensKept guarded
// transactions in reserved xattrs, written by each transaction itself (so
// every copy holds exactly the tokens of the changes it holds): a counter
// of the object's transactions, and the token of transaction n in slot
// n mod txnTokensKept. A transaction costs two small xattr writes and one
// read for this. Only a resend (proto.FlagRetry: an earlier attempt's
// outcome is unknown) looks for its token; one found is answered OK and
// not applied again.

// txnCountXattr counts the object's guarded transactions (8 bytes LE);
// txnSlotXattr+slot (2 bytes BE) holds a transaction's token (8 bytes LE).
const (
	txnCountXattr = proto.ReservedPrefix + "tn"
	txnSlotXattr  = proto.ReservedPrefix + "t/"
)

// txnTokensKept bounds the tokens an object keeps: a resend is recognised
// as long as fewer than this many other guarded transactions applied to
// the object in between. A client resends within about a second of the PG
// serving again (its backoff is at most 1 s), and one object takes a few
// hundred transactions a second at most (each is a replicated write under
// the object's lock), so this leaves a wide margin.
const txnTokensKept = 1024

// addOmapTxn checks req's guards and, if they hold, adds its changes to
// txn. The caller holds the object's lock. A failed guard answers
// StatusPrecondition (Data the key, KVs its value if present). A
// transaction that already applied, or whose guards hold but which changes
// nothing, adds nothing to txn (see noChange).
func (s *Server) addOmapTxn(coll string, req *proto.Request, txn *objstore.Txn) *proto.Response {
	exists := true
	if _, err := s.store.Stat(coll, req.Object); errors.Is(err, objstore.ErrNotFound) {
		exists = false
	} else if err != nil {
		return s.failErr(err)
	}
	ot, count, bad := s.checkOmapTxn(coll, req, exists)
	if bad == nil && ot != nil {
		addOmapChanges(coll, req.Object, ot, count, !exists, txn)
	}
	return bad
}

// checkOmapTxn decodes req's transaction and checks it against the object
// as coll holds it (exists: whether the object does): its guards, and for
// a resend whether it applied already. It returns the transaction and the
// object's transaction count, or a nil transaction when there is nothing
// to write, or the answer refusing it.
func (s *Server) checkOmapTxn(coll string, req *proto.Request, exists bool) (*proto.OmapTxn, uint64, *proto.Response) {
	ot, err := proto.DecodeOmapTxn(req.Data)
	if err != nil {
		return nil, 0, s.fail(proto.StatusInvalid, "%v", err)
	}
	var count uint64
	if exists {
		v, err := s.store.GetXattr(coll, req.Object, txnCountXattr)
		switch {
		case err == nil && len(v) == 8:
			count = binary.LittleEndian.Uint64(v)
		case err == nil:
			return nil, 0, s.fail(proto.StatusIOError, "object %q: transaction count of %d bytes", req.Object, len(v))
		case !errors.Is(err, objstore.ErrNotFound):
			return nil, 0, s.failErr(err)
		}
	}
	if exists && ot.Token != 0 && req.Flags&proto.FlagRetry != 0 && count > 0 {
		applied, err := s.hasToken(coll, req.Object, ot.Token)
		if err != nil {
			return nil, 0, s.failErr(err)
		}
		if applied {
			return nil, 0, nil // applied already: answered OK, changes nothing
		}
	}
	if !exists && !ot.Create {
		return nil, 0, s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	if bad := s.checkGuards(coll, req.Object, ot.Guards, exists); bad != nil {
		return nil, 0, bad
	}
	if !ot.Mutates() && exists {
		return nil, 0, nil // guards only: nothing to write
	}
	return ot, count, nil
}

// checkGuards answers StatusPrecondition for the first guard that fails
// on name in coll.
func (s *Server) checkGuards(coll, name string, guards []proto.OmapGuard, exists bool) *proto.Response {
	for _, g := range guards {
		var v []byte
		found := false
		if exists {
			var err error
			v, err = s.store.OmapGet(coll, name, g.Key)
			switch {
			case err == nil:
				found = true
			case !errors.Is(err, objstore.ErrNotFound):
				return s.failErr(err)
			}
		}
		if g.Absent && !found || !g.Absent && found && string(v) == string(g.Value) {
			continue
		}
		r := s.fail(proto.StatusPrecondition, "omap key %q of %q: guard failed", g.Key, name)
		r.Data = g.Key
		if found {
			r.KVs = []proto.KV{{Key: g.Key, Value: v}}
		}
		return r
	}
	return nil
}

// addOmapChanges adds to txn the changes of ot to name in coll (creating
// it first if create), with its token as the object's transaction count+1.
func addOmapChanges(coll, name string, ot *proto.OmapTxn, count uint64, create bool, txn *objstore.Txn) {
	if create {
		txn.Create(coll, name)
	}
	if ot.HasRange {
		txn.OmapRmRange(coll, name, ot.RmFrom, ot.RmTo)
	}
	for _, k := range ot.Rm {
		txn.OmapRm(coll, name, k)
	}
	for _, kv := range ot.Set {
		txn.OmapSet(coll, name, kv.Key, kv.Value)
	}
	if ot.Token != 0 {
		txn.SetXattr(coll, name, tokenSlot(count), binary.LittleEndian.AppendUint64(nil, ot.Token))
		txn.SetXattr(coll, name, txnCountXattr, binary.LittleEndian.AppendUint64(nil, count+1))
	}
}

// noChange reports whether the write req, whose own changes txn holds,
// has nothing to write: a guarded transaction that applied already, or
// that only checks. It is answered once the PG has min_size copies, not
// replicated.
func noChange(req *proto.Request, txn *objstore.Txn) bool {
	return req.Op == proto.OpOmapTxn && txn.Len() == 0
}

// omapTxnFreesSpace reports whether req is a guarded omap transaction
// that removes keys and sets no more keys than it removes, each set value
// small: like a delete, it is allowed on a full OSD. An S3 DELETE is one:
// it removes the object's entry and records the entry's data for the
// collector, which then frees the data; refusing it would leave a full
// cluster with no way to free space through S3.
func omapTxnFreesSpace(req *proto.Request) bool {
	if req.Op != proto.OpOmapTxn {
		return false
	}
	ot, err := proto.DecodeOmapTxn(req.Data)
	if err != nil || ot.Create || len(ot.Rm) == 0 && !ot.HasRange {
		return false
	}
	removes := len(ot.Rm)
	if ot.HasRange {
		removes++
	}
	for _, kv := range ot.Set {
		if len(kv.Key)+len(kv.Value) > fullSetBytes {
			return false
		}
	}
	return len(ot.Set) <= removes
}

// fullSetBytes bounds a key and value a space-freeing transaction may set
// on a full OSD (an S3 GC record names one object's parts).
const fullSetBytes = 4 << 10

// tokenSlot names the xattr that keeps the token of the object's
// transaction number count.
func tokenSlot(count uint64) string {
	return txnSlotXattr + string(binary.BigEndian.AppendUint16(nil, uint16(count%txnTokensKept)))
}

// hasToken reports whether the object keeps token tok.
func (s *Server) hasToken(coll, name string, tok uint64) (bool, error) {
	xs, err := s.store.Xattrs(coll, name)
	if err != nil {
		return false, err
	}
	return tokenIn(xs, tok), nil
}

// tokenIn reports whether the xattrs xs hold token tok in a slot.
func tokenIn(xs map[string][]byte, tok uint64) bool {
	for k, v := range xs {
		if len(k) == len(txnSlotXattr)+2 && k[:len(txnSlotXattr)] == txnSlotXattr &&
			len(v) == 8 && binary.LittleEndian.Uint64(v) == tok {
			return true
		}
	}
	return false
}
