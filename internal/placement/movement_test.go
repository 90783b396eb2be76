package placement

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

const movePGs = 4096

// Level osd: marking one of N OSDs out changes only the PGs that held it,
// and moves exactly its replicas. The replicas ranked after it shift up one
// slot (a primary or order change, no data), so about 2/N of the slots
// change for size 3.
func TestMovementOutOSDLevel(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, movePGs, clustermap.DomainOSD, "")
	before := placeAll(m, pool)
	const gone = clustermap.OSDID(9)
	after2 := m.Clone()
	o, _ := after2.OSD(gone)
	o.In = false
	after := placeAll(after2, pool)
	for s := range before {
		if !contains(before[s], gone) && !equalIDs(before[s], after[s]) {
			t.Fatalf("pg %d did not hold %s but moved: %v → %v", s, gone, before[s], after[s])
		}
		for _, id := range before[s] {
			if id != gone && !contains(after[s], id) {
				t.Fatalf("pg %d lost %s as well as %s: %v → %v", s, id, gone, before[s], after[s])
			}
		}
	}
	mv := compare(before, after)
	n := float64(len(m.OSDs))
	t.Logf("out 1 of %d OSDs: %v (1/N = %.2f%%)", len(m.OSDs), mv, 100/n)
	if mv.movedFrac() > 1.1/n || mv.slotFrac() > 2/n+0.01 {
		t.Errorf("out 1 of %.0f OSDs: %v; want replicas moved ≤ 1.1/N = %.2f%%, slots ≤ 2/N+1%% = %.2f%%", n, mv, 110/n, 100*(2/n+0.01))
	}
}

// Level osd: adding an OSD to N moves about 1/(N+1) of the replicas, all
// of them to the new OSD.
func TestMovementAddOSDLevel(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, movePGs, clustermap.DomainOSD, "")
	before := placeAll(m, pool)
	grown := m.Clone()
	added := grown.NextOSDID
	grown.UpsertOSD(clustermap.OSD{ID: added, Host: "host-02", Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true})
	after := placeAll(grown, pool)
	for s := range before {
		for _, id := range after[s] {
			if id != added && !contains(before[s], id) {
				t.Fatalf("pg %d moved data to %s, not only to the new %s: %v → %v", s, id, added, before[s], after[s])
			}
		}
	}
	mv := compare(before, after)
	n1 := float64(len(grown.OSDs))
	t.Logf("add 1 to %d OSDs: %v (1/(N+1) = %.2f%%)", len(m.OSDs), mv, 100/n1)
	if mv.movedFrac() > 1.1/n1 || mv.slotFrac() > 2/n1+0.01 {
		t.Errorf("add 1 to %.0f OSDs: %v; want replicas moved ≤ 1.1/(N+1) = %.2f%%, slots ≤ 2/(N+1)+1%% = %.2f%%", n1-1, mv, 110/n1, 100*(2/n1+0.01))
	}
}

// Straw2: changing one OSD's weight only moves data to (raise) or from
// (lower) that OSD.
func TestMovementReweightOSDLevel(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, movePGs, clustermap.DomainOSD, "")
	before := placeAll(m, pool)
	const changed = clustermap.OSDID(13)
	for _, w := range []float64{0.5, 2} {
		m2 := m.Clone()
		o, _ := m2.OSD(changed)
		o.Weight = w
		after := placeAll(m2, pool)
		for s := range before {
			b, a := before[s], after[s]
			if sameSet(b, a) {
				continue // reordered only: a primary change, no data moved
			}
			// Raised: it joined and pushed out one. Lowered: it left for one.
			gained, lost := minus(a, b), minus(b, a)
			ok := len(gained) == 1 && len(lost) == 1
			if w > 1 {
				ok = ok && gained[0] == changed
			} else {
				ok = ok && lost[0] == changed
			}
			if !ok {
				t.Fatalf("weight of %s 1→%v: pg %d gained %v and lost %v: %v → %v", changed, w, s, gained, lost, b, a)
			}
		}
		t.Logf("weight of %s 1→%v: %v", changed, w, compare(before, after))
	}
}

