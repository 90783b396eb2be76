package s3gw

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// bucketRec is a bucket's record in the registry (s3.buckets): its id,
// which names its index shards and data, its owner, its shard map, and
// the pool of its data (datapool.go).
type bucketRec struct {
	Name    string       `json:"-"`
	ID      string       `json:"id"`
	Owner   string       `json:"owner"`
	Created time.Time    `json:"created"`
	Shards  []shardRange `json:"shards"`
	// DataPool is the pool holding the bucket's data stripes; absent
	// (records written before buckets had one too): the gateway's pool.
	DataPool string `json:"data_pool,omitempty"`
	raw      []byte
}

// maxShards bounds a bucket record's shard list (10^8 keys in shards of
// 50,000 need 2,000).
const maxShards = 100000

// shardRange is one index shard: it holds the keys from From up to the
// next range's From, and is open at generation Gen (index.go).
type shardRange struct {
	From string `json:"from"`
	N    int    `json:"n"`
	Gen  int    `json:"gen,omitempty"`
}

func decodeBucket(name string, raw []byte) (*bucketRec, error) {
	b := &bucketRec{Name: name, raw: raw}
	if err := json.Unmarshal(raw, b); err != nil || b.ID == "" || len(b.Shards) == 0 || len(b.Shards) > maxShards || b.Shards[0].From != "" ||
		!slices.IsSortedFunc(b.Shards, func(x, y shardRange) int { return strings.Compare(x.From, y.From) }) {
		return nil, fmt.Errorf("s3: the registry record of bucket %q is damaged: %v", name, err)
	}
	return b, nil
}

// shard returns the index shard object that holds key.
func (b *bucketRec) shard(key string) string { return shardObject(b.ID, b.rangeOf(key).N) }

// rangeOf returns the shard range that holds key.
func (b *bucketRec) rangeOf(key string) shardRange { return b.Shards[b.rangeIndex(key)] }

// rangeIndex returns the index in Shards of the range that holds key
// (Shards is sorted by From, the first from "").
func (b *bucketRec) rangeIndex(key string) int {
	i := 0
	for j, r := range b.Shards[1:] {
		if key >= r.From {
			i = j + 1
		}
	}
	return i
}

// bucketCache keeps bucket records briefly: a record never changes while
// its bucket lives, and a request that finds its bucket's shard closed
// drops the cached record and looks again.
type bucketCache struct {
	mu sync.Mutex
	m  map[string]cachedBucket
}

type cachedBucket struct {
	rec *bucketRec
	at  time.Time
}

const bucketCacheTTL = 2 * time.Second

func (c *bucketCache) get(name string, now time.Time) *bucketRec {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[name]; ok && now.Sub(e.at) < bucketCacheTTL {
		return e.rec
	}
	return nil
}

func (c *bucketCache) put(b *bucketRec, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) > 10000 {
		c.m = map[string]cachedBucket{}
	}
	c.m[b.Name] = cachedBucket{b, now}
}

func (c *bucketCache) drop(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// lookupBucket returns the record of bucket name, or nil if there is none.
func (g *Gateway) lookupBucket(ctx context.Context, name string) (*bucketRec, error) {
	if b := g.buckets.get(name, g.now()); b != nil {
		return b, nil
	}
	vals, err := g.cfg.Store.OmapGet(ctx, registryObject, name)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	raw, ok := vals[name]
	if !ok {
		return nil, nil
	}
	b, err := decodeBucket(name, raw)
	if err != nil {
		return nil, err
	}
	g.buckets.put(b, g.now())
	return b, nil
}

// ownBucket returns the request's bucket if it exists and the request's
// user owns it: NoSuchBucket, else AccessDenied.
func (rq *request) ownBucket() (*bucketRec, error) {
	b, err := rq.g.lookupBucket(rq.ctx, rq.bucket)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, ErrNoSuchBucket.with("The specified bucket %q does not exist.", rq.bucket)
	}
	if b.Owner != rq.user {
		return nil, ErrAccessDenied
	}
	return b, nil
}

type createBucketConfig struct {
	XMLName  xml.Name `xml:"CreateBucketConfiguration"`
	Location string   `xml:"LocationConstraint"`
}

