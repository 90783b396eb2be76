package s3gw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Splitting an index shard S at key `at` into S (keys below at) and a
// new shard T. Every step is guarded and can run again, in any gateway,
// so a split whose gateway died is finished by the next request that
// waits for it (finishStuckSplit):
//
//  1. S goes from open to splitting (guarded on its generation), with a
//     split record naming T: from now on no write lands on S, and S still
//     holds every key, so readers go on reading it;
//  2. the keys from at on, the multipart uploads of those keys and their
//     parts are copied into T, each page guarded on T not being open yet
//     (a copy run again after T opened must not undo a newer write);
//  3. S goes to trimming: it answers only for keys below at from now on,
//     and readers of the keys from at on wait for step 4 (T is not
//     open yet, so nothing newer than S's copy exists anywhere);
//  4. T opens; the bucket record gains T and S's next generation
//     (compare-and-swap on the record);
//  5. S's moved keys are removed, and S opens at its next generation.
//
// What stays in S: the keys below at, and the bookkeeping that is not
// per key (GC records, write intents). A write whose intent is in S but
// whose key moved to T fails with SlowDown (its client retries), so an
// intent and its commit are always in one shard.
const keySplit = "\x00split"

// splitRec is S's record of its split in progress.
type splitRec struct {
	N     int       `json:"n"` // T's number
	Start time.Time `json:"start"`
}

// splitPage bounds the keys one copy or listing step moves.
const splitPage = 256

// Defaults of Config.IndexShardKeys: a shard splits past it, and is
// counted after about one in IndexShardKeys/probeDivisor new keys.
const (
	defaultIndexShardKeys = 50000
	probeDivisor          = 8
)

// noteCreate is told of every new key committed to shard r of b: now and
// then it counts the shard's keys in the background and splits it when
// it holds more than IndexShardKeys.
func (g *Gateway) noteCreate(b *bucketRec, r shardRange) {
	if rand.IntN(max(1, g.cfg.IndexShardKeys/probeDivisor)) != 0 {
		return
	}
	shard := shardObject(b.ID, r.N)
	if _, busy := g.probing.LoadOrStore(shard, true); busy {
		return
	}
	go func() {
		defer g.probing.Delete(shard)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := g.maybeSplit(ctx, b, r); err != nil {
			g.cfg.Logf("s3: splitting an index shard of bucket %s: %v", b.Name, err)
		}
	}()
}

// maybeSplit splits shard r of b at its middle key if it holds more than
// IndexShardKeys keys.
func (g *Gateway) maybeSplit(ctx context.Context, b *bucketRec, r shardRange) error {
	at, err := g.middleKey(ctx, shardObject(b.ID, r.N), g.cfg.IndexShardKeys)
	if err != nil || at == "" {
		return err
	}
	return g.split(ctx, b, r, at)
}

