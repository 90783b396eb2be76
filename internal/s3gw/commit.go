package s3gw

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// maxCommitTries bounds how often a write re-reads and retries when
// concurrent writers to the same key keep winning the race.
const maxCommitTries = 32

// change is what an update decides for a key: the new entry (nil: remove
// the key), and bookkeeping that commits in the same transaction.
type change struct {
	entry *Entry
	extra func(t *Txn)
}

// update reads key's entry from its shard, lets decide choose the change
// (or refuse, e.g. 412), and commits it with guards that the bucket is
// open and that the key still holds what was read, plus guards of its
// own (e.g. an intent still pending). The old entry's data goes to the
// collector in the same transaction. When another writer changed the key
// in between, decide runs again on what is there now: a conditional write
// is evaluated against exactly the value it replaces. It returns the
// entry it replaced.
func (g *Gateway) update(ctx context.Context, b *bucketRec, key string, guards []Cond, decide func(old *Entry) (change, error)) (*Entry, error) {
	shard := b.shard(key)
	st := g.cfg.Store
	for try := 0; try < maxCommitTries; try++ {
		vals, err := st.OmapGet(ctx, shard, key)
		if errors.Is(err, ErrNotFound) {
			return nil, ErrNoSuchBucket
		}
		if err != nil {
			return nil, err
		}
		raw, exists := vals[key]
		var old *Entry
		if exists {
			if old, err = decodeEntry(raw); err != nil {
				return nil, err
			}
		}
		ch, err := decide(old)
		if err != nil {
			return nil, err
		}
		txn := Txn{If: append([]Cond{{Key: keyOpen, Value: openValue}}, guards...), Set: map[string][]byte{}}
		if exists {
			txn.If = append(txn.If, Cond{Key: key, Value: raw})
			if len(old.Parts) > 0 {
				txn.Set[gcKey(g.now(), newID())] = gcOf(old).encode()
			}
		} else {
			txn.If = append(txn.If, Cond{Key: key, Absent: true})
		}
		var newRaw []byte
		if ch.entry != nil {
			newRaw = ch.entry.encode()
			txn.Set[key] = newRaw
		} else if exists {
			txn.Rm = append(txn.Rm, key)
		} else if ch.extra == nil {
			return nil, nil // nothing to remove, nothing else to do
		}
		if ch.extra != nil {
			ch.extra(&txn)
		}
		err = st.OmapApply(ctx, shard, txn)
		var pe *PreconditionError
		if errors.As(err, &pe) && g.landed(ctx, shard, key, exists, newRaw) {
			// Our transaction applied and its resend (after a lost
			// answer) failed on its own change: it succeeded.
			return old, nil
		}
		switch {
		case err == nil:
			return old, nil
		case errors.As(err, &pe) && pe.Key == key:
			// Another writer won: decide again on its result.
			time.Sleep(time.Duration(rand.IntN(1+try*2)) * time.Millisecond)
			continue
		case errors.As(err, &pe) && pe.Key == keyOpen, errors.Is(err, ErrNotFound):
			g.buckets.drop(b.Name)
			return nil, ErrNoSuchBucket
		default:
			return nil, err
		}
	}
	return nil, ErrSlowDown.with("Too many concurrent writes to this key; retry.")
}

// landed says whether a transaction that set key to newRaw (nil: removed
// an existing key) is what the key shows now. The cluster recognises the
// resend of a transaction that applied, but if a resend ever fails on its
// own change, taking that for a lost race would retry the write and hand
// its own data to the collector, or remove the data its entry names.
// newRaw holds a random data id, so an equal value is this write's.
func (g *Gateway) landed(ctx context.Context, shard, key string, existed bool, newRaw []byte) bool {
	vals, err := g.cfg.Store.OmapGet(ctx, shard, key)
	if err != nil {
		return false
	}
	now, ok := vals[key]
	if newRaw == nil {
		return existed && !ok
	}
	return ok && bytes.Equal(now, newRaw)
}
