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
// transactions in a reserved xattr, written by each transaction itself (so
// every copy holds exactly the tokens of the changes it holds). A
// transaction whose token is there is answered OK and not applied again.

// txnXattr holds the object's newest transaction tokens, 8 bytes each,
// oldest first.
const txnXattr = proto.ReservedPrefix + "t"

// txnTokensKept bounds the tokens an object keeps: a client's resend is
// recognised as long as fewer than this many other guarded transactions
// applied to the object in between (a resend follows within seconds).
const txnTokensKept = 128

// addOmapTxn checks req's guards and, if they hold, adds its changes to
// txn. The caller holds the object's lock. A failed guard answers
// StatusPrecondition (Data the key, KVs its value if present). A
// transaction that already applied, or whose guards hold but which changes
// nothing, adds nothing to txn (see noChange).
func (s *Server) addOmapTxn(coll string, req *proto.Request, txn *objstore.Txn) *proto.Response {
	ot, err := proto.DecodeOmapTxn(req.Data)
	if err != nil {
		return s.fail(proto.StatusInvalid, "%v", err)
	}
	exists := true
	tokens, err := s.store.GetXattr(coll, req.Object, txnXattr)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		if _, err := s.store.Stat(coll, req.Object); errors.Is(err, objstore.ErrNotFound) {
			exists = false
		} else if err != nil {
			return s.failErr(err)
		}
	case err != nil:
		return s.failErr(err)
	}
	if ot.Token != 0 && hasToken(tokens, ot.Token) {
		return nil // applied already: answered OK, changes nothing
	}
	if !exists && !ot.Create {
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	for _, g := range ot.Guards {
		var v []byte
		found := false
		if exists {
			v, err = s.store.OmapGet(coll, req.Object, g.Key)
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
		r := s.fail(proto.StatusPrecondition, "omap key %q of %q: guard failed", g.Key, req.Object)
		r.Data = g.Key
		if found {
			r.KVs = []proto.KV{{Key: g.Key, Value: v}}
		}
		return r
	}
	if !ot.Mutates() && exists {
		return nil // guards only: nothing to write
	}
	if !exists {
		txn.Create(coll, req.Object)
	}
	if ot.HasRange {
		txn.OmapRmRange(coll, req.Object, ot.RmFrom, ot.RmTo)
	}
	for _, k := range ot.Rm {
		txn.OmapRm(coll, req.Object, k)
	}
	for _, kv := range ot.Set {
		txn.OmapSet(coll, req.Object, kv.Key, kv.Value)
	}
	if ot.Token != 0 {
		txn.SetXattr(coll, req.Object, txnXattr, appendToken(tokens, ot.Token))
	}
	return nil
}

// noChange reports whether the write req, whose own changes txn holds,
// has nothing to write: a guarded transaction that applied already, or
// that only checks. It is answered once the PG has min_size copies, not
// replicated.
func noChange(req *proto.Request, txn *objstore.Txn) bool {
	return req.Op == proto.OpOmapTxn && txn.Len() == 0
}

// omapTxnFreesSpace reports whether req is a guarded omap transaction
// that only removes keys: like a delete, it is allowed on a full OSD (an
// S3 delete must be able to take an object out of its bucket's index).
func omapTxnFreesSpace(req *proto.Request) bool {
	if req.Op != proto.OpOmapTxn {
		return false
	}
	ot, err := proto.DecodeOmapTxn(req.Data)
	return err == nil && len(ot.Set) == 0 && !ot.Create
}

func hasToken(tokens []byte, tok uint64) bool {
	for i := 0; i+8 <= len(tokens); i += 8 {
		if binary.LittleEndian.Uint64(tokens[i:]) == tok {
			return true
		}
	}
	return false
}

// appendToken returns tokens with tok added last, dropping the oldest
// beyond txnTokensKept. tokens is not modified.
func appendToken(tokens []byte, tok uint64) []byte {
	tokens = tokens[:len(tokens)/8*8]
	if drop := len(tokens)/8 + 1 - txnTokensKept; drop > 0 {
		tokens = tokens[drop*8:]
	}
	out := make([]byte, 0, len(tokens)+8)
	out = append(out, tokens...)
	return binary.LittleEndian.AppendUint64(out, tok)
}
