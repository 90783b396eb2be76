package s3gw

import (
	"context"
	"errors"
	"strings"
	"time"
)

// The collector gives back the space of data no entry names any more:
//
//   - replaced and deleted objects' data, whose GC key (0x00 g <time> ...)
//     the same transaction that dropped them wrote into the shard, once
//     GCGrace has passed (GETs still streaming it are done by then);
//   - data of writes whose gateway died before their commit, found by
//     their intent (0x00 p <data id>) once IntentTimeout has passed: the
//     intent is removed first, guarded on its value, so a slow writer's
//     commit (which is guarded on its intent too) fails instead of
//     committing data that is being deleted;
//   - everything of a deleted bucket (its dead key in the registry), once
//     GCGrace has passed since the delete.
//
// Every step is idempotent (a stripe already gone is fine) and the key
// goes only after its data, so a collector that dies, or two gateways'
// collectors at once, lose nothing and leak nothing.

// maxCollectPerPass bounds the records one pass handles per shard.
const maxCollectPerPass = 1000

// CollectStats counts what one pass of the collector reclaimed.
type CollectStats struct {
	Data    int // GC records of replaced or deleted objects
	Intents int // writes given up for dead
	Buckets int // deleted buckets
}

// Run runs the collector until ctx ends, a pass every quarter of the
// grace (at least every minute, at most 5 times a second).
func (g *Gateway) Run(ctx context.Context) {
	every := min(max(g.cfg.GCGrace/4, 200*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := g.Collect(ctx)
		if err != nil && ctx.Err() == nil {
			g.cfg.Logf("s3: collector: %v", err)
		}
		if st != (CollectStats{}) {
			g.cfg.Logf("s3: collector reclaimed the data of %d replaced or deleted objects, %d abandoned writes, %d deleted buckets", st.Data, st.Intents, st.Buckets)
		}
	}
}

// Collect runs one pass over every bucket of the registry.
func (g *Gateway) Collect(ctx context.Context) (CollectStats, error) {
	var st CollectStats
	dead, _, err := g.cfg.Store.OmapList(ctx, registryObject, prefixDead, prefixDead+"\xff", maxCollectPerPass)
	if errors.Is(err, ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	for _, kv := range dead {
		ok, err := g.collectDeadBucket(ctx, kv)
		if err != nil {
			return st, err
		}
		if ok {
			st.Buckets++
		}
	}
	start := "\x01"
	for n := 0; n < maxBuckets; {
		kvs, more, err := g.cfg.Store.OmapList(ctx, registryObject, start, "", 1000)
		if err != nil {
			return st, err
		}
		for _, kv := range kvs {
			b, err := decodeBucket(kv.Key, kv.Value)
			if err != nil {
				g.cfg.Logf("s3: collector: %v", err)
				continue
			}
			for _, s := range b.Shards {
				if err := g.collectShard(ctx, b.data(), shardObject(b.ID, s.N), &st); err != nil {
					return st, err
				}
			}
		}
		n += len(kvs)
		if !more || len(kvs) == 0 {
			break
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	return st, nil
}

// collectShard reclaims a live shard's expired GC records and abandoned
// intents.
func (g *Gateway) collectShard(ctx context.Context, loc dataLoc, shard string, st *CollectStats) error {
	cutoff := g.now().Add(-g.cfg.GCGrace)
	kvs, _, err := g.cfg.Store.OmapList(ctx, shard, prefixGC, gcKey(cutoff, ""), maxCollectPerPass)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := g.reclaimGC(ctx, loc, shard, kv); err != nil {
			return err
		}
		st.Data++
	}
	kvs, _, err = g.cfg.Store.OmapList(ctx, shard, prefixPending, prefixPending+"\xff", maxCollectPerPass)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		in, err := decodeIntent(kv.Value)
		if err != nil || g.now().Sub(in.Start) < g.cfg.IntentTimeout {
			continue
		}
		ok, err := g.reclaimIntent(ctx, loc, shard, kv, in)
		if err != nil {
			return err
		}
		if ok {
			st.Intents++
		}
	}
	return nil
}

func (g *Gateway) reclaimGC(ctx context.Context, loc dataLoc, shard string, kv KV) error {
	r, err := decodeGC(kv.Value)
	if err != nil {
		g.cfg.Logf("s3: collector: dropping the damaged GC record %q of %s: %v", kv.Key, shard, err)
	} else {
		for _, p := range r.Parts {
			if err := g.removeData(ctx, loc, p.DataID, p.Size, r.Stripe); err != nil {
				return err
			}
		}
	}
	return g.cfg.Store.OmapApply(ctx, shard, Txn{Rm: []string{kv.Key}})
}

// reclaimIntent takes an intent away from its writer (guarded on its
// value: if the write committed meanwhile, nothing happens) and removes
// the data it may have written.
func (g *Gateway) reclaimIntent(ctx context.Context, loc dataLoc, shard string, kv KV, in intent) (bool, error) {
	err := g.cfg.Store.OmapApply(ctx, shard, Txn{If: []Cond{{Key: kv.Key, Value: kv.Value}}, Rm: []string{kv.Key}})
	if errors.Is(err, ErrPrecondition) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, g.removeData(ctx, loc, strings.TrimPrefix(kv.Key, prefixPending), in.Size, stripeSize)
}

// collectDeadBucket reclaims a deleted bucket once the grace has passed:
// the data its shards still name (GC records, intents, parts of uploads
// never completed) in its data pool, then the shards, then its dead key.
// A damaged record is reclaimed as far as it can be read (its time
// unreadable: at once).
func (g *Gateway) collectDeadBucket(ctx context.Context, kv KV) (bool, error) {
	dead, err := decodeDead(kv.Value)
	if g.now().Sub(dead.at) < g.cfg.GCGrace { // an unreadable time reads as 1970
		return false, nil
	}
	if err != nil {
		g.cfg.Logf("s3: collector: the record of deleted bucket %q is damaged (%v); reclaiming what it names", kv.Key[len(prefixDead):], err)
	}
	loc := dataLoc{strings.TrimPrefix(kv.Key, prefixDead), dead.pool}
	for _, n := range dead.shards {
		if err := g.reclaimDeadShard(ctx, loc, shardObject(loc.bucketID, n)); err != nil {
			return false, err
		}
	}
	err = g.cfg.Store.OmapApply(ctx, registryObject, Txn{If: []Cond{{Key: kv.Key, Value: kv.Value}}, Rm: []string{kv.Key}})
	if err != nil && !errors.Is(err, ErrPrecondition) {
		return false, err
	}
	return true, nil
}

// reclaimDeadShard removes the data a dead bucket's shard names, then the
// shard.
func (g *Gateway) reclaimDeadShard(ctx context.Context, loc dataLoc, shard string) error {
	for {
		kvs, more, err := g.cfg.Store.OmapList(ctx, shard, "\x00", "\x01", maxCollectPerPass)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range kvs {
			if err := g.reclaimAny(ctx, loc, shard, e); err != nil {
				return err
			}
		}
		if !more {
			if err := g.cfg.Store.Delete(ctx, shard); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			return nil
		}
	}
}

// reclaimAny removes the data a bookkeeping key of a dead shard names,
// then the key.
func (g *Gateway) reclaimAny(ctx context.Context, loc dataLoc, shard string, kv KV) error {
	switch {
	case strings.HasPrefix(kv.Key, prefixGC):
		return g.reclaimGC(ctx, loc, shard, kv)
	case strings.HasPrefix(kv.Key, prefixPending):
		in, err := decodeIntent(kv.Value)
		if err == nil {
			_, err = g.reclaimIntent(ctx, loc, shard, kv, in)
			return err
		}
	case strings.HasPrefix(kv.Key, prefixPart):
		p, err := decodePart(kv.Value)
		if err == nil {
			if err := g.removeData(ctx, loc, p.DataID, p.Size, stripeSize); err != nil {
				return err
			}
		}
	}
	return g.cfg.Store.OmapApply(ctx, shard, Txn{Rm: []string{kv.Key}})
}
