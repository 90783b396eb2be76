package osd

import (
	"context"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
)

// followWriteback keeps the store's write-back area on or off as the
// operator set it in the map (`cairn osd writeback on|off`), which
// outlives the OSD's restarts where the store's own state does not.
func (s *Server) followWriteback(ctx context.Context) {
	if s.store.Writeback().AreaBytes <= 0 {
		return
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if o, ok := s.view.Map().OSD(s.id); ok && s.store.Writeback().On == o.WritebackOff {
			on := !o.WritebackOff
			if err := s.store.SetWriteback(on); err != nil {
				s.logf("%s: write-back area: %v", s.id, err)
			} else if on {
				s.logf("%s: write-back area on: small writes go to the flash again", s.id)
			} else {
				s.logf("%s: write-back area off: draining it to the data disk; no new writes go into it", s.id)
			}
			s.kickStats()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sequentialCutoff is how much of a sequential stream the write-back area
// takes before the rest goes past it (objstore.Options.SequentialCutoff): a
// disk that seeks takes a stream at its bandwidth once it is a megabyte
// long; a flash data disk gains little from the area beyond a few writes.
func sequentialCutoff(c clustermap.DeviceClass) int64 {
	if c == clustermap.ClassHDD {
		return objstore.DefaultSequentialCutoff
	}
	return 256 << 10
}
