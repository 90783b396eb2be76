package health

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/report"
)

// Health levels, worst last.
const (
	OK   = "HEALTH_OK"
	Warn = "HEALTH_WARN"
	Err  = "HEALTH_ERR"
)

// Usage thresholds of an OSD's disk.
const (
	nearFullRatio     = clustermap.NearFullRatio
	backfillFullRatio = clustermap.BackfillFullRatio
	fullRatio         = clustermap.FullRatio
)

// Check is one health finding in plain words.
type Check struct {
	Code     string   `json:"code"`
	Severity string   `json:"severity"`
	Summary  string   `json:"summary"`
	Detail   []string `json:"detail,omitempty"`
}

// Status is what `cairn status` shows.
type Status struct {
	FSID   string   `json:"fsid"`
	Epoch  uint64   `json:"epoch"`
	Health string   `json:"health"`
	Checks []Check  `json:"checks"`
	OSDs   int      `json:"osds"`
	OSDsUp int      `json:"osds_up"`
	OSDsIn int      `json:"osds_in"`
	Pools  int      `json:"pools"`
	PGs    int      `json:"pgs"`
	PGsOK  int      `json:"pgs_active_clean"`
	Used   int64    `json:"used_bytes"`
	Total  int64    `json:"total_bytes"`
	Etcd   []string `json:"etcd_endpoints"`
	// Unsynced adds up the small writes the OSDs hold in their commit logs
	// and have not yet synced to their data disks; DrainOSD is the OSD
	// that takes longest to sync its share, DrainSeconds how long.
	Unsynced     int64   `json:"unsynced_bytes"`
	DrainOSD     string  `json:"drain_osd,omitempty"`
	DrainSeconds float64 `json:"drain_seconds,omitempty"`
	// Redundancy says, pool by pool, what it can lose by design and now.
	Redundancy []PoolRedundancy `json:"pools_redundancy"`
	// WritebackDirty adds up the bytes the OSDs hold in their write-back
	// areas, not yet on their data disks, and WritebackArea the areas' size.
	WritebackDirty int64 `json:"writeback_dirty_bytes,omitempty"`
	WritebackArea  int64 `json:"writeback_area_bytes,omitempty"`
	// DestageOSD is the OSD whose area takes longest to reach its data
	// disk at its destage rate, DestageSeconds how long.
	DestageOSD     string  `json:"destage_osd,omitempty"`
	DestageSeconds float64 `json:"destage_seconds,omitempty"`
	// FlashCache adds up the OSDs' read caches on flash: their size, the
	// bytes they hold, their hits and misses since each OSD started.
	FlashCache report.FlashCacheStats `json:"flash_cache,omitzero"`
	// PGStates counts PGs by the state their primaries report.
	PGStates map[string]int `json:"pg_states,omitempty"`
	Work     []Work         `json:"work,omitempty"`
	// Gateways are the running gateways (cairn s3), as they registered
	// themselves; Compute leaves it to the caller, who reads etcd.
	Gateways []report.Gateway `json:"gateways"`
}

// Work is one OSD's background job (recovery, scrub) with its progress.
type Work struct {
	OSD         string  `json:"osd"`
	Kind        string  `json:"kind"`
	ObjectsDone int64   `json:"objects_done"`
	ObjectsLeft int64   `json:"objects_left"`
	BytesDone   int64   `json:"bytes_done"`
	MBps        float64 `json:"mb_per_s"`
	ETASeconds  float64 `json:"eta_seconds,omitempty"`
}

// Compute derives health from the map, the usage the OSDs publish and
// the recorded events, as of now. Pure, so it is tested without a cluster.
func Compute(m *clustermap.Map, stats map[clustermap.OSDID]report.OSDStats, reports []report.Event, now time.Time) Status {
	st := &Status{FSID: m.FSID, Epoch: uint64(m.Epoch), Health: OK, OSDs: len(m.OSDs), Pools: len(m.Pools)}
	t := placement.NewTable(m)
	st.osdChecks(m, now)
	st.placementChecks(m, t, stats)
	st.primaryChecks(m, t, stats, now)
	st.drainSummary(stats)
	st.spaceChecks(m, stats)
	st.flashChecks(stats)
	st.eventChecks(reports, now)
	return *st
}