// createBucket makes the bucket's index shard (open) and then registers
// the bucket with a guard that the name is free; the loser of a race
// removes its shard. A crash between the two leaves one empty shard
// object with a random id, never a bucket half made.
func (rq *request) createBucket() error {
	g := rq.g
	if !validBucketName(rq.bucket) {
		return ErrInvalidBucketName.with("The specified bucket %q is not valid.", rq.bucket)
	}
	if rq.r.ContentLength != 0 {
		var cfg createBucketConfig
		if err := rq.readXML(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	b := &bucketRec{Name: rq.bucket, ID: newID(), Owner: rq.user, Created: g.now().UTC(), Shards: []shardRange{{From: "", N: 0}},
		DataPool: g.cfg.DataPool}
	if _, err := g.dataStore(b.DataPool); err != nil {
		return err // no bucket whose data could not be written
	}
	raw, _ := json.Marshal(b)
	shard := shardObject(b.ID, 0)
	if err := g.cfg.Store.OmapApply(rq.ctx, shard, Txn{Create: true, Set: map[string][]byte{keyOpen: openValue}}); err != nil {
		return err
	}
	err := g.cfg.Store.OmapApply(rq.ctx, registryObject, Txn{Create: true,
		If: []Cond{{Key: rq.bucket, Absent: true}}, Set: map[string][]byte{rq.bucket: raw}})
	if errors.Is(err, ErrPrecondition) && g.landed(rq.ctx, registryObject, rq.bucket, false, raw) {
		err = nil // ours (the record holds our random id): a resend failed on its own change
	}
	if errors.Is(err, ErrPrecondition) {
		g.cfg.Store.Delete(rq.ctx, shard)
		var pe *PreconditionError
		if errors.As(err, &pe) {
			if other, derr := decodeBucket(rq.bucket, pe.Value); derr == nil && other.Owner == rq.user {
				return ErrBucketAlreadyOwned
			}
		}
		return ErrBucketAlreadyExists
	}
	if err != nil {
		return err
	}
	rq.w.Header().Set("Location", "/"+rq.bucket)
	rq.w.WriteHeader(http.StatusOK)
	return nil
}

func (rq *request) headBucket() error {
	if _, err := rq.ownBucket(); err != nil {
		return err
	}
	rq.w.Header().Set("x-amz-bucket-region", rq.region())
	rq.w.WriteHeader(http.StatusOK)
	return nil
}

func (rq *request) region() string {
	if rq.g.cfg.Region != "" {
		return rq.g.cfg.Region
	}
	return "us-east-1"
}

func (rq *request) bucketLocation() error {
	if _, err := rq.ownBucket(); err != nil {
		return err
	}
	type loc struct {
		XMLName xml.Name `xml:"LocationConstraint"`
		NS      string   `xml:"xmlns,attr"`
		Value   string   `xml:",chardata"`
	}
	v := ""
	if r := rq.region(); r != "us-east-1" {
		v = r
	}
	return rq.writeXML(http.StatusOK, loc{NS: s3NS, Value: v})
}

// bucketVersioning answers GetBucketVersioning: a configuration without
// a Status, as S3 answers for a bucket whose versioning was never enabled
// (PUT ?versioning is NotImplemented, so none ever is).
func (rq *request) bucketVersioning() error {
	if _, err := rq.ownBucket(); err != nil {
		return err
	}
	type conf struct {
		XMLName xml.Name `xml:"VersioningConfiguration"`
		NS      string   `xml:"xmlns,attr"`
	}
	return rq.writeXML(http.StatusOK, conf{NS: s3NS})
}

// deleteBucket removes an empty bucket. It first closes every index shard
// (removes its open key, guarded on the generation the record names): from
// then on every commit into a shard fails its guard on that key, so no PUT
// can land after the emptiness check, and no shard can start a split.
// Then, if no shard holds an object, the registry entry goes (guarded on
// the record read) and a dead-bucket key tells the collector to reclaim
// the shards and whatever data they still name once the grace has passed;
// otherwise the shards are opened again and the answer is BucketNotEmpty.
func (rq *request) deleteBucket() error {
	g := rq.g
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	// The closing key names this delete, so that a resend of the close
	// that failed on its own change is told from another delete's.
	token := []byte(newID())
	closed, err := g.closeShards(rq.ctx, b, token)
	if err == nil {
		err = g.checkEmpty(rq.ctx, b)
	}
	if err != nil {
		g.reopenShards(rq.ctx, b, closed)
		return err
	}
	dead := deadRec{at: g.now(), pool: b.DataPool}
	for _, r := range b.Shards {
		dead.shards = append(dead.shards, r.N)
	}
	w := dead.encode()
	err = g.cfg.Store.OmapApply(rq.ctx, registryObject, Txn{If: []Cond{{Key: rq.bucket, Value: b.raw}},
		Rm: []string{rq.bucket}, Set: map[string][]byte{prefixDead + b.ID: w}})
	if errors.Is(err, ErrPrecondition) && g.landed(rq.ctx, registryObject, prefixDead+b.ID, false, w) {
		err = nil
	}
	g.buckets.drop(rq.bucket)
	if err != nil {
		return err
	}
	rq.w.WriteHeader(http.StatusNoContent)
	return nil
}

// closeShards closes b's shards in order; it returns those it closed.
// A shard splitting answers SlowDown (retry); one closed already
// NoSuchBucket.
func (g *Gateway) closeShards(ctx context.Context, b *bucketRec, token []byte) ([]shardRange, error) {
	var closed []shardRange
	for _, r := range b.Shards {
		shard := shardObject(b.ID, r.N)
		err := g.cfg.Store.OmapApply(ctx, shard, Txn{If: []Cond{openCond(r)}, Rm: []string{keyOpen},
			Set: map[string][]byte{keyClosing: token}})
		if errors.Is(err, ErrPrecondition) && g.landed(ctx, shard, keyClosing, false, token) {
			err = nil
		}
		var pe *PreconditionError
		switch {
		case err == nil:
			closed = append(closed, r)
			continue
		case errors.As(err, &pe) && pe.Exists:
			err = ErrSlowDown.with("The bucket's index is being split; retry the delete.")
		case errors.Is(err, ErrPrecondition) || errors.Is(err, ErrNotFound):
			err = ErrNoSuchBucket
		}
		g.buckets.drop(b.Name)
		return closed, err
	}
	return closed, nil
}

// checkEmpty answers BucketNotEmpty if any shard of b holds an object.
func (g *Gateway) checkEmpty(ctx context.Context, b *bucketRec) error {
	for _, r := range b.Shards {
		l, err := g.cfg.Store.OmapListDelim(ctx, shardObject(b.ID, r.N), "", "", "", 1)
		if err != nil {
			return err
		}
		if len(l.Entries) > 0 {
			return ErrBucketNotEmpty
		}
	}
	return nil
}

// reopenShards opens again the shards a failed delete closed.
func (g *Gateway) reopenShards(ctx context.Context, b *bucketRec, closed []shardRange) {
	for _, r := range closed {
		shard := shardObject(b.ID, r.N)
		if err := g.cfg.Store.OmapApply(ctx, shard, Txn{Set: map[string][]byte{keyOpen: openValueOf(r.Gen)}, Rm: []string{keyClosing}}); err != nil {
			g.cfg.Logf("s3: bucket %s: index shard %d stays closed after a failed delete: %v", b.Name, r.N, err)
		}
	}
}

type listBucketsResult struct {
	XMLName xml.Name    `xml:"ListAllMyBucketsResult"`
	NS      string      `xml:"xmlns,attr"`
	Owner   owner       `xml:"Owner"`
	Buckets []bucketXML `xml:"Buckets>Bucket"`
}

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

type bucketXML struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
}

// maxBuckets bounds a registry scan: far more than one user should own.
const maxBuckets = 100000

func (rq *request) listBuckets() error {
	res := listBucketsResult{NS: s3NS, Owner: owner{rq.user, rq.user}}
	err := forEachBucket(rq.ctx, rq.g.cfg.Store, func(b *bucketRec) {
		if b.Owner == rq.user {
			res.Buckets = append(res.Buckets, bucketXML{b.Name, isoTime(b.Created)})
		}
	})
	if err != nil {
		return err
	}
	return rq.writeXML(http.StatusOK, res)
}

// forEachBucket calls fn with every bucket of st's registry that decodes,
// at most maxBuckets, a page of 1,000 per round trip.
func forEachBucket(ctx context.Context, st Store, fn func(*bucketRec)) error {
	start := "\x01" // past the bookkeeping keys
	for n := 0; n < maxBuckets; {
		kvs, more, err := st.OmapList(ctx, registryObject, start, "", 1000)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			if b, err := decodeBucket(kv.Key, kv.Value); err == nil {
				fn(b)
			}
		}
		n += len(kvs)
		if !more || len(kvs) == 0 {
			return nil
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	return nil
}

// BucketPool is a bucket and the pool its data lives in ("": the pool
// of its registry).
type BucketPool struct{ Bucket, DataPool string }

// BucketPools lists the buckets of st's registry with their data pools,
// reading the registry alone: what `cairn pool rm` checks before it
// removes a pool.
func BucketPools(ctx context.Context, st Store) ([]BucketPool, error) {
	var out []BucketPool
	err := forEachBucket(ctx, st, func(b *bucketRec) { out = append(out, BucketPool{b.Name, b.DataPool}) })
	return out, err
}
