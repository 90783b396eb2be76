package pg

import (
	"slices"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// A position placement moved to a new OSD copies from the OSD the record
// last put there complete, and keeps that source over later peerings
// until it is complete itself.
func TestBackfillSources(t *testing.T) {
	ids := func(o ...clustermap.OSDID) []clustermap.OSDID { return o }
	for _, c := range []struct {
		name                string
		rec                 *Record
		positions, complete []clustermap.OSDID
		want                []clustermap.OSDID
	}{
		{"never recorded", nil, ids(0, 1, 2), nil, nil},
		{"nothing moved", &Record{Positions: ids(0, 1, 2), Complete: ids(0, 1, 2)}, ids(0, 1, 2), ids(0, 1, 2), nil},
		{"position 1 moved from 1 to 3", &Record{Positions: ids(0, 1, 2), Complete: ids(0, 1, 2)}, ids(0, 3, 2), ids(0, 2), ids(-1, 1, -1)},
		{"the old OSD was not complete", &Record{Positions: ids(0, 1, 2), Complete: ids(0, 2)}, ids(0, 3, 2), ids(0, 2), nil},
		{"the new OSD is complete already", &Record{Positions: ids(0, 1, 2), Complete: ids(0, 1, 2)}, ids(0, 3, 2), ids(0, 3, 2), nil},
		{"carried over a peering before the copy ended", &Record{Positions: ids(0, 3, 2), Complete: ids(0, 2), Sources: ids(-1, 1, -1)}, ids(0, 3, 2), ids(0, 2), ids(-1, 1, -1)},
		{"a hole keeps none", &Record{Positions: ids(0, 1, 2), Complete: ids(0, 1, 2)}, ids(0, -1, 2), ids(0, 2), nil},
		{"moved again: the newest complete holder", &Record{Positions: ids(0, 3, 2), Complete: ids(0, 3, 2), Sources: ids(-1, 1, -1)}, ids(0, 4, 2), ids(0, 2), ids(-1, 3, -1)},
		{"moved back to its source", &Record{Positions: ids(0, 3, 2), Complete: ids(0, 2), Sources: ids(-1, 1, -1)}, ids(0, 1, 2), ids(0, 2), nil},
	} {
		if got := BackfillSources(c.rec, c.positions, c.complete); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
