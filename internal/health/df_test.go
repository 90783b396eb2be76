package health

import (
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/report"
)

// TestDFAndDrain: osd df lists every OSD by ID, those that published
// nothing marked so; status adds up the unsynced writes and names the OSD
// slowest to drain its share.
func TestDFAndDrain(t *testing.T) {
	m := testMap()
	stats := map[clustermap.OSDID]report.OSDStats{
		4: {TotalBytes: 400, UsedBytes: 100, Objects: 7, Unsynced: 4 << 20, SyncRate: 1 << 20},
		1: {TotalBytes: 100, UsedBytes: 50, Unsynced: 1 << 20, SyncRate: 10 << 20},
		2: {TotalBytes: 100, Unsynced: 3 << 20}, // no rate measured yet
	}
	rows := DF(m, stats)
	if len(rows) != 6 {
		t.Fatalf("%d rows, want one per OSD (6)", len(rows))
	}
	for i, r := range rows {
		if r.ID != i {
			t.Fatalf("row %d is osd.%d: not in ID order", i, r.ID)
		}
	}
	if r := rows[4]; !r.Reported || r.UsedPct != 25 || r.Objects != 7 || r.DrainSec != 4 || r.Host != "h3" {
		t.Fatalf("osd.4: %+v", r)
	}
	if r := rows[2]; r.DrainSec != 0 || r.Unsynced != 3<<20 {
		t.Fatalf("osd.2, no rate yet: %+v (drain unknown, not 0 bytes)", r)
	}
	if rows[0].Reported || rows[3].Reported {
		t.Fatal("OSDs that published nothing show as reported")
	}
	st := Compute(m, stats, nil, time.Now())
	if st.Unsynced != 8<<20 || st.DrainOSD != "osd.4" || st.DrainSeconds != 4 {
		t.Fatalf("status: %d unsynced, longest drain %s %.1f s; want 8 MiB, osd.4 4 s", st.Unsynced, st.DrainOSD, st.DrainSeconds)
	}
}

// osd df carries each OSD's write-back area as it published it.
func TestDFWriteback(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		1: {TotalBytes: 100, WritebackArea: 8 << 30, WritebackDirty: 3 << 30, DestageRate: 50 << 20},
	}
	rows := DF(testMap(), stats)
	if r := rows[1]; r.WritebackArea != 8<<30 || r.WritebackDirty != 3<<30 || r.DestageRate != 50<<20 || r.DestageSec != 3*1024/50.0 {
		t.Fatalf("osd.1: %+v", r)
	}
	if r := rows[2]; r.WritebackArea != 0 || r.WritebackDirty != 0 {
		t.Fatalf("osd.2 has no area: %+v", r)
	}
	stats[2] = report.OSDStats{WritebackArea: 1 << 30, WritebackDirty: 1 << 20}
	if st := Compute(testMap(), stats, nil, time.Now()); st.WritebackDirty != 3<<30+1<<20 || st.WritebackArea != 9<<30 {
		t.Fatalf("status adds up %d dirty of %d", st.WritebackDirty, st.WritebackArea)
	}
	stats[2] = report.OSDStats{WritebackArea: 1 << 30, WritebackDirty: 1 << 30, DestageRate: 1 << 20}
	if st := Compute(testMap(), stats, nil, time.Now()); st.DestageOSD != "osd.2" || st.DestageSeconds != 1024 {
		t.Fatalf("longest destage: %s %.1f s; want osd.2, 1024 s", st.DestageOSD, st.DestageSeconds)
	}
}

// osd df carries each OSD's flash read cache and its hit share.
func TestDFFlashCache(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		1: {TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30, Used: 1 << 20, Hits: 3, Misses: 1}},
		2: {TotalBytes: 100},
	}
	rows := DF(testMap(), stats)
	if r := rows[1]; r.FlashCacheSize != 1<<30 || r.FlashCacheUsed != 1<<20 || r.FlashCacheHitRate != 0.75 {
		t.Fatalf("osd.1: %+v", r)
	}
	if r := rows[2]; r.FlashCacheSize != 0 || r.FlashCacheHitRate != 0 {
		t.Fatalf("osd.2 has no cache: %+v", r)
	}
}

// cairn status adds up the OSDs' flash read caches.
func TestStatusFlashCache(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		1: {TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30, Used: 1 << 20, Hits: 3, Misses: 1}},
		2: {TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30, Used: 2 << 20, Hits: 1, Misses: 5}},
	}
	st := Compute(testMap(), stats, nil, time.Now())
	if fc := st.FlashCache; fc.Size != 2<<30 || fc.Used != 3<<20 || fc.Hits != 4 || fc.Misses != 6 {
		t.Fatalf("status adds up %+v", fc)
	}
}

// An OSD whose flash read cache failed makes HEALTH_WARN, naming it and
// the failure.
func TestStatusFlashCacheFailed(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		1: {TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30}},
		2: {TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30, Failed: "read of /flash/flashcache: input/output error"}},
	}
	flashCheck := func() *Check {
		st := Compute(testMap(), stats, nil, time.Now())
		for i, c := range st.Checks {
			if c.Code == "OSD_FLASH_CACHE_FAILED" {
				if st.Health == OK {
					t.Fatal("a failed flash cache left the cluster HEALTH_OK")
				}
				return &st.Checks[i]
			}
		}
		return nil
	}
	c := flashCheck()
	if c == nil || c.Severity != Warn {
		t.Fatalf("no warning of a failed flash cache: %+v", c)
	}
	if len(c.Detail) != 1 || c.Detail[0] != "osd.2: read of /flash/flashcache: input/output error" {
		t.Fatalf("detail %q", c.Detail)
	}
	stats[2] = report.OSDStats{TotalBytes: 100, FlashCache: report.FlashCacheStats{Size: 1 << 30}}
	if c := flashCheck(); c != nil {
		t.Fatalf("a warning with every cache working: %+v", c)
	}
}
