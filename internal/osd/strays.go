package osd

import (
	"context"
	"slices"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
)

// Strays: after a rebalance or backfill, an OSD still holds copies of PGs
// that placement moved elsewhere. Once such a PG is whole on its new OSDs
// (its record names a full set of complete copies, and this OSD is not one
// of them), the old copy is deleted. Copies of deleted pools go too.

const strayInterval = 10 * time.Second

func (s *Server) strayLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(strayInterval):
		}
		if err := s.removeStrays(ctx); err != nil && ctx.Err() == nil {
			s.logf("%s: removing stray pg copies: %v", s.id, err)
		}
	}
}

func (s *Server) removeStrays(ctx context.Context) error {
	colls, err := s.store.Collections()
	if err != nil {
		return err
	}
	t := s.view.Table()
	m := t.Map()
	for _, coll := range colls {
		id, err := clustermap.ParsePGID(coll)
		if err != nil {
			// A shard collection goes only with its pool: erasure-coded
			// PGs do not move their shards yet.
			if sid, _, ok := parseShardColl(coll); ok {
				if _, ok := m.Pool(sid.Pool); !ok {
					if _, err := s.dropCollection(ctx, coll); err != nil {
						return err
					}
					s.logf("%s: removed shard collection %s: its pool was removed", s.id, coll)
				}
			}
			continue
		}
		pool, ok := m.Pool(id.Pool)
		why := "its pool was removed"
		if ok {
			if id.Seed >= pool.PGNum || slices.Contains(t.Place(pool, id), s.id) {
				continue
			}
			rec, _, err := s.meta.PGRecord(ctx, coll)
			if err != nil {
				return err
			}
			if rec == nil || slices.Contains(rec.Complete, s.id) || len(rec.Complete) < pool.Size {
				continue // still needed, or not yet whole elsewhere
			}
			why = "it is whole on " + pg.OSDList(rec.Complete)
		}
		n, err := s.dropCollection(ctx, coll)
		if err != nil {
			return err
		}
		s.pgMu.Lock()
		delete(s.pgs, id)
		s.pgMu.Unlock()
		s.logf("%s: removed stray copy of pg %s (%d objects): %s", s.id, id, n, why)
	}
	return nil
}

// dropCollection deletes every object of a collection, a batch at a time.
func (s *Server) dropCollection(ctx context.Context, coll string) (int, error) {
	n := 0
	for ctx.Err() == nil {
		names, _, err := s.store.List(coll, "", 256)
		if err != nil {
			return n, err
		}
		if len(names) == 0 {
			return n, nil
		}
		txn := &objstore.Txn{}
		for _, name := range names {
			txn.Delete(coll, name)
		}
		if err := s.apply(txn); err != nil {
			return n, err
		}
		n += len(names)
	}
	return n, ctx.Err()
}
