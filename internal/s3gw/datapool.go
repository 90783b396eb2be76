package s3gw

import (
	"errors"
	"fmt"
	"sync"
)

// A bucket's data pool: the registry and the index shards always live in
// the gateway's own pool (Config.Store), which must keep omaps, so must be
// replicated; a bucket's data stripes live in the pool its record names
// (bucketRec.DataPool, "" for the gateway's own), which needs only
// whole-object puts, ranged reads and deletes, so may be erasure-coded,
// as RGW's placement targets split an index pool from a data pool. The
// record is written once, when the bucket is created with the gateway's
// Config.DataPool, so changing that setting moves no existing bucket: its
// stripes, its parts and its collector records keep pointing at the pool
// they were written to.

// dataLoc is where a bucket's stripes live: the bucket's id names them,
// pool holds them ("": the gateway's own pool).
type dataLoc struct {
	bucketID string
	pool     string
}

func (b *bucketRec) data() dataLoc { return dataLoc{b.ID, b.DataPool} }

// dataPools keeps the data pools the gateway opened, by name: a bucket
// record names its pool, and every PUT and GET of that bucket needs it.
type dataPools struct {
	mu sync.Mutex
	m  map[string]Store
}

// dataStore returns the Store of pool ("": the gateway's own), opening it
// with Config.DataStore the first time. A pool that does not exist is an
// InternalError naming it (errors.Is ErrNoPool too).
func (g *Gateway) dataStore(pool string) (Store, error) {
	if pool == "" {
		return g.cfg.Store, nil
	}
	g.pools.mu.Lock()
	defer g.pools.mu.Unlock()
	if s, ok := g.pools.m[pool]; ok {
		return s, nil
	}
	if g.cfg.DataStore == nil {
		return nil, g.noPool(pool, errors.New("this gateway was given no way to open data pools"))
	}
	s, err := g.cfg.DataStore(pool)
	if err != nil {
		return nil, g.noPool(pool, err)
	}
	if g.pools.m == nil {
		g.pools.m = map[string]Store{}
	}
	g.pools.m[pool] = s
	return s, nil
}

// dataErr turns the error of an operation on pool's data into what the
// client sees: a pool removed since it was opened is dropped from the
// cache (a pool made again under that name is opened anew) and named.
func (g *Gateway) dataErr(pool string, err error) error {
	if err == nil || !errors.Is(err, ErrNoPool) {
		return err
	}
	if pool != "" {
		g.pools.mu.Lock()
		delete(g.pools.m, pool)
		g.pools.mu.Unlock()
	}
	return g.noPool(pool, err)
}

// noPool is the error of a bucket whose data pool cannot be used, logged
// for the operator; the client sees an InternalError naming the pool.
func (g *Gateway) noPool(pool string, cause error) error {
	g.cfg.Logf("s3: data pool %q: %v", pool, cause)
	if errors.Is(cause, ErrNoPool) {
		e := ErrInternal.with("The pool %q that holds this bucket's data does not exist (was it removed?); an administrator must create it again (cairn pool ls lists the pools).", pool)
		return fmt.Errorf("%w: %w", e, ErrNoPool)
	}
	return ErrInternal.with("The pool %q that holds this bucket's data cannot be opened: %v", pool, cause)
}
