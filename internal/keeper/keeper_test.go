package keeper

import (
	"slices"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Each case starts from osd.0 in one state and the lease present or not,
// and says what the keeper changes, if anything.
func TestDecide(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	const interval = 30 * time.Second
	longAgo, lately := now.Add(-interval), now.Add(-interval+time.Second)
	for _, tc := range []struct {
		name    string
		osd     clustermap.OSD // ID 0
		alive   bool
		want    clustermap.OSD // ignored when changes is nil
		changes []string
	}{
		{name: "up, lease gone: down",
			osd: clustermap.OSD{Up: true, In: true}, alive: false,
			want: clustermap.OSD{In: true, DownSince: now}, changes: []string{"osd.0 down"}},
		{name: "up with its lease: nothing",
			osd: clustermap.OSD{Up: true, In: true}, alive: true},
		{name: "down, lease back: up",
			osd: clustermap.OSD{In: true, DownSince: lately}, alive: true,
			want: clustermap.OSD{Up: true, In: true, UpSince: now}, changes: []string{"osd.0 up"}},
		{name: "down within the interval: stays in",
			osd: clustermap.OSD{In: true, DownSince: lately}, alive: false},
		{name: "down for the interval: auto-out",
			osd: clustermap.OSD{In: true, DownSince: longAgo}, alive: false,
			want: clustermap.OSD{DownSince: longAgo, AutoOut: true}, changes: []string{"osd.0 out (down for 30s)"}},
		{name: "down since it first registered: never auto-out",
			osd: clustermap.OSD{In: true}, alive: false},
		{name: "auto-out returns, the keeper sees it first: up and in",
			osd: clustermap.OSD{DownSince: longAgo, AutoOut: true}, alive: true,
			want: clustermap.OSD{Up: true, In: true, UpSince: now}, changes: []string{"osd.0 up", "osd.0 in"}},
		{name: "auto-out returns, marked itself up first: in",
			osd: clustermap.OSD{Up: true, UpSince: lately, AutoOut: true}, alive: true,
			want: clustermap.OSD{Up: true, In: true, UpSince: lately}, changes: []string{"osd.0 in (returned)"}},
		{name: "auto-out, still down: stays out",
			osd: clustermap.OSD{DownSince: longAgo, AutoOut: true}, alive: false},
		{name: "operator's out returns: up, stays out",
			osd: clustermap.OSD{DownSince: longAgo}, alive: true,
			want: clustermap.OSD{Up: true, UpSince: now}, changes: []string{"osd.0 up"}},
		{name: "operator's out, up: stays out",
			osd: clustermap.OSD{Up: true}, alive: true},
		{name: "operator's out, down long: nothing",
			osd: clustermap.OSD{DownSince: longAgo.Add(-time.Hour)}, alive: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &clustermap.Map{Epoch: 5, DownOutSeconds: int(interval / time.Second)}
			o := tc.osd
			o.Host, o.Weight = "h", 1
			m.OSDs = []clustermap.OSD{o}
			before := m.Clone()
			next, changes := Decide(m, map[clustermap.OSDID]bool{0: tc.alive}, now)
			if !slices.Equal(changes, tc.changes) {
				t.Fatalf("changes %q, want %q", changes, tc.changes)
			}
			if m.OSDs[0] != before.OSDs[0] {
				t.Errorf("Decide changed its input: %+v, was %+v", m.OSDs[0], before.OSDs[0])
			}
			if tc.changes == nil {
				if next != nil {
					t.Errorf("no change, but a map was returned: %+v", next.OSDs[0])
				}
				return
			}
			want := tc.want
			want.Host, want.Weight = "h", 1
			if next.OSDs[0] != want {
				t.Errorf("osd.0 becomes\n %+v, want\n %+v", next.OSDs[0], want)
			}
			if next.Epoch != m.Epoch {
				t.Errorf("Decide set the epoch to %d: the store numbers maps", next.Epoch)
			}
		})
	}
}

// Several OSDs change in one decision, in map order; an OSD missing from
// the leases counts as without one.
func TestDecideSeveral(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	m := &clustermap.Map{}
	for id := range 3 {
		m.OSDs = append(m.OSDs, clustermap.OSD{ID: clustermap.OSDID(id), Host: "h", Weight: 1, Up: id != 1, In: true, DownSince: now.Add(-time.Hour)})
	}
	next, changes := Decide(m, map[clustermap.OSDID]bool{1: true, 2: true}, now)
	want := []string{"osd.0 down", "osd.1 up"}
	if !slices.Equal(changes, want) {
		t.Fatalf("changes %q, want %q", changes, want)
	}
	if next.OSDs[0].Up || !next.OSDs[1].Up || !next.OSDs[2].Up {
		t.Errorf("up flags %v %v %v, want false true true", next.OSDs[0].Up, next.OSDs[1].Up, next.OSDs[2].Up)
	}
}
