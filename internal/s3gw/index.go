package s3gw

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A bucket's index is range-sharded: the bucket record lists its shards
// by the first key each holds (shardRange), and a shard that grows past
// Config.IndexShardKeys splits in two at its middle key (split.go). Each
// shard's open key says which state of the record it belongs to, so a
// gateway holding an older record (cached, or read just before a split)
// notices instead of acting on the wrong shard. Its value is:
//
//	"1"                 open, generation 0 (a shard never split)
//	"o<gen>"            open at generation gen
//	"s<gen>\x00<at>"    splitting at key <at>: still whole; writes wait
//	"t<gen>\x00<at>"    trimming: the keys from <at> on are the new shard's
//	(absent)            closed by DeleteBucket, or not opened yet
//
// Every write guards on its shard being open at the generation its record
// names, so a write never lands on a shard that is splitting or has split
// since; reads check the same key in the same round trip.
const (
	stateOpen     = 'o'
	stateSplit    = 's'
	stateTrimming = 't'
)

// shardState is a decoded open key.
type shardState struct {
	kind byte // stateOpen, stateSplit, stateTrimming; 0: closed
	gen  int
	at   string // where a split cuts
}

// openValueOf is the open key's value of a shard open at gen.
func openValueOf(gen int) []byte {
	if gen == 0 {
		return openValue
	}
	return []byte("o" + strconv.Itoa(gen))
}

func (s shardState) encode() []byte {
	if s.kind == stateOpen {
		return openValueOf(s.gen)
	}
	return []byte(string(s.kind) + strconv.Itoa(s.gen) + "\x00" + s.at)
}

// parseState decodes an open key's value; a damaged one reads as closed.
func parseState(v []byte, exists bool) shardState {
	if !exists || len(v) == 0 {
		return shardState{}
	}
	if bytes.Equal(v, openValue) {
		return shardState{kind: stateOpen}
	}
	head, at, cut := strings.Cut(string(v[1:]), "\x00")
	gen, err := strconv.Atoi(head)
	kind := v[0]
	if err != nil || gen < 0 || (kind == stateOpen) == cut || kind != stateOpen && kind != stateSplit && kind != stateTrimming {
		return shardState{}
	}
	return shardState{kind: kind, gen: gen, at: at}
}

// openCond is the guard of every write to shard r: open at r's generation.
func openCond(r shardRange) Cond { return Cond{Key: keyOpen, Value: openValueOf(r.Gen)} }

// holds says whether a shard in state s holds key k for a reader whose
// record names the shard at generation gen: open at gen; splitting (whole,
// and the new shard not open yet) for the record from before the split,
// the only one there is then; trimming, for either record, when the key
// stays.
func (s shardState) holds(gen int, k string) bool {
	switch s.kind {
	case stateOpen:
		return s.gen == gen
	case stateSplit:
		return s.gen == gen
	case stateTrimming:
		return (s.gen == gen || s.gen+1 == gen) && k < s.at
	}
	return false
}

// holdsRange says whether a shard in state s holds every key of its
// range for a reader whose record names it at generation gen (the range
// the record gives it): open at gen; splitting for the record from before
// the split; trimming for the record after it, whose range for the shard
// ends where the split cuts (the keys past it, not all removed yet, are
// the listing's to drop).
func (s shardState) holdsRange(gen int) bool {
	switch s.kind {
	case stateOpen, stateSplit:
		return s.gen == gen
	case stateTrimming:
		return s.gen+1 == gen
	}
	return false
}

// indexWait bounds how long a request waits for a split of its shard to
// end before it answers SlowDown; splitStuck is how old a split must be
// before a waiting request finishes it itself (its gateway died).
const (
	indexWait  = 10 * time.Second
	splitStuck = 5 * time.Second
)

