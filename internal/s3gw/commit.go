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
	entry  *Entry
	inline []byte // the data of an entry with Inline set
	extra  func(t *Txn)
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
	return g.updateAhead(ctx, b, key, nil, guards, decide)
}

// updateAhead is update whose first try decides on ahead, a read of the
// key's entry started earlier (nil: none), if it read the shard the key is
// in now. The commit's guard that the key still holds what was read makes
// an early read as safe as one made just before the commit.
func (g *Gateway) updateAhead(ctx context.Context, b *bucketRec, key string, ahead *entryRead, guards []Cond, decide func(old *Entry) (change, error)) (*Entry, error) {
	home, start := b.shard(key), g.now()
	for try := 0; try < maxCommitTries; try++ {
		r := b.rangeOf(key)
		shard := shardObject(b.ID, r.N)
		read := ahead.take(shard)
		if read == nil {
			read = g.readKey(ctx, shard, key)
		}
		old, txn, exists, err := g.prepare(read, r, key, guards, decide)
		if err != nil || txn == nil {
			return old, err
		}
		err = g.cfg.Store.OmapApply(ctx, shard, *txn)
		var pe *PreconditionError
		if errors.As(err, &pe) && g.landed(ctx, shard, key, exists, txn.Set[key]) {
			// Our transaction applied and its resend (after a lost
			// answer) failed on its own change: it succeeded.
			err = nil
		}
		switch {
		case err == nil:
			if !exists && txn.Set[key] != nil {
				g.noteCreate(b, r)
			}
			return old, nil
		case errors.As(err, &pe) && pe.Key == key:
			// Another writer won: decide again on its result.
			time.Sleep(time.Duration(rand.IntN(1+try*2)) * time.Millisecond)
		case errors.As(err, &pe) && pe.Key == keyOpen:
			// The shard split, or is splitting, or closed: shardChanged
			// bounds the wait, so this does not count as a lost race.
			if b, err = g.shardChanged(ctx, b, shard, parseState(pe.Value, pe.Exists), start); err != nil {
				return nil, err
			}
			try--
		case errors.Is(err, ErrNotFound):
			g.buckets.drop(b.Name)
			return nil, ErrNoSuchBucket
		case errors.As(err, &pe) && shard != home:
			// A guard of the caller's (a write's intent, kept in the
			// shard the key was in) is not where the key now is: the
			// commit cannot follow the key there.
			return nil, errIndexMoved
		default:
			return nil, err
		}
	}
	return nil, ErrSlowDown.with("Too many concurrent writes to this key; retry.")
}

// entryRead is a read of one key of an index shard, which may still be
// running: a write starts it before storing its data, so that the commit
// after the data needs no read of its own.
type entryRead struct {
	shard string
	done  chan struct{}
	vals  map[string][]byte
	err   error
	taken bool
}

// readKey reads key from shard now.
func (g *Gateway) readKey(ctx context.Context, shard, key string) *entryRead {
	vals, err := g.cfg.Store.OmapGet(ctx, shard, key)
	rd := &entryRead{shard: shard, done: make(chan struct{}), vals: vals, err: err}
	close(rd.done)
	return rd
}

// readAhead starts reading key's entry in the background.
func (g *Gateway) readAhead(ctx context.Context, b *bucketRec, key string) *entryRead {
	rd := &entryRead{shard: shardObject(b.ID, b.rangeOf(key).N), done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		rd.vals, rd.err = g.cfg.Store.OmapGet(ctx, rd.shard, key)
	}()
	return rd
}

// take waits for the read and returns it if it read shard and did not
// fail (a failed early read is made again), once: a retry reads anew.
func (rd *entryRead) take(shard string) *entryRead {
	if rd == nil {
		return nil
	}
	<-rd.done
	if rd.taken || rd.shard != shard || rd.err != nil {
		return nil
	}
	rd.taken = true
	return rd
}

// prepare lets decide choose the change from key's entry as read from
// shard r and builds its guarded transaction; a nil transaction means
// nothing to do.
func (g *Gateway) prepare(read *entryRead, r shardRange, key string, guards []Cond, decide func(old *Entry) (change, error)) (old *Entry, txn *Txn, exists bool, err error) {
	vals, err := read.vals, read.err
	if errors.Is(err, ErrNotFound) {
		return nil, nil, false, ErrNoSuchBucket
	}
	if err != nil {
		return nil, nil, false, err
	}
	raw, exists := vals[key]
	if exists {
		if old, err = decodeEntry(raw); err != nil {
			return nil, nil, false, err
		}
	}
	ch, err := decide(old)
	if err != nil {
		return nil, nil, false, err
	}
	t := Txn{If: append([]Cond{openCond(r)}, guards...), Set: map[string][]byte{}}
	if exists {
		t.If = append(t.If, Cond{Key: key, Value: raw})
		if len(old.Parts) > 0 {
			t.Set[gcKey(g.now(), newID())] = gcOf(old).encode()
		}
	} else {
		t.If = append(t.If, Cond{Key: key, Absent: true})
	}
	if ch.entry != nil {
		t.Set[key] = ch.entry.encode()
		if ch.entry.Inline != "" {
			t.Set[inlineKey(key)] = append([]byte(ch.entry.Inline), ch.inline...)
		}
	} else if exists {
		t.Rm = append(t.Rm, key)
	} else if ch.extra == nil {
		return nil, nil, false, nil // nothing to remove, nothing else to do
	}
	if exists && old.Inline != "" && (ch.entry == nil || ch.entry.Inline == "") {
		t.Rm = append(t.Rm, inlineKey(key))
	}
	if ch.extra != nil {
		ch.extra(&t)
	}
	return old, &t, exists, nil
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
