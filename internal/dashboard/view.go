package dashboard

import (
	"sort"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/health"
	"github.com/cairn-storage/cairn/internal/report"
)

// View is everything one page shows (and /api/status returns).
type View struct {
	Time     time.Time     `json:"time"`
	Status   health.Status `json:"status"`
	Capacity Capacity      `json:"capacity"`
	History  []Sample      `json:"history"`
	OSDs     []OSDRow      `json:"osds"`
	Pools    []PoolRow     `json:"pools"`
	Catalog  Catalog       `json:"catalog"`
}

// OSDRow is one line of the OSD tree, with the OSD's usage.
type OSDRow struct {
	health.TreeRow
	Used      int64   `json:"used_bytes,omitempty"`
	Total     int64   `json:"total_bytes,omitempty"`
	UsedRatio float64 `json:"used_ratio,omitempty"`
	PGs       int     `json:"primary_pgs,omitempty"` // PGs it is primary for
}

// PoolRow is one pool with its protection in words.
type PoolRow struct {
	Name       string `json:"name"`
	Protection string `json:"protection"`
	PGs        int    `json:"pgs"`
}

// Catalog is what the pools hold that an operator names: volumes and
// buckets, as the caller's lister last found them.
type Catalog struct {
	Volumes []Volume  `json:"volumes"`
	Buckets []Bucket  `json:"buckets"`
	Updated time.Time `json:"updated,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Volume is one block volume.
type Volume struct {
	Pool      string `json:"pool"`
	Name      string `json:"name"`
	Size      uint64 `json:"size_bytes"`
	Snapshots int    `json:"snapshots"`
}

// Bucket is one S3 bucket.
type Bucket struct {
	Pool    string `json:"pool"`
	Name    string `json:"name"`
	Owner   string `json:"owner"`
	Objects uint64 `json:"objects"`
	Bytes   uint64 `json:"bytes"`
}

// Build assembles the view from what etcd holds now, the sampled history
// and the last catalog. Pure, so it is tested without a cluster.
func Build(m *clustermap.Map, stats map[clustermap.OSDID]report.OSDStats, events []report.Event, samples []Sample, cat Catalog, now time.Time) View {
	st := health.Compute(m, stats, events, now)
	if st.Checks == nil {
		st.Checks = []health.Check{}
	}
	return View{
		Time:     now.UTC(),
		Status:   st,
		Capacity: Forecast(samples, st.Used, st.Total, now),
		History:  samples,
		OSDs:     osdRows(m, stats),
		Pools:    poolRows(m),
		Catalog:  cat,
	}
}

func osdRows(m *clustermap.Map, stats map[clustermap.OSDID]report.OSDStats) []OSDRow {
	tree := health.Tree(m)
	rows := make([]OSDRow, len(tree))
	for i, r := range tree {
		rows[i].TreeRow = r
		if r.ID == nil {
			continue
		}
		if s, ok := stats[clustermap.OSDID(*r.ID)]; ok {
			rows[i].Used, rows[i].Total, rows[i].UsedRatio = s.UsedBytes, s.TotalBytes, s.UsedRatio
			for _, n := range s.PGStates {
				rows[i].PGs += n
			}
		}
	}
	return rows
}

func poolRows(m *clustermap.Map) []PoolRow {
	rows := make([]PoolRow, 0, len(m.Pools))
	for _, p := range m.Pools {
		rows = append(rows, PoolRow{Name: p.Name, PGs: int(p.PGNum),
			Protection: p.Protection()})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}
