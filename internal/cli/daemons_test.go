package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/health"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/report"
)

// An OSD refusing a damaged index says how to replace it, with its id
// from --id or from its data directory; other errors pass unchanged.
func TestExplainIndexDamage(t *testing.T) {
	data := t.TempDir()
	damage := fmt.Errorf("osd.4: open store: %w", &objstore.IndexCorruptionError{Dir: data + "/meta", File: "000007.sst", Err: errors.New("checksum mismatch")})
	for _, tc := range []struct {
		flagID  int
		osdJSON string
		want    string
	}{
		{4, "", "cairn osd out 4"},
		{-1, `{"fsid":"x","osd_id":4}`, "cairn osd rm 4"},
		{-1, "", "cairn osd out ID"},
	} {
		os.Remove(filepath.Join(data, "osd.json"))
		if tc.osdJSON != "" {
			os.WriteFile(filepath.Join(data, "osd.json"), []byte(tc.osdJSON), 0o644)
		}
		err := explainIndexDamage(damage, tc.flagID, data, "")
		for _, w := range []string{tc.want, "000007.sst", "empty " + data, "other copies"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--id %d, osd.json %q: %q does not say %q", tc.flagID, tc.osdJSON, err, w)
			}
		}
		if !objstore.IsCorruption(err) {
			t.Errorf("the explained error lost its class: %v", err)
		}
	}
	other := errors.New("osd.4: listen: address in use")
	if got := explainIndexDamage(other, 4, data, ""); got != other {
		t.Errorf("an unrelated error changed: %v", got)
	}
}

// The WRITEBACK and DESTAGE cells of osd df: dirty over the area's size,
// "-" without an area; an area drained after it was turned off still
// shows what it holds.
func TestDFWritebackColumns(t *testing.T) {
	for _, tc := range []struct {
		r           health.DFRow
		wb, destage string
	}{
		{health.DFRow{}, "-", "-"},
		{health.DFRow{WritebackArea: 8 << 30, WritebackDirty: 1 << 30, DestageRate: 40 << 20}, humanBytes(1<<30) + "/" + humanBytes(8<<30), humanBytes(40<<20) + "/s"},
		{health.DFRow{WritebackArea: 8 << 30, WritebackDirty: 1 << 30, DestageRate: 40 << 20, DestageSec: 25.6}, humanBytes(1<<30) + "/" + humanBytes(8<<30), humanBytes(40<<20) + "/s, 25.6s to go"},
		{health.DFRow{WritebackDirty: 4096}, humanBytes(4096) + "/" + humanBytes(0), "-"},
	} {
		wb, destage := writebackColumns(tc.r)
		if wb != tc.wb || destage != tc.destage {
			t.Errorf("%+v: %q %q, want %q %q", tc.r, wb, destage, tc.wb, tc.destage)
		}
	}
	if line := dfLine(health.DFRow{Reported: true, WritebackArea: 1 << 20}); strings.Count(line, "\t") != strings.Count(dfHeader, "\t") {
		t.Errorf("a row has %d cells, the header %d", strings.Count(line, "\t"), strings.Count(dfHeader, "\t"))
	}
}

// The FLASH CACHE cell of osd df: held over size and the hit share, "-"
// without a cache.
func TestDFFlashCacheColumn(t *testing.T) {
	if got := flashCacheColumn(health.DFRow{}); got != "-" {
		t.Errorf("no cache: %q", got)
	}
	r := health.DFRow{FlashCacheSize: 16 << 30, FlashCacheUsed: 4 << 30, FlashCacheHitRate: 0.875}
	if got, want := flashCacheColumn(r), humanBytes(4<<30)+"/"+humanBytes(16<<30)+", 88% hits"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// cairn status adds a line for the flash read caches: what they hold of
// their size and the share of lookups they answered; none without one.
func TestStatusFlashCacheLine(t *testing.T) {
	var b strings.Builder
	printStatus(&b, health.Status{Health: "HEALTH_OK"})
	if strings.Contains(b.String(), "flash cache") {
		t.Fatalf("a cluster without flash caches shows one:\n%s", b.String())
	}
	b.Reset()
	printStatus(&b, health.Status{Health: "HEALTH_OK", FlashCache: report.FlashCacheStats{Size: 3 << 30, Used: 1 << 30, Hits: 3, Misses: 1}})
	want := "flash cache: " + humanBytes(1<<30) + " held of " + humanBytes(3<<30) + "; 75% of lookups hit"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("status lacks %q:\n%s", want, b.String())
	}
}
