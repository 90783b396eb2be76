package health

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

func treeTestMap() *clustermap.Map {
	m := &clustermap.Map{Epoch: 7, FSID: "f", NextPoolID: 2}
	for h := 0; h < 3; h++ {
		host := []string{"h1", "h2", "h3"}[h]
		m.UpsertHost(host, "")
		for j := 0; j < 2; j++ {
			m.UpsertOSD(clustermap.OSD{ID: clustermap.OSDID(h*2 + j), Host: host, Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true, Addr: "a"})
		}
	}
	m.Pools = []clustermap.Pool{{ID: 1, Name: "default", Size: 3, MinSize: 2, PGNum: 64, FailureDomain: clustermap.DomainHost}}
	return m
}

func TestTreeWeights(t *testing.T) {
	m := treeTestMap()
	o, _ := m.OSD(5)
	o.In = false
	rows := Tree(m)
	if rows[0].Type != "root" || rows[0].Weight != 5 {
		t.Fatalf("root weight %v, want 5 (one OSD out)", rows[0].Weight)
	}
	osds := 0
	for _, r := range rows {
		if r.Type == "osd" {
			osds++
		}
	}
	if osds != 6 {
		t.Fatalf("tree shows %d OSDs, want 6", osds)
	}
}