// flashChecks reports the OSDs whose flash read cache turned itself off
// after a flash IO error: nothing is wrong with the data, but reads that
// flash served go to the slow disks, and the meta device that failed also
// holds the OSD's index.
func (st *Status) flashChecks(stats map[clustermap.OSDID]report.OSDStats) {
	var failed []string
	for id, s := range stats {
		if f := s.FlashCache.Failed; f != "" {
			failed = append(failed, fmt.Sprintf("%s: %s", id, f))
		}
	}
	if len(failed) == 0 {
		return
	}
	sort.Strings(failed)
	st.add(Check{Code: "OSD_FLASH_CACHE_FAILED", Severity: Warn, Summary: fmt.Sprintf("%d OSD(s) turned their flash read cache off after a flash IO error: their data disks serve every read, correctly but slower; check or replace the meta device named (it also holds the OSD's index), then restart the OSD", len(failed)), Detail: failed})
}

// add records a finding; the health is the worst of them.
func (st *Status) add(c Check) {
	st.Checks = append(st.Checks, c)
	if c.Severity == Err || st.Health == OK {
		st.Health = c.Severity
	}
}

// osdChecks counts the OSDs and reports those down, and those up but out.
func (st *Status) osdChecks(m *clustermap.Map, now time.Time) {
	var down, upOut []string
	for _, o := range m.OSDs {
		if o.Up && !o.In {
			upOut = append(upOut, fmt.Sprintf("%s on host %s is up but out: it holds no data; `cairn osd in %d` uses it again, `cairn osd rm %d` removes it", o.ID, o.Host, o.ID, o.ID))
		}
		if o.Up {
			st.OSDsUp++
		}
		if o.In {
			st.OSDsIn++
		}
		if o.In && !o.Up {
			since := "since it first registered"
			if !o.DownSince.IsZero() {
				since = fmt.Sprintf("since %s (%s ago)", o.DownSince.UTC().Format("2006-01-02 15:04:05 UTC"), now.Sub(o.DownSince).Round(time.Second))
			}
			down = append(down, fmt.Sprintf("%s on host %s (%s) is down %s", o.ID, o.Host, o.Addr, since))
		}
	}
	if len(down) > 0 {
		st.add(Check{Code: "OSD_DOWN", Severity: Warn,
			Summary: fmt.Sprintf("%d OSD(s) down: their placement groups are served by the remaining copies; "+
				"start each again (its log says why it stopped), or if its disk or host is gone, `cairn osd out ID` "+
				"re-replicates its data now instead of after %s, and the disk can then be replaced", len(down), m.DownOutInterval()),
			Detail: down})
	}
	if len(upOut) > 0 {
		st.add(Check{Code: "OSD_OUT", Severity: Warn,
			Summary: fmt.Sprintf("%d OSD(s) up but out: the cluster has less room and fewer copies to spread than it could", len(upOut)),
			Detail:  upOut})
	}
}

// placementChecks reports, per pool, the PGs the map leaves with too few
// copies or shards up or too few failure domains, and what each pool can
// lose now.
func (st *Status) placementChecks(m *clustermap.Map, t *placement.Table, stats map[clustermap.OSDID]report.OSDStats) {
	lastCopy := map[clustermap.OSDID][]string{} // the PGs that lose data if this OSD fails
	for i := range m.Pools {
		p := &m.Pools[i]
		red := newPoolRedundancy(m, p, stats)
		var degraded, inactive, undersized []string
		for seed := uint32(0); seed < p.PGNum; seed++ {
			pg := clustermap.PGID{Pool: p.ID, Seed: seed}
			st.PGs++
			placed := t.Place(p, pg)
			acting := t.Acting(p, pg)
			red.countPG(p, len(acting))
			if spare(p, len(acting)) == 0 && p.Tolerates() > 0 {
				for _, o := range acting {
					lastCopy[o] = append(lastCopy[o], pg.String())
				}
			}
			switch {
			case len(acting) < p.MinSize:
				inactive = append(inactive, fmt.Sprintf("%s (%s)", pg, risk(acting, p)))
			case len(acting) < p.Size && len(placed) == p.Size:
				degraded = append(degraded, fmt.Sprintf("%s (%s)", pg, risk(acting, p)))
			case len(placed) < p.Size:
				undersized = append(undersized, pg.String())
			default:
				st.PGsOK++
			}
		}
		st.Redundancy = append(st.Redundancy, red)
		if len(inactive) > 0 {
			st.add(Check{Code: "PG_INACTIVE", Severity: Err,
				Summary: fmt.Sprintf("pool %q: %d pg(s) have fewer than min_size %d %s up: their writes are blocked until an OSD returns", p.Name, len(inactive), p.MinSize, p.Unit()),
				Detail:  clip(inactive)})
		}
		if len(degraded) > 0 {
			st.add(Check{Code: "PG_DEGRADED", Severity: Warn,
				Summary: fmt.Sprintf("pool %q: %d pg(s) degraded: fewer than %d %s up, data is at risk until the OSDs return", p.Name, len(degraded), p.Size, p.Unit()),
				Detail:  clip(degraded)})
		}
		if len(undersized) > 0 {
			st.add(Check{Code: "PG_UNDERSIZED", Severity: Warn,
				Summary: fmt.Sprintf("pool %q: %d pg(s) can be placed on fewer than %d distinct %ss: add OSDs or lower the pool size", p.Name, len(undersized), p.Size, p.FailureDomain),
				Detail:  clip(undersized)})
		}
	}
	st.lastCopyCheck(m, lastCopy)
}

