package placement

import (
	"math/rand/v2"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

func allShards(m *clustermap.Map, level string, n int, pgNum uint32) (place, acting [][]clustermap.OSDID) {
	v := buildShardView(m, "", level)
	for s := uint32(0); s < pgNum; s++ {
		p, a := v.shards(clustermap.PGID{Pool: 1, Seed: s}, n)
		place, acting = append(place, p), append(acting, a)
	}
	return place, acting
}

// Every position gets an OSD of its own failure domain while there are
// domains enough, the rest get NoOSD; the result depends only on the map.
func TestShardsDistinctDomains(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 300; iter++ {
		m := randomMap(rng)
		level := []string{clustermap.DomainOSD, clustermap.DomainHost, clustermap.DomainRack}[rng.IntN(3)]
		n := 1 + rng.IntN(8)
		domains := m.CountDomains(level, "")
		for s := uint32(0); s < 16; s++ {
			pg := clustermap.PGID{Pool: 1, Seed: s}
			place, acting := Shards(m, "", level, pg, n)
			again, _ := Shards(m.Clone(), "", level, pg, n)
			if !equalIDs(place, again) {
				t.Fatalf("two draws of %s differ: %v, %v", pg, place, again)
			}
			seen := map[string]bool{}
			filled := 0
			for i, o := range place {
				if o == NoOSD {
					if acting[i] != NoOSD {
						t.Fatalf("%s: position %d has no OSD but acts on %s", pg, i, acting[i])
					}
					continue
				}
				filled++
				osd := mustOSD(t, m, o)
				if !osd.In || osd.Weight <= 0 {
					t.Fatalf("%s: position %d on %s, which is out or weightless", pg, i, o)
				}
				d := m.DomainOf(osd, level)
				if seen[d] {
					t.Fatalf("%s: two positions in %s %s: %v", pg, level, d, place)
				}
				seen[d] = true
				if want := o; !osd.Up {
					want = NoOSD
					if acting[i] != want {
						t.Fatalf("%s: position %d on down %s acts as %s, want a hole", pg, i, o, acting[i])
					}
				} else if acting[i] != want {
					t.Fatalf("%s: position %d acting %s, placed %s", pg, i, acting[i], o)
				}
			}
			if filled != min(n, domains) {
				t.Fatalf("%s: %d of %d positions filled with %d %ss eligible: %v", pg, filled, n, domains, level, place)
			}
		}
	}
}

// A down OSD leaves a hole at its positions and changes nothing else.
func TestShardsDownLeavesAHole(t *testing.T) {
	m := buildMap(layout{hosts: 8, osdsPerHost: 3})
	before, _ := allShards(m, clustermap.DomainHost, 6, 2048)
	d := m.Clone()
	o, _ := d.OSD(7)
	o.Up = false
	place, acting := allShards(d, clustermap.DomainHost, 6, 2048)
	for s := range before {
		if !equalIDs(before[s], place[s]) {
			t.Fatalf("pg %d: a down OSD moved shards: %v → %v", s, before[s], place[s])
		}
		for i, id := range place[s] {
			if (id == 7) != (acting[s][i] == NoOSD) {
				t.Fatalf("pg %d position %d: placed %s, acting %s", s, i, id, acting[s][i])
			}
		}
	}
}

// shardMoves counts the positions whose OSD changed, and those that had
// to (their OSD left).
func shardMoves(before, after [][]clustermap.OSDID, gone func(clustermap.OSDID) bool) (moved, ideal int) {
	for s := range before {
		for i := range before[s] {
			if before[s][i] != after[s][i] {
				moved++
			}
			if gone(before[s][i]) {
				ideal++
			}
		}
	}
	return moved, ideal
}

// Marking an OSD or a host out moves the shards it held and almost
// nothing else: no other position shifts, as it would if positions were
// a list that closed up.
func TestShardMovement(t *testing.T) {
	m := buildMap(layout{hosts: 10, osdsPerHost: 4})
	const pgNum, n = 4096, 6 // 4+2
	before, _ := allShards(m, clustermap.DomainHost, n, pgNum)
	cases := []struct {
		what string
		gone func(o *clustermap.OSD) bool
	}{
		{"osd.13 out", func(o *clustermap.OSD) bool { return o.ID == 13 }},
		{"host-04 out", func(o *clustermap.OSD) bool { return o.Host == "host-04" }},
	}
	for _, c := range cases {
		after := m.Clone()
		out := map[clustermap.OSDID]bool{}
		for i := range after.OSDs {
			if c.gone(&after.OSDs[i]) {
				after.OSDs[i].In = false
				out[after.OSDs[i].ID] = true
			}
		}
		place, _ := allShards(after, clustermap.DomainHost, n, pgNum)
		moved, ideal := shardMoves(before, place, func(o clustermap.OSDID) bool { return out[o] })
		t.Logf("%s: %d shards moved, %d held by what went out", c.what, moved, ideal)
		if ideal == 0 || moved != ideal {
			t.Errorf("%s: %d shards moved for %d held by what went out", c.what, moved, ideal)
		}
	}
	// With an OSD out already, a second one out moves little more than its own.
	m2 := m.Clone()
	o, _ := m2.OSD(5)
	o.In = false
	before2, _ := allShards(m2, clustermap.DomainHost, n, pgNum)
	o, _ = m2.OSD(22)
	o.In = false
	after2, _ := allShards(m2, clustermap.DomainHost, n, pgNum)
	moved, ideal := shardMoves(before2, after2, func(o clustermap.OSDID) bool { return o == 22 })
	t.Logf("osd.22 out after osd.5: %d shards moved, %d held by osd.22", moved, ideal)
	if float64(moved) > 1.05*float64(ideal) {
		t.Errorf("osd.22 out after osd.5: %d shards moved for %d it held: more than 5%% over", moved, ideal)
	}
}

// A new host takes its share of positions. A position that took a domain
// the new host now wins frees it for a position that had drawn it in a
// later round, so some shards move between old hosts too: many when the
// positions fill most hosts (6 of 11), few when hosts are many.
func TestShardMovementAddHost(t *testing.T) {
	for _, c := range []struct {
		hosts int
		max   float64 // shards moved per shard moved to the new host
	}{{10, 1.6}, {40, 1.15}} {
		m := buildMap(layout{hosts: c.hosts, osdsPerHost: 4})
		before, _ := allShards(m, clustermap.DomainHost, 6, 4096)
		grown := m.Clone()
		grown.UpsertHost("host-new", "")
		for i := 0; i < 4; i++ {
			grown.UpsertOSD(clustermap.OSD{ID: grown.NextOSDID, Host: "host-new", Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true})
			grown.NextOSDID++
		}
		after, _ := allShards(grown, clustermap.DomainHost, 6, 4096)
		moved, onNew := 0, 0
		for s := range before {
			for i := range before[s] {
				if before[s][i] != after[s][i] {
					moved++
					if o, _ := grown.OSD(after[s][i]); o.Host == "host-new" {
						onNew++
					}
				}
			}
		}
		t.Logf("%d hosts, one added: %d shards moved, %d of them to it (%.3f)", c.hosts, moved, onNew, float64(moved)/float64(onNew))
		if onNew == 0 || float64(moved) > c.max*float64(onNew) {
			t.Errorf("%d hosts, one added: %d shards moved, only %d to the new host", c.hosts, moved, onNew)
		}
	}
}

// Shards spread over the OSDs by weight.
func TestShardsBalance(t *testing.T) {
	m := buildMap(layout{hosts: 10, osdsPerHost: 4})
	place, _ := allShards(m, clustermap.DomainHost, 6, 4096)
	count := map[clustermap.OSDID]int{}
	for _, p := range place {
		for _, o := range p {
			count[o]++
		}
	}
	mean := float64(4096*6) / float64(len(m.OSDs))
	for id, c := range count {
		if f := float64(c) / mean; f < 0.85 || f > 1.15 {
			t.Errorf("%s holds %d shards, %.2f of the mean %.0f", id, c, f, mean)
		}
	}
}

// Golden shard placements: a failure means the frozen draw changed and
// every shard of every erasure-coded PG would move.
func TestShardsGolden(t *testing.T) {
	m := buildMap(layout{racks: 2, hosts: 8, osdsPerHost: 3, weight: func(h, i int) float64 { return float64(1 + (h+i)%2) }})
	o, _ := m.OSD(4)
	o.In = false
	want := [][]clustermap.OSDID{{13, 23, 2, 7, 9}, {23, 11, 20, 5, 1}, {23, 9, 12, 1, 5}, {11, 16, 13, 18, 5}, {13, 16, 11, 7, 20}, {7, 16, 3, 1, 23}}
	for s := uint32(0); s < 6; s++ {
		got, _ := Shards(m, "", clustermap.DomainHost, clustermap.PGID{Pool: 3, Seed: s}, 5)
		if !equalIDs(got, want[s]) {
			t.Errorf("pg 3.%x: Shards = %v, want %v (frozen format changed)", s, got, want[s])
		}
	}
}
