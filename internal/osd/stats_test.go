package osd

import (
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/report"
)

func TestSameStats(t *testing.T) {
	base := meta.OSDStats{TotalBytes: 100 << 30, UsedBytes: 40 << 30, FreeBytes: 60 << 30, UsedRatio: 0.4,
		Objects: 10, Updated: time.Unix(100, 0), PGStates: map[string]int{"active+clean": 5}}
	for _, c := range []struct {
		what string
		edit func(*meta.OSDStats)
		same bool
	}{
		{"only the time", func(s *meta.OSDStats) { s.Updated = s.Updated.Add(time.Minute) }, true},
		{"a little space", func(s *meta.OSDStats) { s.UsedBytes += 4 << 10; s.FreeBytes -= 4 << 10; s.UsedRatio += 1e-7 }, true},
		{"space past the slack", func(s *meta.OSDStats) { s.UsedBytes += 2 << 20; s.FreeBytes -= 2 << 20 }, false},
		{"space given back", func(s *meta.OSDStats) { s.UsedBytes -= 2 << 20 }, false},
		{"the meta device's ratio", func(s *meta.OSDStats) { s.UsedRatio = 0.5 }, false},
		{"an object", func(s *meta.OSDStats) { s.Objects++ }, false},
		{"a PG's state", func(s *meta.OSDStats) { s.PGStates = map[string]int{"active+clean": 4, "peering": 1} }, false},
		{"client IO", func(s *meta.OSDStats) { s.ClientIO = report.IOCounters{WriteOps: 1} }, false},
		{"the epoch", func(s *meta.OSDStats) { s.Epoch++ }, false},
	} {
		b := base
		b.PGStates = map[string]int{"active+clean": 5}
		c.edit(&b)
		if got := sameStats(base, b); got != c.same {
			t.Errorf("%s: sameStats %v, want %v", c.what, got, c.same)
		}
	}
}
