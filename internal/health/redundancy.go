package health

// What each pool can lose: by design (its copies or its code) and now
// (the PG with the fewest copies or shards to spare), and how much user
// data still fits in it. A replicated PG's data is lost when its last
// copy goes, an erasure-coded PG's when fewer than K of its shards are
// left: "3 of 3 copies up" and "3 of 3 shards up" of a 2+1 pool are not
// the same risk, and status must not word them alike.

import (
	"fmt"
	"math"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/report"
)

// PoolRedundancy is one pool's line of `cairn status` and `cairn pool ls`.
type PoolRedundancy struct {
	ID            int    `json:"id"`
	Name          string `json:"name"`
	Kind          string `json:"kind"` // "3 copies" or "ec 2+1"
	FailureDomain string `json:"failure_domain"`
	// CanLose is how many failure domains the pool survives by design;
	// CanLoseNow how many more OSDs its PG with the least to spare
	// survives now (-1: some PG has too few up to be read), and
	// PGsAtNow how many of its PGs are at that.
	CanLose    int `json:"can_lose"`
	CanLoseNow int `json:"can_lose_now"`
	PGsAtNow   int `json:"pgs_at_now"`
	PGs        int `json:"pgs"`
	// UsablePct is the share of raw space that holds user data;
	// MaxAvail the user data that still fits before the first of the
	// pool's OSDs is full, as placement spreads data by weight (0: no
	// OSD of the pool reported its usage).
	UsablePct float64 `json:"usable_percent"`
	MaxAvail  int64   `json:"max_avail_bytes"`
}

// need is how many of a PG's copies or shards must be left to read it.
func need(p *clustermap.Pool) int {
	if p.Erasure() {
		return p.EC.K
	}
	return 1
}

// spare is how many of a PG's up OSDs may still fail before its data is
// lost; negative when it cannot be read now.
func spare(p *clustermap.Pool, up int) int { return max(up-need(p), -1) }

// newPoolRedundancy starts a pool's line, before its PGs are counted.
func newPoolRedundancy(m *clustermap.Map, p *clustermap.Pool, stats map[clustermap.OSDID]report.OSDStats) PoolRedundancy {
	kind := fmt.Sprintf("%d copies", p.Size)
	if p.Erasure() {
		kind = fmt.Sprintf("ec %d+%d", p.EC.K, p.EC.M)
	}
	return PoolRedundancy{ID: int(p.ID), Name: p.Name, Kind: kind, FailureDomain: p.FailureDomain,
		CanLose: p.Tolerates(), CanLoseNow: math.MaxInt, UsablePct: 100 * p.Usable(),
		MaxAvail: int64(float64(rawAvail(m, p, stats)) * p.Usable())}
}

// countPG folds one PG with up copies or shards into the pool's line.
func (r *PoolRedundancy) countPG(p *clustermap.Pool, up int) {
	r.PGs++
	switch s := spare(p, up); {
	case s < r.CanLoseNow:
		r.CanLoseNow, r.PGsAtNow = s, 1
	case s == r.CanLoseNow:
		r.PGsAtNow++
	}
}

// rawAvail is the raw space the pool's OSDs can still take before the
// first of them is full: placement gives each in OSD of the pool's class
// a share of the data by its weight, so the OSD with the least room for
// its share bounds them all (Ceph's MAX AVAIL reasons the same way).
func rawAvail(m *clustermap.Map, p *clustermap.Pool, stats map[clustermap.OSDID]report.OSDStats) int64 {
	var weight float64
	for _, o := range m.OSDs {
		if eligible(&o, p) {
			weight += o.Weight
		}
	}
	best := math.Inf(1)
	for _, o := range m.OSDs {
		s, ok := stats[o.ID]
		if !eligible(&o, p) || !ok || s.TotalBytes <= 0 {
			continue
		}
		room := max(0, float64(s.FreeBytes)-float64(s.TotalBytes)*(1-fullRatio))
		best = min(best, room*weight/o.Weight)
	}
	if math.IsInf(best, 1) {
		return 0
	}
	return int64(best)
}

// eligible says whether placement may put the pool's data on o.
func eligible(o *clustermap.OSD, p *clustermap.Pool) bool {
	return o.In && o.Weight > 0 && (p.Class == "" || o.Class == p.Class)
}

// Now says in words what the pool can lose at this moment.
func (r PoolRedundancy) Now() string {
	switch {
	case r.PGs == 0:
		return "no pgs"
	case r.CanLoseNow < 0:
		return fmt.Sprintf("%d pg(s) unreadable until OSDs return", r.PGsAtNow)
	case r.CanLoseNow >= r.CanLose:
		return "full redundancy"
	}
	return fmt.Sprintf("%d of %d pg(s) can lose only %d more OSD(s)", r.PGsAtNow, r.PGs, r.CanLoseNow)
}

// Design says in words what the pool survives by design.
func (r PoolRedundancy) Design() string {
	s := fmt.Sprintf("can lose %d %s", r.CanLose, r.FailureDomain)
	if r.CanLose != 1 {
		s += "s"
	}
	return s
}
