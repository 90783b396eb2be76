package osd

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/objstore"
)

// The index check reads the whole of this OSD's index (pebble's sstables)
// and verifies every block's checksum, once per deep-scrub interval: deep
// scrub compares the copies of objects, this finds damage in the index that
// lists them before a read or a restart trips on it. Damage is reported as
// an "index-corrupt" event, which status shows as HEALTH_ERR with what to
// do (the OSD's objects have other copies; it is replaced, not repaired).

// indexCheckLoop runs the check at a random point of the first interval,
// so OSDs started together do not all read their index at once, and then
// every interval.
func (s *Server) indexCheckLoop(ctx context.Context) {
	every := s.opts.DeepScrubInterval
	if every <= 0 {
		return
	}
	wait := time.Duration(rand.Int64N(int64(every)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = every
		start := time.Now()
		err := s.store.VerifyIndex(ctx)
		switch {
		case err == nil:
			s.logf("%s: index check: every block of the index verified in %v", s.id, time.Since(start).Round(time.Millisecond))
		case ctx.Err() != nil:
			return
		case objstore.IsCorruption(err):
			s.logf("%s: index check: %v", s.id, err)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := s.meta.AddReport(rctx, meta.Report{Kind: "index-corrupt", OSD: s.id, Detail: err.Error(), Time: time.Now().UTC()}); err != nil {
				s.logf("%s: could not report the damaged index: %v", s.id, err)
			}
			cancel()
		default:
			s.logf("%s: index check could not run: %v", s.id, err)
		}
	}
}
