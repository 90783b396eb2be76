package objstore

// Space accounting: whether a write fits on the store's filesystems
// (checkSpace for every Apply, AdmitBelow for recovery's copies), from
// statfs samples debited by what was admitted since.

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

type spaceEntry struct {
	at    time.Time
	free  int64
	total int64
	known bool
}

// checkSpace refuses a write that would eat into the reserve. Free space is
// sampled at most every 100 ms and debited by what we admit in between.
// Every unlink of a data file makes it sample again, and before refusing it
// waits for the unlinks under way (remover): space a delete freed is never
// withheld from the writer after it.
func (s *Store) checkSpace(need int64, deleteOnly bool) error {
	if s.opts.ReserveBytes < 0 {
		return nil
	}
	err := s.trySpace(need, deleteOnly)
	if err != nil && s.rm.busy() {
		s.rm.drain()
		err = s.trySpace(need, deleteOnly)
	}
	return err
}

// spaceFreed makes the next checkSpace sample free space again: a data
// file was unlinked.
func (s *Store) spaceFreed() {
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	for i := range s.space {
		s.space[i].at = time.Time{}
	}
}

// trySpace is one check of checkSpace.
func (s *Store) trySpace(need int64, deleteOnly bool) error {
	reserve := s.opts.ReserveBytes
	if deleteOnly {
		reserve = 0
	}
	s.spaceMu.Lock()
	defer s.spaceMu.Unlock()
	now := time.Now()
	for i, dir := range []string{s.opts.Dir, s.opts.MetaDir} {
		e := s.sampleSpace(i, dir, now)
		if !e.known {
			continue
		}
		if e.free-need < reserve {
			return fmt.Errorf("objstore: osd disk full: %d bytes free on %s, need %d, reserve %d: %w", e.free, dir, need, reserve, ErrNoSpace)
		}
	}
	for i := range s.space {
		s.space[i].free -= need
	}
	return nil
}

// sampleSpace returns what is known of the free space of dir (the i-th of
// Dir and MetaDir), sampled again if the last sample is too old. The caller
// holds spaceMu.
func (s *Store) sampleSpace(i int, dir string, now time.Time) *spaceEntry {
	e := &s.space[i]
	if now.Sub(e.at) > spaceCacheValidity {
		du, err := s.fs.GetDiskUsage(dir)
		e.at = now
		e.known = err == nil
		e.free, e.total = int64(du.AvailBytes), int64(du.TotalBytes)
	}
	return e
}

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

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// Usage reports object counts and free space.
func (s *Store) Usage() (Usage, error) {
	u := Usage{Objects: s.objects.Load(), DataBytes: s.dataBytes.Load(), ReserveBytes: max(s.opts.ReserveBytes, 0)}
	if du, err := s.fs.GetDiskUsage(s.opts.Dir); err == nil {
		u.TotalBytes, u.FreeBytes = int64(du.TotalBytes), int64(du.AvailBytes)
	} else if !errors.Is(err, vfs.ErrUnsupported) {
		return u, err
	}
	if du, err := s.fs.GetDiskUsage(s.opts.MetaDir); err == nil {
		u.MetaTotalBytes, u.MetaFreeBytes = int64(du.TotalBytes), int64(du.AvailBytes)
	} else if !errors.Is(err, vfs.ErrUnsupported) {
		return u, err
	}
	return u, nil
}

// spaceCacheValidity is how long a statfs sample of free space is used;
// tests change it.
var spaceCacheValidity = 100 * time.Millisecond