// risk says how many more failures a PG with these copies or shards up
// can take: until its writes stop, and until its data is lost, and on
// which OSDs.
func risk(acting []clustermap.OSDID, p *clustermap.Pool) string {
	up := fmt.Sprintf("%d of %d %s up", len(acting), p.Size, p.Unit())
	if len(acting) == 0 {
		return up + ": none is reachable"
	}
	on := make([]string, len(acting))
	for i, o := range acting {
		on[i] = o.String()
	}
	where := strings.Join(on, ", ")
	if len(acting) < p.MinSize {
		return fmt.Sprintf("%s, on %s: writes wait for another; %s", up, where, lossAfter(p, len(acting)))
	}
	return fmt.Sprintf("%s, on %s: writes stop after %d more failure(s) among them; %s", up, where, len(acting)-p.MinSize+1, lossAfter(p, len(acting)))
}

// lossAfter says how many of a PG's up OSDs must fail to lose its data.
func lossAfter(p *clustermap.Pool, up int) string {
	s := spare(p, up)
	switch {
	case s < 0:
		return fmt.Sprintf("its data cannot be read until %d more shard(s) return (any %d of %d rebuild it)", need(p)-up, need(p), p.Size)
	case s == 0 && up == 1:
		return "its data is lost if that OSD fails"
	case s == 0:
		return "its data is lost if any of them fails"
	case s+1 == up:
		return fmt.Sprintf("its data is lost only if all %d fail", up)
	}
	return fmt.Sprintf("its data is lost if %d of them fail", s+1)
}

// lastCopyCheck names the OSDs whose failure now would lose data: those
// holding the only copy up of a replicated PG, or one of the last K
// shards up of an erasure-coded one, most PGs first.
func (st *Status) lastCopyCheck(m *clustermap.Map, lastCopy map[clustermap.OSDID][]string) {
	if len(lastCopy) == 0 {
		return
	}
	ids := make([]clustermap.OSDID, 0, len(lastCopy))
	pgs := map[string]bool{}
	for o, l := range lastCopy {
		ids = append(ids, o)
		for _, pg := range l {
			pgs[pg] = true
		}
	}
	sort.Slice(ids, func(a, b int) bool {
		if na, nb := len(lastCopy[ids[a]]), len(lastCopy[ids[b]]); na != nb {
			return na > nb
		}
		return ids[a] < ids[b]
	})
	var detail []string
	for _, o := range ids {
		host := "?"
		if osd, ok := m.OSD(o); ok {
			host = osd.Host
		}
		l := lastCopy[o]
		detail = append(detail, fmt.Sprintf("%s on host %s: %d pg(s) lose data if it fails (%s): keep it running until the other copies return or recovery ends",
			o, host, len(l), strings.Join(clip(l), ", ")))
	}
	st.add(Check{Code: "PG_LAST_COPY", Severity: Err,
		Summary: fmt.Sprintf("%d pg(s) are down to their last copy, or their last K shards: one more failure among %d OSD(s) loses their data; bring the down OSDs back", len(pgs), len(ids)),
		Detail:  clip(detail)})
}

