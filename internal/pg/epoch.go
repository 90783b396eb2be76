package pg

import (
	"fmt"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Maps reach OSDs at different times, so two OSDs may each believe they
// lead a PG: the old primary on its old map, the new one on the new map.
// Two rules keep the old one from acknowledging a write the new one does
// not see:
//
//   - an OSD serves a message only at the map epoch it was sent with: it
//     refuses one from an older map (the sender must refresh and, if its
//     PG's interval ended, give up) and waits for its own map to catch up
//     with a newer one (Admit);
//   - peering lists every member it probes at its own epoch, so each
//     listed member refuses from then on every write of an older interval;
//     and every write needs every member of its write set, which holds
//     every OSD the record names complete, and peering hears from one of
//     them. A PG record is only ever replaced by one of the same or a newer
//     interval (Replaces).

// Admission is what an OSD does with a message stamped with its sender's
// map epoch.
type Admission int

const (
	Serve     Admission = iota // same map
	Refuse                     // the sender's map is older: it must refresh
	WaitForIt                  // the sender's map is newer: catch up, then serve
)

// Admit applies the rule to a message sent at epoch sent, received by an
// OSD whose map is at mine.
func Admit(sent, mine clustermap.Epoch) Admission {
	switch {
	case sent < mine:
		return Refuse
	case sent > mine:
		return WaitForIt
	}
	return Serve
}

// Replaces says whether a record written at epoch may replace cur, the
// stored one (nil if none): not when cur was written by a primary with a
// newer map, whose interval this writer's has ended.
func Replaces(cur *Record, epoch clustermap.Epoch) error {
	if cur != nil && cur.Epoch > epoch {
		return fmt.Errorf("a primary with map epoch %d recorded it since (this OSD has %d): waiting for the newer map", cur.Epoch, epoch)
	}
	return nil
}
