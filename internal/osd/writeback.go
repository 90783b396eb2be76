package osd

import (
	"context"
	"time"
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
