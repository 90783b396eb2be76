package osd

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
)

// A stray position goes only once the record names every position of the
// PG complete, the position itself on another OSD.
func TestWholeElsewhere(t *testing.T) {
	pool := &clustermap.Pool{Size: 3}
	const self = clustermap.OSDID(1)
	rec := func(pos []clustermap.OSDID, complete ...clustermap.OSDID) *pg.Record {
		return &pg.Record{Positions: pos, Complete: complete}
	}
	ids := func(o ...clustermap.OSDID) []clustermap.OSDID { return o }
	for _, c := range []struct {
		name string
		rec  *pg.Record
		pos  int
		want bool
	}{
		{"moved, every position complete", rec(ids(0, 2, 4), 0, 2, 4), 0, true},
		{"no record", nil, 0, false},
		{"the record still puts it here", rec(ids(1, 2, 4), 1, 2, 4), 0, false},
		{"the new OSD not complete yet", rec(ids(0, 2, 4), 2, 4), 0, false},
		{"another position not complete", rec(ids(0, 2, 4), 0, 2), 0, false},
		{"a hole", rec(ids(0, placement.NoOSD, 4), 0, 4), 0, false},
		{"a record of another size", rec(ids(0, 2), 0, 2), 0, false},
		{"moved from position 2 to 0 of the same pg", rec(ids(1, 2, 4), 1, 2, 4), 2, true},
	} {
		if got := wholeElsewhere(c.rec, pool, c.pos, self); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