// shardChanged is what a request does when its shard is not open at the
// generation its record names (state s): it reads the record again, waits
// a moment while a split runs (finishing one whose gateway died), and
// returns the record to retry with, or NoSuchBucket when the bucket is
// gone or closed.
func (g *Gateway) shardChanged(ctx context.Context, b *bucketRec, shard string, s shardState, since time.Time) (*bucketRec, error) {
	if g.now().Sub(since) > indexWait || ctx.Err() != nil {
		return nil, ErrSlowDown.with("The bucket's index is being split; retry.")
	}
	g.buckets.drop(b.Name)
	nb, err := g.lookupBucket(ctx, b.Name)
	if err != nil {
		return nil, err
	}
	if nb == nil || nb.ID != b.ID {
		return nil, ErrNoSuchBucket
	}
	if s.kind == 0 && string(nb.raw) == string(b.raw) {
		return nil, ErrNoSuchBucket // closed by a DeleteBucket
	}
	if s.kind == stateSplit || s.kind == stateTrimming || string(nb.raw) == string(b.raw) {
		g.finishStuckSplit(ctx, nb, shard)
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return nb, nil
}

// readIndex reads keys of the shard that holds object key owner (the
// keys are owner's entry, or bookkeeping of owner such as its uploads),
// checking in the same round trip that the shard holds owner for b; it
// follows splits.
func (g *Gateway) readIndex(ctx context.Context, b *bucketRec, owner string, keys ...string) (map[string][]byte, *bucketRec, error) {
	start := g.now()
	for {
		r := b.rangeOf(owner)
		shard := shardObject(b.ID, r.N)
		vals, err := g.cfg.Store.OmapGet(ctx, shard, append(keys, keyOpen)...)
		if errors.Is(err, ErrNotFound) {
			g.buckets.drop(b.Name)
			return nil, nil, ErrNoSuchBucket
		}
		if err != nil {
			return nil, nil, err
		}
		v, ok := vals[keyOpen]
		st := parseState(v, ok)
		if st.holds(r.Gen, owner) {
			delete(vals, keyOpen)
			return vals, b, nil
		}
		if b, err = g.shardChanged(ctx, b, shard, st, start); err != nil {
			return nil, nil, err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// applyToKey applies the transaction build makes for the shard of b that
// holds object key owner, guarded on that shard being open at the
// generation b names, and follows splits. It returns the record it
// applied with; a failed guard of build's own is the caller's.
func (g *Gateway) applyToKey(ctx context.Context, b *bucketRec, owner string, build func(r shardRange) Txn) (*bucketRec, error) {
	start := g.now()
	for {
		r := b.rangeOf(owner)
		shard := shardObject(b.ID, r.N)
		txn := build(r)
		txn.If = append([]Cond{openCond(r)}, txn.If...)
		err := g.cfg.Store.OmapApply(ctx, shard, txn)
		var pe *PreconditionError
		switch {
		case errors.As(err, &pe) && pe.Key == keyOpen:
			if b, err = g.shardChanged(ctx, b, shard, parseState(pe.Value, pe.Exists), start); err != nil {
				return nil, err
			}
		case errors.Is(err, ErrNotFound):
			g.buckets.drop(b.Name)
			return nil, ErrNoSuchBucket
		default:
			return b, err
		}
	}
}

// errIndexMoved answers a request whose key moved to another index shard
// between two of its steps that must share one: its client retries.
var errIndexMoved = ErrSlowDown.with("The bucket's index was split while this request ran; retry.")

// checkHolds says errIndexMoved unless the shard of b holding owner still
// holds it for b: a listing of that shard read just before is then whole.
// (A shard's generation only grows, so a state that holds after the
// listing held during it.)
func (g *Gateway) checkHolds(ctx context.Context, b *bucketRec, owner string) error {
	r := b.rangeOf(owner)
	vals, err := g.cfg.Store.OmapGet(ctx, shardObject(b.ID, r.N), keyOpen)
	if err != nil {
		return err
	}
	v, ok := vals[keyOpen]
	if !parseState(v, ok).holds(r.Gen, owner) {
		g.buckets.drop(b.Name)
		return errIndexMoved
	}
	return nil
}

// acrossQuery is a delimiter listing over the index shards of a bucket:
// prefix, delim and after are omap keys; keyOf maps one to the object
// key that places it (the identity for entries, the upload's key for
// uploads).
type acrossQuery struct {
	prefix, delim, after string
	limit                int
	keyOf                func(string) string
}

// listAcross lists one page from the shard that holds where the page
// starts, and goes on into the next shards while the page is not full and
// a shard ends. Each shard's part costs two round trips, its listing and
// the check that the shard still held its range for b afterwards (else
// the page is read again with the record as it is now).
func (g *Gateway) listAcross(ctx context.Context, b *bucketRec, q acrossQuery) (Listing, error) {
	start := g.now()
	for {
		l, moved, err := g.listAcrossOnce(ctx, b, q)
		if err != nil || moved < 0 {
			return l, err
		}
		r := b.Shards[moved]
		if b, err = g.shardChanged(ctx, b, shardObject(b.ID, r.N), shardState{kind: stateSplit}, start); err != nil {
			return l, err
		}
	}
}

// listAcrossOnce is listAcross with b as it is; moved is the index of a
// shard that no longer held its range (-1: none, the page stands). A page
// full at the end of a shard looks one item into the next shards, so that
// it says More only when more follow.
func (g *Gateway) listAcrossOnce(ctx context.Context, b *bucketRec, q acrossQuery) (out Listing, moved int, err error) {
	after, kp := q.after, q.keyOf(q.prefix)
	first := b.rangeIndex(max(kp, q.keyOf(after)))
	for i := first; i < len(b.Shards); i++ {
		r := b.Shards[i]
		if i > first && r.From > kp && !strings.HasPrefix(r.From, kp) {
			break // no key under the prefix from here on
		}
		want := q.limit - len(out.Entries) - len(out.Prefixes)
		l, err := g.cfg.Store.OmapListDelim(ctx, shardObject(b.ID, r.N), q.prefix, q.delim, after, max(want, 1))
		if err != nil {
			return out, -1, err
		}
		vals, err := g.cfg.Store.OmapGet(ctx, shardObject(b.ID, r.N), keyOpen)
		if err != nil {
			return out, -1, err
		}
		if v, ok := vals[keyOpen]; !parseState(v, ok).holdsRange(r.Gen) {
			g.buckets.drop(b.Name)
			return out, i, nil
		}
		if i+1 < len(b.Shards) {
			// A shard trimming may still hold keys it handed over.
			l = within(l, q.keyOf, b.Shards[i+1].From)
		}
		if want == 0 { // looking ahead
			if len(l.Entries)+len(l.Prefixes) > 0 {
				out.More = true
				break
			}
			continue
		}
		out.Entries, out.Prefixes, out.More = append(out.Entries, l.Entries...), append(out.Prefixes, l.Prefixes...), l.More
		for _, kv := range l.Entries {
			after = max(after, kv.Key)
		}
		for _, cp := range l.Prefixes {
			after = max(after, cp+afterMarker)
		}
		out.Next = after
		if l.More {
			break
		}
	}
	return out, -1, nil
}

// within drops from l what lies at or past end (keyOf of an entry or a
// common prefix); if anything was dropped, l ends there.
func within(l Listing, keyOf func(string) string, end string) Listing {
	n := len(l.Entries) + len(l.Prefixes)
	l.Entries = slices.DeleteFunc(l.Entries, func(kv KV) bool { return keyOf(kv.Key) >= end })
	l.Prefixes = slices.DeleteFunc(l.Prefixes, func(cp string) bool { return keyOf(cp) >= end })
	if len(l.Entries)+len(l.Prefixes) < n {
		l.More = false
	}
	return l
}
