package placement

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// flashMap is 4 hosts of 4 OSDs where, on every host, OSDs 0-1 keep their
// index on flash device "nvme0", OSD 2 alone on "nvme1" and OSD 3 on its
// data disk.
func flashMap() *clustermap.Map {
	m := buildMap(layout{hosts: 4, osdsPerHost: 4})
	for i := range m.OSDs {
		m.OSDs[i].Flash = []string{"nvme0", "nvme0", "nvme1", ""}[i%4]
	}
	return m
}

// No PG of a pool at level osd holds two OSDs behind one flash device,
// replicated or erasure-coded, while every OSD still gets data.
func TestFlashSharersNeverShareAPG(t *testing.T) {
	m := flashMap()
	rep := addPool(m, 3, 512, clustermap.DomainOSD, "")
	ec := addPool(m, 6, 512, clustermap.DomainOSD, "")
	ec.EC = &clustermap.ECProfile{K: 4, M: 2, StripeUnit: 16384}
	tab := NewTable(m)
	used := map[clustermap.OSDID]int{}
	for _, pool := range []*clustermap.Pool{rep, ec} {
		for pg := range pool.PGNum {
			id := clustermap.PGID{Pool: pool.ID, Seed: uint32(pg)}
			osds := tab.Place(pool, id)
			if len(osds) != pool.Size {
				t.Fatalf("%s pg %d: %d OSDs, want %d", pool.Name, pg, len(osds), pool.Size)
			}
			seen := map[string]clustermap.OSDID{}
			for _, o := range osds {
				used[o]++
				osd, _ := m.OSD(o)
				d := m.DomainOf(osd, clustermap.DomainOSD)
				if prev, ok := seen[d]; ok {
					t.Fatalf("%s pg %d: %s and %s share %s: %v", pool.Name, pg, prev, o, d, osds)
				}
				seen[d] = o
			}
		}
	}
	if len(used) != len(m.OSDs) {
		t.Fatalf("only %d of %d OSDs got data: %v", len(used), len(m.OSDs), used)
	}
	if got := m.CountDomains(clustermap.DomainOSD, ""); got != 12 {
		t.Fatalf("CountDomains(osd) = %d, want 12 (4 hosts × 3 devices)", got)
	}
}

// Naming the flash device of an OSD that shares it with no other OSD moves
// nothing; a second OSD joining it moves only PGs that held one of them.
func TestFlashNamingMovesOnlyItsOSDs(t *testing.T) {
	m := buildMap(layout{hosts: 3, osdsPerHost: 4})
	pool := addPool(m, 3, 1024, clustermap.DomainOSD, "")
	before := placeAll(m, pool)
	m.OSDs[0].Flash, m.OSDs[5].Flash = "nvme0", "nvme0" // different hosts
	for pg, osds := range placeAll(m, pool) {
		if !equalIDs(osds, before[pg]) {
			t.Fatalf("pg %d moved from %v to %v when lone devices were named", pg, before[pg], osds)
		}
	}
	m.OSDs[1].Flash = "nvme0" // OSD 0 and 1 now share host-00's nvme0
	moved := 0
	for pg, osds := range placeAll(m, pool) {
		if equalIDs(osds, before[pg]) {
			continue
		}
		moved++
		if !holdsAny(before[pg], 0, 1) && !holdsAny(osds, 0, 1) {
			t.Fatalf("pg %d moved from %v to %v without OSD 0 or 1", pg, before[pg], osds)
		}
	}
	if moved == 0 {
		t.Fatal("no PG moved although OSD 0 and 1 may no longer meet in one PG")
	}
}

func holdsAny(osds []clustermap.OSDID, ids ...clustermap.OSDID) bool {
	for _, o := range osds {
		for _, id := range ids {
			if o == id {
				return true
			}
		}
	}
	return false
}
