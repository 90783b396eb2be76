package osd

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// selfWhole: this OSD's copy holds every object only when the record
// names it complete and it is missing none (a delete of an object with
// its history waits for that on an erasure-coded PG).
func TestSelfWhole(t *testing.T) {
	p := &pgState{}
	p.prim.Epoch = 3
	p.prim.Complete = []clustermap.OSDID{0, 1, 2}
	if !p.selfWhole(0) {
		t.Fatal("a complete member missing nothing is not whole")
	}
	p.markMissing(0, "o", 3)
	if p.selfWhole(0) {
		t.Fatal("a member missing an object is whole")
	}
	if !p.selfWhole(1) {
		t.Fatal("another member's missing object made this one not whole")
	}
	p.clearMissingAll("o", 3)
	p.prim.Complete = []clustermap.OSDID{1, 2}
	if p.selfWhole(0) {
		t.Fatal("a member the record does not name complete (backfilling) is whole")
	}
}