// primaryChecks reports what the primaries say of their PGs (peering,
// recovering, down, not reported yet) and their background work.
func (st *Status) primaryChecks(m *clustermap.Map, t *placement.Table, stats map[clustermap.OSDID]report.OSDStats, now time.Time) {
	// What the primaries say about their PGs: peering, recovery, down.
	var downPGs, unfoundPGs []string
	var recovering, unfound int
	var left int64
	for id, s := range stats {
		for k, n := range s.PGStates {
			if st.PGStates == nil {
				st.PGStates = map[string]int{}
			}
			st.PGStates[k] += n
		}
		for pg, why := range s.DownPGs {
			downPGs = append(downPGs, fmt.Sprintf("%s (primary %s): %s", pg, id, why))
		}
		for pg, n := range s.UnfoundPGs {
			unfoundPGs = append(unfoundPGs, fmt.Sprintf("pg %s (primary %s): %d object(s) unfound", pg, id, n))
			unfound += n
		}
		recovering += s.PGStates["active+recovering"]
		for _, w := range s.Work {
			left += st.addWork(id, w, now)
		}
	}
	sort.Slice(st.Work, func(i, j int) bool { return st.Work[i].OSD+st.Work[i].Kind < st.Work[j].OSD+st.Work[j].Kind })
	if st.PGStates != nil {
		st.PGsOK = min(st.PGsOK, st.PGStates["active+clean"])
	}
	st.unreportedCheck(m, t, stats)
	if len(downPGs) > 0 {
		sort.Strings(downPGs)
		st.add(Check{Code: "PG_DOWN", Severity: Err,
			Summary: fmt.Sprintf("%d pg(s) cannot go active: the OSDs holding their newest writes are down; their IO waits until one returns", len(downPGs)),
			Detail:  clip(downPGs)})
	}
	if len(unfoundPGs) > 0 {
		sort.Strings(unfoundPGs)
		st.add(Check{Code: "PG_UNFOUND", Severity: Err,
			Summary: fmt.Sprintf("%d object(s) in %d erasure-coded pg(s) unfound: no version of them is on K shards that hold every write; they are not served until the OSDs that held their shards return", unfound, len(unfoundPGs)),
			Detail:  clip(unfoundPGs)})
	}
	if n := st.PGStates["peering"]; n > 0 {
		st.add(Check{Code: "PG_PEERING", Severity: Warn, Summary: fmt.Sprintf("%d pg(s) peering: their IO waits a moment", n)})
	}
	if recovering > 0 {
		st.add(Check{Code: "PG_RECOVERING", Severity: Warn,
			Summary: fmt.Sprintf("%d pg(s) recovering: %d object copies left to bring up to date%s", recovering, left, st.recoveryETA())})
	}
	if stalled := stalledRecovery(stats, now); len(stalled) > 0 {
		st.add(Check{Code: "RECOVERY_STALLED", Severity: Warn,
			Summary: fmt.Sprintf("recovery on %d OSD(s) has made no progress for over %s; it keeps retrying by itself, the detail says what fails", len(stalled), recoveryStallAfter),
			Detail:  stalled})
	}
}

// addWork lists an OSD's background job with its rate and time left, and
// returns the objects recovery has left in it.
func (st *Status) addWork(id clustermap.OSDID, w report.WorkProgress, now time.Time) (recoveryLeft int64) {
	wk := Work{OSD: id.String(), Kind: w.Kind, ObjectsDone: w.ObjectsDone, ObjectsLeft: w.ObjectsLeft, BytesDone: w.BytesDone}
	if el := now.Sub(w.Started).Seconds(); !w.Started.IsZero() && el > 0 {
		wk.MBps = float64(w.BytesDone) / el / 1e6
		if w.ObjectsDone > 0 {
			wk.ETASeconds = el / float64(w.ObjectsDone) * float64(w.ObjectsLeft)
		}
	}
	st.Work = append(st.Work, wk)
	if w.Kind == "recovery" {
		return w.ObjectsLeft
	}
	return 0
}

// unreportedCheck warns of PGs no primary reported for the map's epoch:
// every PG with an OSD up has a primary that must.
func (st *Status) unreportedCheck(m *clustermap.Map, t *placement.Table, stats map[clustermap.OSDID]report.OSDStats) {
	reported, expected := 0, 0
	for _, s := range stats {
		if s.Epoch == m.Epoch {
			for _, n := range s.PGStates {
				reported += n
			}
		}
	}
	for i := range m.Pools {
		p := &m.Pools[i]
		for seed := uint32(0); seed < p.PGNum; seed++ {
			if len(t.Acting(p, clustermap.PGID{Pool: p.ID, Seed: seed})) > 0 {
				expected++
			}
		}
	}
	if reported < expected {
		st.add(Check{Code: "PG_UNKNOWN", Severity: Warn,
			Summary: fmt.Sprintf("%d pg(s) not yet reported by their primaries for map epoch %d", expected-reported, m.Epoch)})
	}
}

