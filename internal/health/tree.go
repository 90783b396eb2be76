package health

import (
	"sort"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// TreeRow is one line of `cairn osd tree` and of the dashboard's OSD tree.
type TreeRow struct {
	Type   string  `json:"type"` // root, rack, host, osd
	Name   string  `json:"name"`
	ID     *int    `json:"id,omitempty"`
	Class  string  `json:"class,omitempty"`
	Weight float64 `json:"weight"`
	Status string  `json:"status,omitempty"` // up/down
	In     *bool   `json:"in,omitempty"`
	Addr   string  `json:"addr,omitempty"`
	Flash  string  `json:"flash,omitempty"` // the OSD's shared meta device
	Depth  int     `json:"depth"`
}

// Tree lays out root → rack → host → osd with summed weights.
func Tree(m *clustermap.Map) []TreeRow {
	racks := map[string][]string{}
	for _, h := range m.Hosts {
		racks[h.Rack] = append(racks[h.Rack], h.Name)
	}
	byHost := map[string][]clustermap.OSD{}
	for _, o := range m.OSDs {
		byHost[o.Host] = append(byHost[o.Host], o)
	}
	hostWeight := func(h string) (w float64) {
		for _, o := range byHost[h] {
			if o.In {
				w += o.Weight
			}
		}
		return w
	}
	rackNames := make([]string, 0, len(racks))
	var total float64
	for r, hs := range racks {
		rackNames = append(rackNames, r)
		for _, h := range hs {
			total += hostWeight(h)
		}
	}
	sort.Strings(rackNames)
	rows := []TreeRow{{Type: "root", Name: "default", Weight: total}}
	for _, r := range rackNames {
		var rw float64
		for _, h := range racks[r] {
			rw += hostWeight(h)
		}
		rows = append(rows, TreeRow{Type: "rack", Name: r, Weight: rw, Depth: 1})
		for _, h := range racks[r] {
			rows = append(rows, TreeRow{Type: "host", Name: h, Weight: hostWeight(h), Depth: 2})
			for _, o := range byHost[h] {
				id, in := int(o.ID), o.In
				status := "down"
				if o.Up {
					status = "up"
				}
				rows = append(rows, TreeRow{Type: "osd", Name: o.ID.String(), ID: &id, Class: string(o.Class), Weight: o.Weight, Status: status, In: &in, Addr: o.Addr, Flash: o.Flash, Depth: 3})
			}
		}
	}
	return rows
}
