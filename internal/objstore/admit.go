package objstore

import (
	"fmt"
	"time"
)

// AdmitBelow admits a write of need bytes only if afterwards each of the
// store's filesystems stays below ratio of the space its reserve leaves
// for writes (total minus reserve: what clustermap.UsedRatio counts), and
// debits it as a write would until free space is sampled again, so that
// writers admitted together cannot overshoot between samples. Recovery
// asks it before copying data here, so that moving data never fills a
// disk. Otherwise it returns an error matching ErrNoSpace.
func (s *Store) AdmitBelow(need int64, ratio float64) error {
	reserve := max(s.opts.ReserveBytes, 0)
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	now := time.Now()
	for i, dir := range []string{s.opts.Dir, s.opts.MetaDir} {
		e := s.sampleSpace(i, dir, now)
		if !e.known || e.total <= 0 {
			continue
		}
		usable := e.total - reserve
		keep := reserve + int64((1-ratio)*float64(usable))
		if e.free-need < keep {
			used := float64(e.total-e.free) / float64(max(usable, 1))
			return fmt.Errorf("objstore: %s is %.0f%% full of what its %d MiB reserve leaves, the limit for this write is %.0f%%: %w",
				dir, used*100, reserve>>20, ratio*100, ErrNoSpace)
		}
	}
	for i := range s.space {
		s.space[i].free -= need
	}
	return nil
}