// middleKey returns the key halfway through the first limit+1 keys of
// shard, or "" if it holds at most limit keys (or the middle is its
// first key: nothing to split off).
func (g *Gateway) middleKey(ctx context.Context, shard string, limit int) (string, error) {
	n, start, mid := 0, "\x01", ""
	for n <= limit {
		kvs, more, err := g.cfg.Store.OmapList(ctx, shard, start, afterMarker, splitPage)
		if err != nil {
			return "", err
		}
		for _, kv := range kvs {
			if n == (limit+1)/2 {
				mid = kv.Key
			}
			n++
		}
		if !more || len(kvs) == 0 {
			break
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	if n <= limit {
		return "", nil
	}
	return mid, nil
}

// split splits shard r of b at key at (steps in the comment above).
func (g *Gateway) split(ctx context.Context, b *bucketRec, r shardRange, at string) error {
	if at <= r.From {
		return fmt.Errorf("split of %s at %q: not above its first key %q", shardObject(b.ID, r.N), at, r.From)
	}
	n := 1 + rand.IntN(1<<30)
	for slices.ContainsFunc(b.Shards, func(s shardRange) bool { return s.N == n }) {
		n = 1 + rand.IntN(1<<30)
	}
	rec, _ := json.Marshal(splitRec{N: n, Start: g.now()})
	shard := shardObject(b.ID, r.N)
	err := g.cfg.Store.OmapApply(ctx, shard, Txn{If: []Cond{openCond(r)},
		Set: map[string][]byte{keyOpen: shardState{kind: stateSplit, gen: r.Gen, at: at}.encode(), keySplit: rec}})
	if errors.Is(err, ErrPrecondition) {
		return nil // splitting already, or split since
	}
	if err != nil {
		return err
	}
	g.cfg.Logf("s3: bucket %s: splitting index shard %d at %q into shard %d", b.Name, r.N, at, n)
	return g.finishSplit(ctx, b.Name, b.ID, r.N)
}

// finishStuckSplit finishes the split of shard if its gateway seems to
// have died (it began more than splitStuck ago).
func (g *Gateway) finishStuckSplit(ctx context.Context, b *bucketRec, shard string) {
	vals, err := g.cfg.Store.OmapGet(ctx, shard, keySplit)
	var rec splitRec
	if err != nil || json.Unmarshal(vals[keySplit], &rec) != nil || g.now().Sub(rec.Start) < splitStuck {
		return
	}
	n := strings.TrimPrefix(shard, "s3i."+b.ID+".")
	for _, r := range b.Shards {
		if fmt.Sprint(r.N) == n {
			if err := g.finishSplit(ctx, b.Name, b.ID, r.N); err != nil {
				g.cfg.Logf("s3: bucket %s: finishing a split of %s: %v", b.Name, shard, err)
			}
			return
		}
	}
}

// finishSplit runs the split of shard nS from wherever it stands.
func (g *Gateway) finishSplit(ctx context.Context, bucket, id string, nS int) error {
	src := shardObject(id, nS)
	vals, err := g.cfg.Store.OmapGet(ctx, src, keyOpen, keySplit)
	if err != nil {
		return err
	}
	v, ok := vals[keyOpen]
	st := parseState(v, ok)
	var rec splitRec
	if st.kind != stateSplit && st.kind != stateTrimming || json.Unmarshal(vals[keySplit], &rec) != nil {
		return nil // not splitting (any more)
	}
	dst := shardObject(id, rec.N)
	if st.kind == stateSplit {
		if err := g.copyMoved(ctx, src, dst, st.at); err != nil {
			return err
		}
		trimming := shardState{kind: stateTrimming, gen: st.gen, at: st.at}
		err := g.cfg.Store.OmapApply(ctx, src, Txn{If: []Cond{{Key: keyOpen, Value: st.encode()}}, Set: map[string][]byte{keyOpen: trimming.encode()}})
		if errors.Is(err, ErrPrecondition) {
			return g.finishSplit(ctx, bucket, id, nS) // another run moved on: from where it stands
		}
		if err != nil {
			return err
		}
		st = trimming
	}
	if err := g.openMoved(ctx, dst); err != nil {
		return err
	}
	if err := g.recordSplit(ctx, bucket, id, nS, st, rec.N); err != nil {
		return err
	}
	return g.trimMoved(ctx, src, dst, st)
}

// openMoved opens the new shard, unless it is open already (a write may
// have landed since).
func (g *Gateway) openMoved(ctx context.Context, dst string) error {
	err := g.cfg.Store.OmapApply(ctx, dst, Txn{Create: true, If: []Cond{{Key: keyOpen, Absent: true}}, Set: map[string][]byte{keyOpen: openValueOf(0)}})
	if errors.Is(err, ErrPrecondition) {
		return nil
	}
	return err
}

// copyMoved copies the keys of src from at on, their inline data, the
// multipart uploads of those keys and their parts into dst, each page guarded on dst not being
// open yet.
func (g *Gateway) copyMoved(ctx context.Context, src, dst, at string) error {
	if err := g.copyRange(ctx, src, dst, at, afterMarker); err != nil {
		return err
	}
	if err := g.copyRange(ctx, src, dst, inlineKey(at), prefixInline+afterMarker); err != nil {
		return err
	}
	ups, err := g.listAll(ctx, src, prefixUpload+at, prefixUpload+"\xff")
	if err != nil {
		return err
	}
	if err := g.copyKVs(ctx, dst, ups); err != nil {
		return err
	}
	for _, u := range ups {
		uid := u.Key[strings.LastIndexByte(u.Key, 0)+1:]
		if err := g.copyRange(ctx, src, dst, partPrefix(uid), partPrefix(uid)+"\xff"); err != nil {
			return err
		}
	}
	return nil
}

func (g *Gateway) copyRange(ctx context.Context, src, dst, from, to string) error {
	for start := from; ; {
		kvs, more, err := g.cfg.Store.OmapList(ctx, src, start, to, splitPage)
		if err != nil {
			return err
		}
		if err := g.copyKVs(ctx, dst, kvs); err != nil {
			return err
		}
		if !more || len(kvs) == 0 {
			return nil
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
}

func (g *Gateway) copyKVs(ctx context.Context, dst string, kvs []KV) error {
	for len(kvs) > 0 {
		page := kvs[:min(len(kvs), splitPage)]
		kvs = kvs[len(page):]
		set := make(map[string][]byte, len(page))
		for _, kv := range page {
			set[kv.Key] = kv.Value
		}
		err := g.cfg.Store.OmapApply(ctx, dst, Txn{Create: true, If: []Cond{{Key: keyOpen, Absent: true}}, Set: set})
		if errors.Is(err, ErrPrecondition) {
			return nil // opened by another gateway's run of this split: copied
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *Gateway) listAll(ctx context.Context, shard, from, to string) ([]KV, error) {
	var out []KV
	for start := from; ; {
		kvs, more, err := g.cfg.Store.OmapList(ctx, shard, start, to, 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, kvs...)
		if !more || len(kvs) == 0 {
			return out, nil
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
}

// recordSplit adds shard nT (from st.at) and nS's next generation to the
// bucket's record, unless a run of this split did already.
func (g *Gateway) recordSplit(ctx context.Context, bucket, id string, nS int, st shardState, nT int) error {
	for try := 0; try < maxCommitTries; try++ {
		g.buckets.drop(bucket)
		b, err := g.lookupBucket(ctx, bucket)
		if err != nil {
			return err
		}
		if b == nil || b.ID != id {
			return fmt.Errorf("bucket %s is gone", bucket)
		}
		if slices.ContainsFunc(b.Shards, func(r shardRange) bool { return r.N == nT }) {
			return nil
		}
		nb := *b
		nb.Shards = nil
		for _, r := range b.Shards {
			if r.N == nS {
				r.Gen = st.gen + 1
				nb.Shards = append(nb.Shards, r, shardRange{From: st.at, N: nT})
				continue
			}
			nb.Shards = append(nb.Shards, r)
		}
		raw, _ := json.Marshal(&nb)
		err = g.cfg.Store.OmapApply(ctx, registryObject, Txn{If: []Cond{{Key: bucket, Value: b.raw}}, Set: map[string][]byte{bucket: raw}})
		if !errors.Is(err, ErrPrecondition) {
			return err
		}
	}
	return ErrSlowDown.with("The bucket record keeps changing; retry.")
}

// trimMoved removes from src what moved to dst, then opens src at its
// next generation.
func (g *Gateway) trimMoved(ctx context.Context, src, dst string, st shardState) error {
	guard := []Cond{{Key: keyOpen, Value: st.encode()}}
	steps := []Txn{
		{If: guard, RmFrom: st.at, RmTo: afterMarker}, // every key from at: keys are UTF-8, without 0xFF
		{If: guard, RmFrom: inlineKey(st.at), RmTo: prefixInline + afterMarker},
		{If: guard, RmFrom: prefixUpload + st.at, RmTo: prefixUpload + "\xff"},
	}
	ups, err := g.listAll(ctx, dst, prefixUpload, prefixUpload+"\xff")
	if err != nil {
		return err
	}
	for _, u := range ups {
		uid := u.Key[strings.LastIndexByte(u.Key, 0)+1:]
		steps = append(steps, Txn{If: guard, RmFrom: partPrefix(uid), RmTo: partPrefix(uid) + "\xff"})
	}
	steps = append(steps, Txn{If: guard, Rm: []string{keySplit},
		Set: map[string][]byte{keyOpen: openValueOf(st.gen + 1)}})
	for _, t := range steps {
		err := g.cfg.Store.OmapApply(ctx, src, t)
		if errors.Is(err, ErrPrecondition) {
			return nil // another run of this split finished it
		}
		if err != nil {
			return err
		}
	}
	return nil
}