// recoveryETA says when every copy is back at the current rate: when the
// slowest OSD's recovery ends.
func (st *Status) recoveryETA() string {
	eta := 0.0
	for _, w := range st.Work {
		if w.Kind == "recovery" {
			eta = max(eta, w.ETASeconds)
		}
	}
	if eta <= 0 {
		return ""
	}
	return fmt.Sprintf("; full redundancy in about %s at the current rate", (time.Duration(eta) * time.Second).Round(time.Second))
}

// drainSummary adds up the OSDs' unsynced small writes and finds the one
// slowest to sync them.
func (st *Status) drainSummary(stats map[clustermap.OSDID]report.OSDStats) {
	for id, s := range stats {
		st.Unsynced += s.Unsynced
		st.WritebackDirty += s.WritebackDirty
		st.WritebackArea += s.WritebackArea
		st.FlashCache.Size += s.FlashCache.Size
		st.FlashCache.Used += s.FlashCache.Used
		st.FlashCache.Hits += s.FlashCache.Hits
		st.FlashCache.Misses += s.FlashCache.Misses
		if d := s.DrainSeconds(); d > st.DrainSeconds || (d == st.DrainSeconds && d > 0 && id.String() < st.DrainOSD) {
			st.DrainOSD, st.DrainSeconds = id.String(), d
		}
		if d := s.DestageSeconds(); d > st.DestageSeconds || (d == st.DestageSeconds && d > 0 && id.String() < st.DestageOSD) {
			st.DestageOSD, st.DestageSeconds = id.String(), d
		}
	}
}

// spaceChecks adds up the disks and reports OSDs nearly full, backfill-full
// and full, as the OSDs count it (UsedRatio) or flagged it in the map.
func (st *Status) spaceChecks(m *clustermap.Map, stats map[clustermap.OSDID]report.OSDStats) {
	st.Used, st.Total = Usage(stats)
	var full, bfull, nearfull []string
	for id, s := range stats {
		if s.TotalBytes <= 0 {
			continue
		}
		r := s.UsedRatio
		if r == 0 { // published by an older OSD
			r = float64(s.UsedBytes) / float64(s.TotalBytes)
		}
		var flagged clustermap.OSD // the flags the OSD set in the map
		if o, ok := m.OSD(id); ok {
			flagged = *o
		}
		line := fmt.Sprintf("%s is %.0f%% full (%s free, of which the store keeps its reserve)", id, r*100, humanBytes(s.FreeBytes))
		switch {
		case r >= fullRatio || flagged.Full:
			full = append(full, line)
		case r >= backfillFullRatio || flagged.BackfillFull:
			bfull = append(bfull, line)
		case r >= nearFullRatio:
			nearfull = append(nearfull, line)
		}
	}
	sort.Strings(full)
	sort.Strings(bfull)
	sort.Strings(nearfull)
	if len(full) > 0 {
		st.add(Check{Code: "OSD_FULL", Severity: Err, Summary: fmt.Sprintf("%d OSD(s) full: new writes to their placement groups are refused (reads and deletes go on); delete data, add OSDs, or mark a full OSD out", len(full)), Detail: full})
	}
	if len(bfull) > 0 {
		st.add(Check{Code: "OSD_BACKFILLFULL", Severity: Warn, Summary: fmt.Sprintf("%d OSD(s) over %.0f%% full: recovery and backfill stop copying data to them, so their placement groups stay degraded; delete data, add OSDs, or mark one out", len(bfull), backfillFullRatio*100), Detail: bfull})
	}
	if len(nearfull) > 0 {
		st.add(Check{Code: "OSD_NEARFULL", Severity: Warn, Summary: fmt.Sprintf("%d OSD(s) nearly full (over %.0f%%): add capacity soon", len(nearfull), nearFullRatio*100), Detail: nearfull})
	}
}