// Level host: taking one OSD of N out also lowers its host's weight, so a
// few PGs leave the other OSDs of that host (about 1.5/N moved in all);
// slots change about 3/N, as replicas ranked after a leaving host shift up.
func TestMovementOutHostLevel(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, movePGs, clustermap.DomainHost, "")
	before := placeAll(m, pool)
	m2 := m.Clone()
	o, _ := m2.OSD(9)
	o.In = false
	after := placeAll(m2, pool)
	mv := compare(before, after)
	n := float64(len(m.OSDs))
	t.Logf("host level, out 1 of %d OSDs: %v (1/N = %.2f%%)", len(m.OSDs), mv, 100/n)
	if mv.movedFrac() > 1.5/n+0.01 || mv.slotFrac() > 3/n+0.01 {
		t.Errorf("host level, out 1 of %.0f OSDs: %v; want replicas moved ≤ 1.5/N+1%% = %.2f%%, slots ≤ 3/N+1%% = %.2f%%", n, mv, 100*(1.5/n+0.01), 100*(3/n+0.01))
	}
	// Only host-02 lost weight, so only it may lose data.
	for s := range before {
		for _, id := range before[s] {
			if !contains(after[s], id) && mustOSD(t, m2, id).Host != "host-02" {
				t.Fatalf("pg %d lost %s, which is not on host-02 of osd.9: %v → %v", s, id, before[s], after[s])
			}
		}
	}
}

// Level host: adding an OSD to an existing host, or a new host.
func TestMovementAddHostLevel(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, movePGs, clustermap.DomainHost, "")
	before := placeAll(m, pool)

	grown := m.Clone()
	added := grown.NextOSDID
	grown.UpsertOSD(clustermap.OSD{ID: added, Host: "host-02", Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true})
	after := placeAll(grown, pool)
	mv := compare(before, after)
	toNew := 0
	for s := range before {
		for _, id := range after[s] {
			if !contains(before[s], id) {
				if id == added {
					toNew++
				} else if h := mustOSD(t, grown, id).Host; h != "host-02" {
					t.Errorf("pg %d: adding %s to host-02 moved data to %s on %s: %v → %v", s, added, id, h, before[s], after[s])
				}
			}
		}
	}
	n1 := float64(len(grown.OSDs))
	t.Logf("host level, add 1 OSD to host-02 (%d→%d OSDs): %v, %d of the moved replicas to the new OSD, the rest to its host (1/(N+1) = %.2f%%)",
		len(m.OSDs), len(grown.OSDs), mv, toNew, 100/n1)
	if mv.movedFrac() > 1.5/n1+0.01 || mv.slotFrac() > 3/n1+0.01 {
		t.Errorf("host level, add 1 OSD: %v; want replicas moved ≤ 1.5/(N+1)+1%% = %.2f%%, slots ≤ 3/(N+1)+1%% = %.2f%%", mv, 100*(1.5/n1+0.01), 100*(3/n1+0.01))
	}

	// A new host of one OSD: data only moves to it.
	grown = m.Clone()
	grown.UpsertHost("host-99", "")
	added = grown.NextOSDID
	grown.UpsertOSD(clustermap.OSD{ID: added, Host: "host-99", Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true})
	after = placeAll(grown, pool)
	for s := range before {
		for _, id := range after[s] {
			if id != added && !contains(before[s], id) {
				t.Fatalf("pg %d: adding host-99 moved data to %s: %v → %v", s, id, before[s], after[s])
			}
		}
	}
	t.Logf("host level, add a host of 1 OSD: %v", compare(before, after))
}

// Down is not out: Place does not change, Acting drops the OSD.
func TestDownDoesNotMove(t *testing.T) {
	m := buildMap(layout{hosts: 6, osdsPerHost: 4})
	pool := addPool(m, 3, 1024, clustermap.DomainHost, "")
	before := placeAll(m, pool)
	m2 := m.Clone()
	o, _ := m2.OSD(4)
	o.Up = false
	tab := NewTable(m2)
	for _, pg := range pgs(pool) {
		if p := tab.Place(pool, pg); !equalIDs(p, before[pg.Seed]) {
			t.Fatalf("pg %v: osd.4 down moved Place %v → %v", pg, before[pg.Seed], p)
		}
		a := tab.Acting(pool, pg)
		if contains(a, 4) || len(a) != len(before[pg.Seed])-b2i(contains(before[pg.Seed], 4)) {
			t.Fatalf("pg %v: place %v with osd.4 down gave acting %v", pg, before[pg.Seed], a)
		}
	}
}

func sameSet(a, b []clustermap.OSDID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, id := range a {
		if !contains(b, id) {
			return false
		}
	}
	return true
}

// minus returns the ids of a that are not in b.
func minus(a, b []clustermap.OSDID) []clustermap.OSDID {
	var out []clustermap.OSDID
	for _, id := range a {
		if !contains(b, id) {
			out = append(out, id)
		}
	}
	return out
}
