package osd

import (
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// A PG peered before a member went down and came up again must peer again
// even when the acting set reads the same: upHash tells the two apart, and
// nothing else changes it.
func TestUpHashSeesAMemberComeBack(t *testing.T) {
	m := &clustermap.Map{Epoch: 3}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		m.UpsertOSD(clustermap.OSD{ID: clustermap.OSDID(i), Host: "h", Up: true, In: true, UpSince: t0})
	}
	acting := []clustermap.OSDID{1, 2, 3}
	before := upHash(m, acting)
	other, _ := m.OSD(0)
	other.UpSince = t0.Add(time.Hour) // not a member
	m.Epoch++
	if upHash(m, acting) != before {
		t.Fatal("a change outside the acting set changed the hash")
	}
	o, _ := m.OSD(2)
	o.Up, o.DownSince = false, t0.Add(time.Minute)
	o.Up, o.UpSince, o.DownSince = true, t0.Add(2*time.Minute), time.Time{}
	if upHash(m, acting) == before {
		t.Fatal("osd.2 went down and up again, and the hash did not change")
	}
	if upHash(m, []clustermap.OSDID{2, 1, 3}) == upHash(m, acting) {
		t.Fatal("the hash does not depend on the members' order")
	}
}
