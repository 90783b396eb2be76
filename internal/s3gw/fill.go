package s3gw

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// Filling a bucket with many small objects at once, so that an operator
// can try listings, splits and tools against a bucket of tens of millions
// of keys without hours of PUTs: Fill commits a batch of objects in one
// guarded transaction of their index shard, where a PUT takes one each.

// fillBatch bounds the objects one transaction commits: two keys each
// (the entry and its inline data), well under the keys one message holds.
const fillBatch = 1000

// Fill writes an object holding body (at most 16 KiB, kept inline) under
// each of keys into bucket, and splits index shards as PUTs would. It
// refuses a batch any of whose keys exists, checked just before the batch
// commits: fill a bucket that nothing else writes to the same keys. The
// batches before a failure stay written; progress, if not nil, is told
// how many objects are written after each batch.
func (g *Gateway) Fill(ctx context.Context, bucket string, keys []string, body []byte, progress func(done int)) error {
	if len(body) > inlineMax {
		return fmt.Errorf("fill: objects of %d bytes; at most %d", len(body), inlineMax)
	}
	keys = slices.Sorted(slices.Values(keys))
	for i, k := range keys {
		err := checkKey(k)
		if k == "" {
			err = ErrInvalidArgument.with("Object keys may not be empty.")
		}
		if err != nil {
			return fmt.Errorf("fill: key %.80q: %w", k, err)
		}
		if i > 0 && keys[i-1] == k {
			return fmt.Errorf("fill: key %.80q given twice", k)
		}
	}
	b, err := g.lookupBucket(ctx, bucket)
	if err != nil {
		return err
	}
	if b == nil {
		return ErrNoSuchBucket
	}
	f := filler{g: g, body: body, etag: md5.Sum(body), added: map[int]int{}}
	for done, stale := 0, 0; done < len(keys); {
		n, err := f.batch(ctx, &b, keys[done:])
		if err != nil {
			return err
		}
		if n == 0 { // the shard changed under the batch: try again
			if stale++; stale > maxCommitTries {
				return fmt.Errorf("fill: the index shard of %q keeps changing; try again later", keys[done])
			}
			continue
		}
		stale, done = 0, done+n
		if progress != nil {
			progress(done)
		}
	}
	return nil
}

// filler is one Fill: what every object gets, and how many keys it added
// to each shard since that shard was last probed for a split.
type filler struct {
	g     *Gateway
	body  []byte
	etag  [md5.Size]byte
	added map[int]int
}

// batch commits the first keys (sorted) that fall in one shard, at most
// fillBatch, and returns how many it wrote (0 after the shard changed
// under it: the caller tries again on *b, refreshed).
func (f *filler) batch(ctx context.Context, b **bucketRec, keys []string) (int, error) {
	i := (*b).rangeIndex(keys[0])
	r, n := (*b).Shards[i], min(len(keys), fillBatch, f.probeEvery())
	if i+1 < len((*b).Shards) {
		n = sortedBelow(keys[:n], (*b).Shards[i+1].From) // at least keys[0]
	}
	batch, shard := keys[:n], shardObject((*b).ID, r.N)
	have, err := f.g.cfg.Store.OmapGet(ctx, shard, batch...)
	if err != nil {
		return 0, err
	}
	for _, k := range batch {
		if _, ok := have[k]; ok {
			return 0, fmt.Errorf("fill: key %q exists; fill only keys that do not", k)
		}
	}
	err = f.g.cfg.Store.OmapApply(ctx, shard, f.txn(r, batch))
	var pe *PreconditionError
	if errors.As(err, &pe) && pe.Key == keyOpen {
		*b, err = f.g.shardChanged(ctx, *b, shard, parseState(pe.Value, pe.Exists), f.g.now())
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	return n, f.probe(ctx, b, r, n)
}

// probeEvery is how many new keys of a shard make a probe: a batch holds
// no more, so a shard grows past its bound by one batch at most.
func (f *filler) probeEvery() int { return max(1, f.g.cfg.IndexShardKeys/probeDivisor) }

// sortedBelow returns how many of sorted keys are below limit.
func sortedBelow(keys []string, limit string) int {
	n, _ := slices.BinarySearch(keys, limit)
	return n
}

// txn is the transaction that writes keys into shard r.
func (f *filler) txn(r shardRange, keys []string) Txn {
	t := Txn{If: []Cond{openCond(r)}, Set: make(map[string][]byte, 2*len(keys))}
	for _, k := range keys {
		e := Entry{Size: uint64(len(f.body)), ETag: hex.EncodeToString(f.etag[:]), MTime: f.g.now().UTC(), Inline: newID()}
		t.Set[k] = e.encode()
		t.Set[inlineKey(k)] = append([]byte(e.Inline), f.body...)
	}
	return t
}

// probe splits shard r if it has grown past its bound, as often as PUTs
// would look (once per IndexShardKeys/probeDivisor new keys), and then
// reads the bucket's record again.
func (f *filler) probe(ctx context.Context, b **bucketRec, r shardRange, n int) error {
	f.added[r.N] += n
	if f.added[r.N] < f.probeEvery() {
		return nil
	}
	f.added[r.N] = 0
	if err := f.g.maybeSplit(ctx, *b, r); err != nil {
		return err
	}
	f.g.buckets.drop((*b).Name)
	nb, err := f.g.lookupBucket(ctx, (*b).Name)
	if err == nil && (nb == nil || nb.ID != (*b).ID) {
		err = ErrNoSuchBucket
	}
	*b = nb
	return err
}
