package osd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/objstore"
)

// Space: an OSD measures how full it is the way its store refuses writes
// (objstore keeps a reserve free on the data and the meta filesystem), and
// keeps two flags in the map true to it: BackfillFull, which stops recovery
// and backfill from copying data to it, and Full, which stops new writes.
// Status reads the same ratio from the OSD's published stats.

// usedRatio is the fuller of the store's two filesystems, as
// clustermap.UsedRatio counts.
func usedRatio(u objstore.Usage) float64 {
	return max(clustermap.UsedRatio(u.TotalBytes, u.FreeBytes, u.ReserveBytes),
		clustermap.UsedRatio(u.MetaTotalBytes, u.MetaFreeBytes, u.ReserveBytes))
}

// flagFor returns a threshold flag's new value: set at mark, cleared only
// FullHysteresis below it, so it does not flap.
func flagFor(cur bool, ratio, mark float64) bool {
	if cur {
		return ratio >= mark-clustermap.FullHysteresis
	}
	return ratio >= mark
}

// watchFull keeps this OSD's full and backfill-full flags in the map true
// to its disk usage, so that primaries stop sending it new data, and
// recovery stops copying to it, before the store refuses writes.
func (s *Server) watchFull(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		u, err := s.store.Usage()
		if err != nil || u.TotalBytes <= 0 {
			continue
		}
		ratio := usedRatio(u)
		o, ok := s.view.Map().OSD(s.id)
		if !ok {
			continue
		}
		full, bfull := flagFor(o.Full, ratio, clustermap.FullRatio), flagFor(o.BackfillFull, ratio, clustermap.BackfillFullRatio)
		if time.Since(time.Unix(0, s.backfillRefused.Load())) < 2*time.Second {
			// A copy that would have crossed the mark was refused: just
			// below it is backfill-full too.
			bfull = bfull || flagFor(true, ratio, clustermap.BackfillFullRatio)
		}
		if full == o.Full && bfull == o.BackfillFull {
			continue
		}
		_, err = s.meta.Update(ctx, func(m *clustermap.Map) error {
			o, ok := m.OSD(s.id)
			if !ok || o.Full == full && o.BackfillFull == bfull {
				return meta.ErrNoChange
			}
			o.Full, o.BackfillFull = full, bfull
			return nil
		})
		if err == nil {
			s.logf("%s: disk %.1f%% used (of what its %s reserve leaves): %s", s.id, ratio*100, sizeText(u.ReserveBytes), fullText(full, bfull))
		}
	}
}

func fullText(full, bfull bool) string {
	switch {
	case full:
		return "marked full (new writes refused)"
	case bfull:
		return "marked backfill-full (recovery and backfill stop copying data here)"
	}
	return "no longer full"
}

func sizeText(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// errTooFull is recovery's reason to wait: the target is backfill-full.
// It matches objstore.ErrNoSpace.
type errTooFull struct{ osd clustermap.OSDID }

func (e errTooFull) Is(target error) bool { return target == objstore.ErrNoSpace }

func (e errTooFull) Error() string {
	return fmt.Sprintf("%s is over %.0f%% full: copies to it wait until data is deleted there, OSDs are added, or it is marked out",
		e.osd, clustermap.BackfillFullRatio*100)
}

// backfillFull reports whether the newest map says recovery must not copy
// data to osd.
func (s *Server) backfillFull(osd clustermap.OSDID) bool {
	o, ok := s.view.Map().OSD(osd)
	return ok && (o.BackfillFull || o.Full)
}

// filesystemID names the filesystem holding dir, the same for every OSD
// sharing it on one machine, so status counts a shared disk once.
func filesystemID(dir string) string {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return ""
	}
	host, _ := os.ReadFile("/etc/machine-id")
	if len(host) == 0 {
		h, _ := os.Hostname()
		host = []byte(h)
	}
	return fmt.Sprintf("%s:%d", strings.TrimSpace(string(host)), st.Dev)
}

// admitBackground admits a background recovery copy of need bytes only
// while this OSD stays below its backfill-full mark. The map's flag stops
// primaries from sending; this stops the copies already on their way from
// several primaries at once, which a small fast disk takes faster than the
// flag travels.
func (s *Server) admitBackground(need int64) error {
	if err := s.store.AdmitBelow(need, clustermap.BackfillFullRatio); err != nil {
		s.backfillRefused.Store(time.Now().UnixNano())
		return fmt.Errorf("%w: %v", errTooFull{s.id}, err)
	}
	return nil
}
