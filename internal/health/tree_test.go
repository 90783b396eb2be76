package health

import "testing"

func TestTreeWeights(t *testing.T) {
	m := testMap()
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
