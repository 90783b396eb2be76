package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/cairn-storage/cairn/internal/proto"
)

// ErrPrecondition is matched (errors.Is) by the error of an OmapApply
// whose guard did not hold; errors.As finds its *PreconditionError.
var ErrPrecondition = errors.New("precondition failed")

// OmapCond is one guard of an OmapTxn: Key must be absent (Absent) or hold
// exactly Value (a nil or empty Value: the key is present with an empty
// value).
type OmapCond struct {
	Key    string
	Value  []byte
	Absent bool
}

// OmapTxn is applied atomically: if every guard in If holds, RmFrom..RmTo,
// Rm and Set apply together, in that order (a key both removed and set
// ends up set); if one does not, nothing changes.
type OmapTxn struct {
	If     []OmapCond
	Set    map[string][]byte
	Rm     []string
	RmFrom string // remove keys in [RmFrom, RmTo) when RmTo != ""
	RmTo   string
	// Create makes the object (with the changes) if it does not exist;
	// without it, a transaction on a missing object fails with
	// ErrNotFound whatever its guards. A missing object's omap is empty,
	// so its guards see every key absent.
	Create bool
}

// PreconditionError says which guard of an OmapTxn failed: the first one,
// in the order of If, with the key's current value.
type PreconditionError struct {
	Key    string
	Value  []byte // the key's value now, if Exists
	Exists bool
	msg    string
}

func (e *PreconditionError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrPrecondition) hold.
func (e *PreconditionError) Is(target error) bool { return target == ErrPrecondition }

// OmapApply applies txn to the object's omap, as one write replicated like
// any other: it is acknowledged once durable on every copy. A failed guard
// returns an error that errors.Is(err, ErrPrecondition) and errors.As to
// *PreconditionError, and nothing changed. Guards are checked on the
// primary under the object's lock, so concurrent read-modify-writes
// through OmapApply never lose an update.
//
// A transaction sent again after an unknown outcome (a connection lost, a
// primary gone) is recognised by a random token it carries, so a resend of
// one that applied succeeds instead of failing on its own change; the
// object remembers the tokens of its newest 1,024 transactions. Limits: 64
// guards, 4096 keys set and removed together, keys of 4 KiB, values of
// 1 MiB, 16 MiB in all.
func (p *Pool) OmapApply(ctx context.Context, name string, txn OmapTxn) error {
	t := proto.OmapTxn{Token: rand.Uint64() | 1, Create: txn.Create}
	for _, c := range txn.If {
		t.Guards = append(t.Guards, proto.OmapGuard{Key: []byte(c.Key), Value: c.Value, Absent: c.Absent})
	}
	keys := make([]string, 0, len(txn.Set))
	for k := range txn.Set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Set = append(t.Set, proto.KV{Key: []byte(k), Value: txn.Set[k]})
	}
	rm := slices.Compact(slices.Sorted(slices.Values(txn.Rm)))
	for _, k := range rm {
		t.Rm = append(t.Rm, []byte(k))
	}
	if txn.RmTo != "" {
		t.HasRange, t.RmFrom, t.RmTo = true, []byte(txn.RmFrom), []byte(txn.RmTo)
	}
	data := proto.AppendOmapTxn(nil, &t)
	if _, err := proto.DecodeOmapTxn(data); err != nil || len(data) > MaxChunk {
		if err == nil {
			err = fmt.Errorf("%d bytes, more than the %d one request carries", len(data), MaxChunk)
		}
		return fmt.Errorf("omap-txn %s/%s: %w: %v", p.name, name, ErrInvalid, err)
	}
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpOmapTxn, Object: name, Data: data})
	if err != nil && resp != nil && resp.Status == proto.StatusPrecondition {
		pe := &PreconditionError{Key: string(resp.Data), msg: err.Error()}
		if len(resp.KVs) == 1 && bytes.Equal(resp.KVs[0].Key, resp.Data) {
			pe.Exists, pe.Value = true, resp.KVs[0].Value
		}
		return pe
	}
	return err
}

// OmapListing is one page of OmapListDelim.
type OmapListing struct {
	Entries  []KV     // keys (with values) after `after` that start with prefix and contain no delimiter after the prefix
	Prefixes []string // common prefixes: prefix + ... + delimiter, each once, in order with the entries
	More     bool     // more keys follow
	Next     string   // where the next page starts (pass it as after): the last entry or prefix of this page
}

// OmapListDelim lists keys > after that start with prefix; with delimiter
// != "", keys containing delimiter after the prefix are rolled up into
// Prefixes (each counts once toward limit, and is listed only if it sorts
// after `after`, so a page that ends on a prefix resumes past it). A page
// holds at most limit (1..1000; 0 means 1000) entries and prefixes, and
// about 4 MiB of keys and values; it is one round trip to the primary,
// which skips each common prefix with one seek whatever the keys under it.
// Keys starting with NUL are listed only when prefix starts with NUL.
// ErrNotFound if the object does not exist.
func (p *Pool) OmapListDelim(ctx context.Context, name, prefix, delimiter, after string, limit int) (OmapListing, error) {
	if limit < 0 || limit > proto.MaxListDelim {
		return OmapListing{}, fmt.Errorf("omap-list-delim %s/%s: %w: limit %d not in 0..%d", p.name, name, ErrInvalid, limit, proto.MaxListDelim)
	}
	for _, s := range []string{prefix, delimiter, after} {
		if len(s) > proto.MaxKeyLen {
			return OmapListing{}, fmt.Errorf("omap-list-delim %s/%s: %w: %d bytes, more than an omap key's %d", p.name, name, ErrInvalid, len(s), proto.MaxKeyLen)
		}
	}
	req := &proto.Request{Op: proto.OpOmapListDelim, Object: name, Start: []byte(after), Limit: uint32(limit),
		Keys: [][]byte{[]byte(prefix), []byte(delimiter)}}
	resp, err := p.do(ctx, req)
	if err != nil {
		return OmapListing{}, err
	}
	prefixes, err := proto.DecodeListPrefixes(resp.Data)
	if err != nil {
		return OmapListing{}, fmt.Errorf("omap-list-delim %s/%s: %w", p.name, name, err)
	}
	l := OmapListing{More: resp.More, Entries: make([]KV, len(resp.KVs))}
	for i, kv := range resp.KVs {
		l.Entries[i] = KV{Key: string(kv.Key), Value: kv.Value}
	}
	for _, pf := range prefixes {
		l.Prefixes = append(l.Prefixes, string(pf))
	}
	if n := len(l.Entries); n > 0 {
		l.Next = l.Entries[n-1].Key
	}
	if n := len(l.Prefixes); n > 0 && l.Prefixes[n-1] > l.Next {
		l.Next = l.Prefixes[n-1]
	}
	if l.More && l.Next == "" {
		return OmapListing{}, fmt.Errorf("omap-list-delim %s/%s: the OSD said more keys follow but sent none", p.name, name)
	}
	return l, nil
}
