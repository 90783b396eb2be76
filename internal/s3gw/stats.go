package s3gw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// BucketStat is what `cairn s3 bucket ls|stat` show of a bucket.
type BucketStat struct {
	Name    string    `json:"name"`
	Owner   string    `json:"owner"`
	Created time.Time `json:"created"`
	Objects uint64    `json:"objects"`
	Bytes   uint64    `json:"bytes"`
	Uploads int       `json:"uploads_in_progress"`
	// GCPending counts records of replaced or deleted data the collector
	// has yet to delete (it waits for the grace).
	GCPending int `json:"gc_pending"`
	// IndexShards is how many key ranges the bucket's index is split in.
	IndexShards int `json:"index_shards"`
	// DataPool is the pool holding the bucket's data ("": the gateway's).
	DataPool string `json:"data_pool"`
}

// ListBucketStats returns every bucket of the pool with its counts. It
// reads each bucket's whole index, a page of 1,000 keys per round trip:
// an administrator's view, not something to run per request.
func ListBucketStats(ctx context.Context, st Store) ([]BucketStat, error) {
	var out []BucketStat
	start := "\x01"
	for len(out) < maxBuckets {
		kvs, more, err := st.OmapList(ctx, registryObject, start, "", 1000)
		if errors.Is(err, ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			b, err := decodeBucket(kv.Key, kv.Value)
			if err != nil {
				return nil, err
			}
			s, err := statBucket(ctx, st, b)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		if !more || len(kvs) == 0 {
			return out, nil
		}
		start = kvs[len(kvs)-1].Key + "\x00"
	}
	return out, nil
}

// StatBucket returns one bucket's counts; ErrNoSuchBucket if it does not
// exist.
func StatBucket(ctx context.Context, st Store, name string) (BucketStat, error) {
	vals, err := st.OmapGet(ctx, registryObject, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return BucketStat{}, err
	}
	raw, ok := vals[name]
	if !ok {
		return BucketStat{}, ErrNoSuchBucket.with("The specified bucket %q does not exist.", name)
	}
	b, err := decodeBucket(name, raw)
	if err != nil {
		return BucketStat{}, err
	}
	return statBucket(ctx, st, b)
}

func statBucket(ctx context.Context, st Store, b *bucketRec) (BucketStat, error) {
	s := BucketStat{Name: b.Name, Owner: b.Owner, Created: b.Created, IndexShards: len(b.Shards), DataPool: b.DataPool}
	for _, r := range b.Shards {
		shard := shardObject(b.ID, r.N)
		for start := ""; ; {
			kvs, more, err := st.OmapList(ctx, shard, start, "", 1000)
			if errors.Is(err, ErrNotFound) {
				break
			}
			if err != nil {
				return s, err
			}
			for _, kv := range kvs {
				switch {
				case strings.HasPrefix(kv.Key, prefixGC):
					s.GCPending++
				case strings.HasPrefix(kv.Key, prefixUpload):
					s.Uploads++
				case kv.Key != "" && kv.Key[0] != 0:
					e, err := decodeEntry(kv.Value)
					if err != nil {
						return s, fmt.Errorf("bucket %s, key %q: %w", b.Name, kv.Key, err)
					}
					s.Objects++
					s.Bytes += e.Size
				}
			}
			if !more || len(kvs) == 0 {
				break
			}
			start = kvs[len(kvs)-1].Key + "\x00"
		}
	}
	return s, nil
}
