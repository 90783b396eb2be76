package health

import (
	"sort"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/report"
)

// DFRow is one OSD's line of `cairn osd df`: its disk's usage and the
// small writes it holds in its commit log that have not reached the data
// disk yet, with the rate they drain at.
type DFRow struct {
	ID       int     `json:"id"`
	Host     string  `json:"host"`
	Class    string  `json:"class"`
	Up       bool    `json:"up"`
	Size     int64   `json:"size_bytes"`
	Used     int64   `json:"used_bytes"`
	Avail    int64   `json:"avail_bytes"`
	UsedPct  float64 `json:"used_percent"`
	Objects  int64   `json:"objects"`
	Unsynced int64   `json:"unsynced_bytes"`
	SyncRate int64   `json:"sync_rate"`     // bytes a second, 0 until measured
	DrainSec float64 `json:"drain_seconds"` // Unsynced at SyncRate
	// The write-back area: its size (0: none), the bytes in it not yet on
	// the data disk, and the rate the destager moves them (0 until measured).
	WritebackArea  int64   `json:"writeback_area_bytes"`
	WritebackDirty int64   `json:"writeback_dirty_bytes"`
	DestageRate    int64   `json:"destage_rate"`
	DestageSec     float64 `json:"destage_seconds"` // WritebackDirty at DestageRate
	WritebackOff   bool    `json:"writeback_off"`   // turned off: draining, no new writes
	// The read cache on flash: its size (0: none), the bytes it holds, and
	// the share of lookups it answered since the OSD started.
	FlashCacheSize    int64   `json:"flash_cache_bytes"`
	FlashCacheUsed    int64   `json:"flash_cache_used_bytes"`
	FlashCacheHitRate float64 `json:"flash_cache_hit_rate"`
	Reported          bool    `json:"reported"` // false: the OSD published no usage yet
}

// DF lists every OSD of m, by ID, with what it last published.
func DF(m *clustermap.Map, stats map[clustermap.OSDID]report.OSDStats) []DFRow {
	rows := make([]DFRow, 0, len(m.OSDs))
	for _, o := range m.OSDs {
		r := DFRow{ID: int(o.ID), Host: o.Host, Class: string(o.Class), Up: o.Up}
		if s, ok := stats[o.ID]; ok {
			r.Reported = true
			r.Size, r.Used, r.Avail, r.Objects = s.TotalBytes, s.UsedBytes, s.FreeBytes, s.Objects
			if s.TotalBytes > 0 {
				r.UsedPct = 100 * float64(s.UsedBytes) / float64(s.TotalBytes)
			}
			r.Unsynced, r.SyncRate, r.DrainSec = s.Unsynced, s.SyncRate, s.DrainSeconds()
			r.WritebackArea, r.WritebackDirty, r.DestageRate = s.WritebackArea, s.WritebackDirty, s.DestageRate
			r.WritebackOff, r.DestageSec = s.WritebackOff, s.DestageSeconds()
			fc := s.FlashCache
			r.FlashCacheSize, r.FlashCacheUsed = fc.Size, fc.Used
			if fc.Hits+fc.Misses > 0 {
				r.FlashCacheHitRate = float64(fc.Hits) / float64(fc.Hits+fc.Misses)
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	return rows
}
