package osd

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
)

// Strays: after a rebalance or backfill, an OSD still holds copies of PGs
// that placement moved elsewhere. Once such a PG is whole on its new OSDs
// (its record names a full set of complete copies, and this OSD is not one
// of them), the old copy is deleted. Copies of deleted pools go too. The
// same holds for a position of an erasure-coded PG (its shard collection)
// that placement moved to another OSD: it goes once every position of
// the PG is complete, none of them here.

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
			if sid, pos, ok := parseShardColl(coll); ok {
				if err := s.removeStrayShards(ctx, sid, pos, coll); err != nil {
					return err
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
	return s.dropCollectionWhile(ctx, coll, func() bool { return true })
}

// dropCollectionWhile is dropCollection that stops, keeping what is left,
// once ok says no before a batch.
func (s *Server) dropCollectionWhile(ctx context.Context, coll string, ok func() bool) (int, error) {
	n := 0
	for ctx.Err() == nil {
		if !ok() {
			return n, fmt.Errorf("stopped removing %s after %d objects: it is placed here again", coll, n)
		}
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

// removeStrayShards deletes this OSD's shard collection coll, of position
// pos of PG id, if its pool is gone, or if placement put the position on
// another OSD and the PG's record names every position complete, this
// position on that OSD. Placement is checked again before each batch, so a
// position moved back here stops the deletion.
func (s *Server) removeStrayShards(ctx context.Context, id clustermap.PGID, pos int, coll string) error {
	placed := func() (bool, *clustermap.Pool) {
		t := s.view.Table()
		pool, ok := t.Map().Pool(id.Pool)
		if !ok {
			return false, nil
		}
		place, _ := t.Positions(pool, id)
		return id.Seed < pool.PGNum && pos < len(place) && place[pos] == s.id, pool
	}
	here, pool := placed()
	why := "its pool was removed"
	switch {
	case here:
		return nil
	case pool != nil:
		rec, _, err := s.meta.PGRecord(ctx, id.String())
		if err != nil {
			return err
		}
		if !wholeElsewhere(rec, pool, pos, s.id) {
			return nil
		}
		why = fmt.Sprintf("position %d is on %s, and every position of the pg is complete", pos, rec.Positions[pos])
	}
	n, err := s.dropCollectionWhile(ctx, coll, func() bool { here, _ := placed(); return !here })
	if err != nil {
		return err
	}
	s.logf("%s: removed stray shard collection %s (%d objects): %s", s.id, coll, n, why)
	return nil
}

// wholeElsewhere says whether rec names every position of an
// erasure-coded PG of pool complete, position pos on an OSD other than
// self.
func wholeElsewhere(rec *pg.Record, pool *clustermap.Pool, pos int, self clustermap.OSDID) bool {
	if rec == nil || len(rec.Positions) != pool.Size || pos >= len(rec.Positions) || rec.Positions[pos] == self {
		return false
	}
	for _, o := range rec.Positions {
		if o == placement.NoOSD || !slices.Contains(rec.Complete, o) {
			return false
		}
	}
	return true
}
