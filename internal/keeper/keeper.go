package keeper

import (
	"fmt"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Decide marks OSDs up or down to match the live leases in alive, and out
// when they stayed down at least the map's down-out interval by now; an OSD
// marked out that way is marked in again when it returns, whether this sees
// it return or it marked itself up first. It returns a changed copy of m
// and what changed, one entry per change ("osd.3 down"), or nil and no
// entries when m is already true to the leases. m itself is not changed.
func Decide(m *clustermap.Map, alive map[clustermap.OSDID]bool, now time.Time) (*clustermap.Map, []string) {
	next := m.Clone()
	var changes []string
	for i := range next.OSDs {
		o := &next.OSDs[i]
		switch {
		case o.Up && !alive[o.ID]:
			o.Up = false
			o.DownSince = now
			changes = append(changes, o.ID.String()+" down")
		case !o.Up && alive[o.ID]:
			o.Up = true
			o.UpSince = now
			o.DownSince = time.Time{}
			changes = append(changes, o.ID.String()+" up")
			if o.AutoOut {
				// Marked out only because it was down: take it back.
				o.In, o.AutoOut = true, false
				changes = append(changes, o.ID.String()+" in")
			}
		case o.Up && alive[o.ID] && o.AutoOut && !o.In:
			// Back, but it marked itself up before this saw it down.
			o.In, o.AutoOut = true, false
			changes = append(changes, o.ID.String()+" in (returned)")
		case !o.Up && o.In && !o.DownSince.IsZero() && now.Sub(o.DownSince) >= next.DownOutInterval():
			o.In, o.AutoOut = false, true
			changes = append(changes, fmt.Sprintf("%s out (down for %s)", o.ID, now.Sub(o.DownSince).Round(time.Second)))
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	return next, changes
}