// eventChecks reports the recorded health events not archived: index
// damage, unrepaired corruption, and repairs of the last repairedShownFor.
func (st *Status) eventChecks(reports []report.Event, now time.Time) {
	var repaired, unrepaired, index []string
	for _, r := range reports {
		if !r.Archived.IsZero() {
			continue
		}
		switch r.Kind {
		case "index-corrupt":
			index = append(index, fmt.Sprintf("%s: %s (found %s)", r.OSD, r.Detail, r.Time.UTC().Format("2006-01-02 15:04:05 UTC")))
			continue
		case "corruption", "inconsistent":
		case "scrub-repaired":
			r.Detail = "scrub found " + r.Detail
		default:
			continue
		}
		line := fmt.Sprintf("%s pg %s object %q: %s (%d time(s), last %s)", r.OSD, r.PG, r.Object, r.Detail, r.Count, r.Time.UTC().Format("2006-01-02 15:04:05 UTC"))
		// Served from a replica (repaired now, or left for scrub) is a warning;
		// no good copy anywhere is an error.
		if r.Kind != "inconsistent" && (strings.Contains(r.Detail, "; repaired from ") || strings.Contains(r.Detail, "; served from ")) {
			if now.Sub(r.Time) < repairedShownFor {
				repaired = append(repaired, line)
			}
		} else {
			unrepaired = append(unrepaired, line)
		}
	}
	if len(index) > 0 {
		st.add(Check{Code: "OSD_INDEX_DAMAGED", Severity: Err,
			Summary: fmt.Sprintf("%d OSD(s) found damage in their index: their objects have other copies; replace each (cairn osd out N, wait for HEALTH_OK, cairn osd rm N, empty its data dir, start it again), then `cairn health archive`", len(index)),
			Detail:  clip(index)})
	}
	if len(unrepaired) > 0 {
		st.add(Check{Code: "OBJECT_CORRUPT", Severity: Err, Summary: fmt.Sprintf("%d object copy(ies) failed their checksum and could not be repaired: restore them from a backup, then `cairn health archive`", len(unrepaired)), Detail: clip(unrepaired)})
	}
	if len(repaired) > 0 {
		st.add(Check{Code: "OBJECT_REPAIRED", Severity: Warn, Summary: fmt.Sprintf("%d object copy(ies) failed their checksum in the last %s; good copies were served from replicas and repaired, or left for scrub where noted: check the disks of the OSDs named, then `cairn health archive` (it also clears by itself after %s)", len(repaired), repairedShownFor, repairedShownFor), Detail: clip(repaired)})
	}
}

// Usage sums the space the OSDs publish, counting a filesystem that
// several OSDs share once.
func Usage(stats map[clustermap.OSDID]report.OSDStats) (used, total int64) {
	seen := map[string]bool{}
	for _, s := range stats {
		if s.Filesystem != "" {
			if seen[s.Filesystem] {
				continue
			}
			seen[s.Filesystem] = true
		}
		used += s.UsedBytes
		total += s.TotalBytes
	}
	return used, total
}

// repairedShownFor is how long a repaired checksum error keeps the cluster
// at HEALTH_WARN: long enough to be seen, then it is history (`cairn
// health ls`). An unrepaired one stays until archived.
const repairedShownFor = 24 * time.Hour

// recoveryStallAfter is how long recovery may go without progress before
// status says so.
const recoveryStallAfter = time.Minute

// stalledRecovery names the OSDs whose recovery has work left but got
// nothing done for recoveryStallAfter, with their last error.
func stalledRecovery(stats map[clustermap.OSDID]report.OSDStats, now time.Time) []string {
	var out []string
	for id, s := range stats {
		for _, w := range s.Work {
			if w.Kind != "recovery" || w.Started.IsZero() {
				continue
			}
			last := w.Started
			if w.Progress.After(last) {
				last = w.Progress
			}
			if now.Sub(last) < recoveryStallAfter {
				continue
			}
			why := "no error reported"
			if w.LastError != "" {
				why = "last error: " + w.LastError
			}
			out = append(out, fmt.Sprintf("%s: %d object copies left, nothing recovered for %s; %s", id, w.ObjectsLeft, now.Sub(last).Round(time.Second), why))
		}
	}
	sort.Strings(out)
	return out
}

// clip keeps long detail lists readable.
func clip(l []string) []string {
	if len(l) <= 20 {
		return l
	}
	return append(l[:20:20], fmt.Sprintf("... and %d more", len(l)-20))
}

// humanBytes prints a byte count as cairn's commands do ("1.5 GiB").
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
