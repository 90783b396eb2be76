package health

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/report"
)

func testMap() *clustermap.Map {
	m := &clustermap.Map{Epoch: 7, FSID: "f", NextPoolID: 2}
	for h := 0; h < 3; h++ {
		host := []string{"h1", "h2", "h3"}[h]
		m.UpsertHost(host, "")
		for j := 0; j < 2; j++ {
			m.UpsertOSD(clustermap.OSD{ID: clustermap.OSDID(h*2 + j), Host: host, Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true, Addr: "a"})
		}
	}
	m.Pools = []clustermap.Pool{{ID: 1, Name: "default", Size: 3, MinSize: 2, PGNum: 64, FailureDomain: clustermap.DomainHost}}
	return m
}

func find(st Status, code string) *Check {
	for i := range st.Checks {
		if st.Checks[i].Code == code {
			return &st.Checks[i]
		}
	}
	return nil
}

// primaryStats is what the OSDs publish when each of their primary PGs is
// in state (and the others say nothing).
func primaryStats(m *clustermap.Map, state string) map[clustermap.OSDID]report.OSDStats {
	out := map[clustermap.OSDID]report.OSDStats{}
	t := placement.NewTable(m)
	for i := range m.Pools {
		p := &m.Pools[i]
		for seed := uint32(0); seed < p.PGNum; seed++ {
			a := t.Acting(p, clustermap.PGID{Pool: p.ID, Seed: seed})
			if len(a) == 0 {
				continue
			}
			st := out[a[0]]
			st.Epoch = m.Epoch
			if st.PGStates == nil {
				st.PGStates = map[string]int{}
			}
			st.PGStates[state]++
			out[a[0]] = st
		}
	}
	return out
}

func TestStatusHealthy(t *testing.T) {
	m := testMap()
	st := Compute(m, primaryStats(m, "active+clean"), nil, time.Now())
	if st.Health != OK || len(st.Checks) != 0 || st.PGsOK != 64 || st.OSDsUp != 6 {
		t.Fatalf("healthy map: %+v", st)
	}
}

// Until every primary reported its PGs for the newest map, the cluster is
// not called healthy: a returning OSD may still be peering.
func TestStatusUnreportedPGs(t *testing.T) {
	m := testMap()
	stats := primaryStats(m, "active+clean")
	o := stats[2]
	o.Epoch = m.Epoch - 1
	stats[2] = o
	st := Compute(m, stats, nil, time.Now())
	c := find(st, "PG_UNKNOWN")
	if st.Health != Warn || c == nil || !strings.HasPrefix(c.Summary, fmt.Sprint(o.PGStates["active+clean"])) {
		t.Fatalf("an OSD reporting an older epoch: want PG_UNKNOWN for its %d pgs, got %+v", o.PGStates["active+clean"], st)
	}
}

func TestStatusRecoveringAndDown(t *testing.T) {
	m := testMap()
	stats := primaryStats(m, "active+recovering")
	now := time.Now()
	o := stats[0]
	o.Work = []report.WorkProgress{{Kind: "recovery", ObjectsDone: 10, ObjectsLeft: 30, BytesDone: 40e6, Started: now.Add(-10 * time.Second)}}
	o.DownPGs = map[string]string{"1.3": "waiting for osd.4, which hold(s) the newest writes"}
	stats[0] = o
	st := Compute(m, stats, nil, now)
	if st.Health != Err || find(st, "PG_RECOVERING") == nil {
		t.Fatalf("recovering and down pgs: want HEALTH_ERR with PG_RECOVERING: %+v", st)
	}
	if c := find(st, "PG_RECOVERING"); !strings.HasSuffix(c.Summary, "30 object copies left to bring up to date; full redundancy in about 30s at the current rate") {
		t.Fatalf("PG_RECOVERING does not say when redundancy is back: %q", c.Summary)
	}
	if c := find(st, "PG_DOWN"); c == nil || !strings.Contains(c.Detail[0], "1.3 (primary osd.0): waiting for osd.4") {
		t.Fatalf("PG_DOWN does not say which pg waits for what: %+v", c)
	}
	if len(st.Work) != 1 || st.Work[0].MBps < 3.9 || st.Work[0].MBps > 4.1 || st.Work[0].ETASeconds < 29 || st.Work[0].ETASeconds > 31 {
		t.Fatalf("work progress: want 4 MB/s and ETA 30 s, got %+v", st.Work)
	}
}

func TestStatusOSDDownDegraded(t *testing.T) {
	m := testMap()
	down := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o, _ := m.OSD(3)
	o.Up, o.DownSince = false, down
	st := Compute(m, nil, nil, down.Add(90*time.Second))
	if st.Health != Warn {
		t.Fatalf("health %s, want WARN", st.Health)
	}
	c := find(st, "OSD_DOWN")
	if c == nil || !strings.Contains(c.Detail[0], "osd.3 on host h2") || !strings.Contains(c.Detail[0], "1m30s ago") {
		t.Fatalf("OSD_DOWN check does not name osd.3, its host and since when: %+v", c)
	}
	if !strings.Contains(c.Summary, "cairn osd out ID") || !strings.Contains(c.Summary, "after 10m0s") {
		t.Fatalf("OSD_DOWN check does not say what to do: %q", c.Summary)
	}
	d := find(st, "PG_DEGRADED")
	if d == nil || st.PGsOK+countPGs(d) != 64 {
		t.Fatalf("degraded pgs not accounted: %+v ok=%d", d, st.PGsOK)
	}
	// Each degraded PG says what it can still take, and on which OSDs.
	for _, line := range d.Detail {
		if strings.HasPrefix(line, "... and ") {
			continue
		}
		if !strings.Contains(line, "2 of 3 copies up, on osd.") || !strings.Contains(line, "writes stop after 1 more failure(s) among them; its data is lost only if all 2 fail") {
			t.Fatalf("degraded pg does not say its risk: %q", line)
		}
	}
	if find(st, "PG_LAST_COPY") != nil {
		t.Fatal("PG_LAST_COPY with two copies of every PG up")
	}
}

func countPGs(c *Check) int {
	var n int
	if _, err := fmt.Sscanf(c.Summary[strings.Index(c.Summary, ": ")+2:], "%d", &n); err != nil {
		return -1
	}
	return n
}

func TestStatusInactiveIsError(t *testing.T) {
	m := testMap()
	for _, id := range []clustermap.OSDID{0, 1, 2, 3} { // two of three hosts down
		o, _ := m.OSD(id)
		o.Up = false
	}
	st := Compute(m, nil, nil, time.Now())
	if st.Health != Err || find(st, "PG_INACTIVE") == nil {
		t.Fatalf("two hosts of three down must be HEALTH_ERR with PG_INACTIVE: %+v", st)
	}
	// Every PG is down to the copy on osd.4 or osd.5: status names both,
	// most PGs first, and their counts add up to every PG.
	c := find(st, "PG_LAST_COPY")
	if c == nil || c.Severity != Err || len(c.Detail) != 2 || !strings.HasPrefix(c.Summary, "64 pg(s) are down to their last copy, or their last K shards: one more failure among 2 OSD(s)") {
		t.Fatalf("PG_LAST_COPY: %+v", c)
	}
	sum := 0
	for i, line := range c.Detail {
		var id, n int
		var host string
		if _, err := fmt.Sscanf(line, "osd.%d on host %s %d pg(s) lose data if it fails", &id, &host, &n); err != nil || (id != 4 && id != 5) || host != "h3:" {
			t.Fatalf("PG_LAST_COPY detail %q: %v", line, err)
		}
		if i > 0 && n > sum {
			t.Fatalf("PG_LAST_COPY not sorted by PGs held: %v", c.Detail)
		}
		sum += n
	}
	if sum != 64 {
		t.Fatalf("PG_LAST_COPY counts %d pgs, want 64: %v", sum, c.Detail)
	}
	for _, line := range find(st, "PG_INACTIVE").Detail {
		if strings.HasPrefix(line, "... and ") {
			continue
		}
		if !strings.Contains(line, "1 of 3 copies up, on osd.") || !strings.Contains(line, "its data is lost if that OSD fails") {
			t.Fatalf("inactive pg does not say its risk: %q", line)
		}
	}
}

func TestStatusFullAndCorruption(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		0: {TotalBytes: 100, UsedBytes: 87, FreeBytes: 13},
		1: {TotalBytes: 100, UsedBytes: 96, FreeBytes: 4},
		2: {TotalBytes: 100, UsedBytes: 10, FreeBytes: 90},
		3: {TotalBytes: 100, UsedBytes: 91, FreeBytes: 9},
	}
	reports := []report.Event{
		{Kind: "corruption", OSD: 2, PG: "1.a", Object: "o1", Detail: "crc mismatch; repaired from osd.4", Count: 1, Time: time.Now()},
	}
	st := Compute(testMap(), stats, reports, time.Now())
	if find(st, "OSD_NEARFULL") == nil || find(st, "OSD_BACKFILLFULL") == nil || find(st, "OSD_FULL") == nil || find(st, "OBJECT_REPAIRED") == nil {
		t.Fatalf("missing checks: %+v", st.Checks)
	}
	if st.Health != Err {
		t.Fatalf("a full OSD is HEALTH_ERR, got %s", st.Health)
	}
	reports[0].Detail = "crc mismatch; no replica had a good copy"
	st = Compute(testMap(), nil, reports, time.Now())
	if c := find(st, "OBJECT_CORRUPT"); c == nil || st.Health != Err || !strings.Contains(c.Detail[0], `"o1"`) {
		t.Fatalf("unrepaired corruption must be HEALTH_ERR naming the object: %+v", st)
	}
}

// An OSD up but out holds nothing: whether the keeper failed to take it back
// or an operator drained it, status says so and what to do.
func TestStatusUpButOut(t *testing.T) {
	m := testMap()
	o, _ := m.OSD(4)
	o.In = false
	st := Compute(m, primaryStats(m, "active+clean"), nil, time.Now())
	c := find(st, "OSD_OUT")
	if st.Health != Warn || c == nil || len(c.Detail) != 1 || !strings.Contains(c.Detail[0], "osd.4") || !strings.Contains(c.Detail[0], "cairn osd in 4") {
		t.Fatalf("an up but out OSD: want HEALTH_WARN with OSD_OUT naming osd.4 and `cairn osd in 4`, got %+v", st)
	}
}

// Recovery with work left and nothing done for a minute is reported with
// its last error; recovery that moves, or only just started, is not.
func TestStatusRecoveryStalled(t *testing.T) {
	m := testMap()
	now := time.Now()
	stats := primaryStats(m, "active+recovering")
	o := stats[0]
	o.Work = []report.WorkProgress{{Kind: "recovery", ObjectsLeft: 55, Started: now.Add(-5 * time.Minute), Progress: now.Add(-4 * time.Minute),
		LastError: `pg 1.2: recovering "x": to osd.1: wrong epoch`}}
	stats[0] = o
	st := Compute(m, stats, nil, now)
	c := find(st, "RECOVERY_STALLED")
	if c == nil || len(c.Detail) != 1 || !strings.Contains(c.Detail[0], "osd.0") || !strings.Contains(c.Detail[0], "4m0s") || !strings.Contains(c.Detail[0], "wrong epoch") {
		t.Fatalf("stalled recovery: want RECOVERY_STALLED naming osd.0, 4m0s and its last error, got %+v", c)
	}
	for _, w := range []report.WorkProgress{
		{Kind: "recovery", ObjectsLeft: 55, Started: now.Add(-5 * time.Minute), Progress: now.Add(-time.Second)},
		{Kind: "recovery", ObjectsLeft: 55, Started: now.Add(-10 * time.Second)},
	} {
		o.Work = []report.WorkProgress{w}
		stats[0] = o
		if c := find(Compute(m, stats, nil, now), "RECOVERY_STALLED"); c != nil {
			t.Fatalf("recovery %+v is not stalled, got %+v", w, c)
		}
	}
}

// Full and nearly full count the space the store lets writes use: a disk
// with 10% free is full when the store keeps those 10% as its reserve.
func TestStatusFullCountsTheReserve(t *testing.T) {
	const gib = 1 << 30
	total, free, reserve := int64(10*gib), int64(gib+gib/20), int64(gib)
	r := clustermap.UsedRatio(total, free, reserve)
	stats := map[clustermap.OSDID]report.OSDStats{0: {TotalBytes: total, UsedBytes: total - free, FreeBytes: free, UsedRatio: r}}
	st := Compute(testMap(), stats, nil, time.Now())
	if c := find(st, "OSD_FULL"); c == nil || !strings.Contains(c.Detail[0], "osd.0 is 99% full") {
		t.Fatalf("an OSD with 5%% of a 10 GiB disk left beyond its 1 GiB reserve (ratio %.3f): want OSD_FULL at 99%%, got %+v", r, st.Checks)
	}
	for _, c := range []struct {
		total, free, reserve int64
		want                 float64
	}{{100, 50, 0, 0.5}, {100, 50, 50, 1}, {100, 60, 20, 0.5}, {100, 100, 200, 1}, {0, 0, 0, 0}} {
		if got := clustermap.UsedRatio(c.total, c.free, c.reserve); got != c.want {
			t.Errorf("UsedRatio(%d, %d, %d) = %v, want %v", c.total, c.free, c.reserve, got, c.want)
		}
	}
}

// OSDs sharing one filesystem count it once in the totals.
func TestStatusTotalsCountEachFilesystemOnce(t *testing.T) {
	stats := map[clustermap.OSDID]report.OSDStats{
		0: {TotalBytes: 100, UsedBytes: 40, Filesystem: "m1:5"},
		1: {TotalBytes: 100, UsedBytes: 40, Filesystem: "m1:5"},
		2: {TotalBytes: 50, UsedBytes: 10, Filesystem: "m2:5"},
		3: {TotalBytes: 20, UsedBytes: 1},
	}
	st := Compute(testMap(), stats, nil, time.Now())
	if st.Used != 51 || st.Total != 170 {
		t.Fatalf("totals %d of %d, want 51 of 170 (m1:5 once)", st.Used, st.Total)
	}
}

// A repaired checksum error warns for a day, then is history; an archived
// one no longer counts, unless it happens again; an unrepaired one stays
// until archived.
func TestStatusReportsAgeAndArchive(t *testing.T) {
	now := time.Now()
	repaired := report.Event{Kind: "corruption", OSD: 2, PG: "1.a", Object: "o1", Detail: "crc mismatch; repaired from osd.4", Count: 1, Time: now.Add(-time.Hour)}
	lost := report.Event{Kind: "corruption", OSD: 2, PG: "1.b", Object: "o2", Detail: "crc mismatch; no replica had a good copy", Count: 1, Time: now.Add(-48 * time.Hour)}
	m := testMap()
	stats := primaryStats(m, "active+clean")
	health := func(rs ...report.Event) Status { return Compute(m, stats, rs, now) }
	if st := health(repaired); st.Health != Warn || find(st, "OBJECT_REPAIRED") == nil {
		t.Fatalf("a repair an hour ago: want OBJECT_REPAIRED, got %+v", st)
	}
	old := repaired
	old.Time = now.Add(-25 * time.Hour)
	if st := health(old); st.Health != OK {
		t.Fatalf("a repair 25 hours ago: want HEALTH_OK, got %+v", st)
	}
	archived := repaired
	archived.Archived = now
	if st := health(archived); st.Health != OK {
		t.Fatalf("an archived repair: want HEALTH_OK, got %+v", st)
	}
	if st := health(lost); st.Health != Err || find(st, "OBJECT_CORRUPT") == nil {
		t.Fatalf("an unrepaired error two days ago: want OBJECT_CORRUPT, got %+v", st)
	}
	lost.Archived = now
	if st := health(lost); st.Health != OK {
		t.Fatalf("an archived unrepaired error: want HEALTH_OK, got %+v", st)
	}
}

// An erasure-coded pool is healthy only while every shard is where it
// belongs: its PGs count among those the primaries must report; one
// recovering (a position lacks shards) warns; unfound objects are an
// error naming the PG and how many; a position down is degraded.
func TestStatusECPool(t *testing.T) {
	m := testMap()
	m.Pools = append(m.Pools, clustermap.Pool{ID: 2, Name: "ec", Size: 3, MinSize: 3, PGNum: 8, FailureDomain: clustermap.DomainHost,
		EC: &clustermap.ECProfile{K: 2, M: 1, StripeUnit: clustermap.ECDefaultUnit}})
	st := Compute(m, primaryStats(m, "active+clean"), nil, time.Now())
	if st.Health != OK || find(st, "PG_UNKNOWN") != nil || st.PGsOK != 72 {
		t.Fatalf("an erasure-coded pool all clean: %+v", st)
	}
	stats := primaryStats(m, "active+clean")
	prim := placement.NewTable(m).Acting(&m.Pools[1], clustermap.PGID{Pool: 2, Seed: 3})[0]
	ps := stats[prim]
	ps.PGStates["active+clean"]--
	ps.PGStates["active+recovering"]++
	stats[prim] = ps
	if st := Compute(m, stats, nil, time.Now()); st.Health != Warn || find(st, "PG_RECOVERING") == nil {
		t.Fatalf("an erasure-coded PG recovering: want PG_RECOVERING, got %+v", st)
	}
	ps.PGStates["active+recovering"]--
	ps.PGStates["active+unfound"]++
	ps.UnfoundPGs = map[string]int{"2.3": 4}
	stats[prim] = ps
	st = Compute(m, stats, nil, time.Now())
	if c := find(st, "PG_UNFOUND"); st.Health != Err || c == nil || len(c.Detail) != 1 || !strings.Contains(c.Detail[0], "pg 2.3") || !strings.Contains(c.Detail[0], "4 object(s) unfound") {
		t.Fatalf("an erasure-coded PG with unfound objects: want PG_UNFOUND naming it, got %+v", st)
	}
	if st.PGsOK != 71 {
		t.Fatalf("a PG with unfound objects counts as OK: %+v", st)
	}
	m.OSDs[0].Up = false
	if st := Compute(m, primaryStats(m, "active+clean"), nil, time.Now()); st.Health == OK || find(st, "PG_DEGRADED") == nil {
		t.Fatalf("an erasure-coded pool with an OSD down: %+v", st)
	}
}

// ecMap is testMap with an erasure-coded 2+1 pool beside the 3-copy one,
// one shard per host.
func ecMap() *clustermap.Map {
	m := testMap()
	m.Pools = append(m.Pools, clustermap.Pool{ID: 2, Name: "ec", Size: 3, MinSize: 2, PGNum: 32, FailureDomain: clustermap.DomainHost,
		EC: &clustermap.ECProfile{K: 2, M: 1, StripeUnit: clustermap.ECDefaultUnit}})
	return m
}

func redundancyOf(t *testing.T, st Status, pool string) PoolRedundancy {
	t.Helper()
	for _, r := range st.Redundancy {
		if r.Name == pool {
			return r
		}
	}
	t.Fatalf("no redundancy line for pool %q: %+v", pool, st.Redundancy)
	return PoolRedundancy{}
}

// A host down leaves a 3-copy PG one failure to spare but a 2+1 PG none:
// status says so per pool, names the 2+1 PGs as down to their last K
// shards, and words their risk in shards.
func TestStatusRedundancyErasureCoded(t *testing.T) {
	m := ecMap()
	st := Compute(m, nil, nil, time.Now())
	rep, ec := redundancyOf(t, st, "default"), redundancyOf(t, st, "ec")
	if rep.Kind != "3 copies" || rep.CanLose != 2 || rep.CanLoseNow != 2 || rep.Now() != "full redundancy" || rep.Design() != "can lose 2 hosts" {
		t.Fatalf("healthy 3-copy pool: %+v %q", rep, rep.Now())
	}
	if ec.Kind != "ec 2+1" || ec.CanLose != 1 || ec.CanLoseNow != 1 || ec.PGs != 32 || ec.Design() != "can lose 1 host" || int(ec.UsablePct) != 66 {
		t.Fatalf("healthy 2+1 pool: %+v", ec)
	}
	for _, id := range []clustermap.OSDID{2, 3} { // host h2
		o, _ := m.OSD(id)
		o.Up = false
	}
	st = Compute(m, nil, nil, time.Now())
	rep, ec = redundancyOf(t, st, "default"), redundancyOf(t, st, "ec")
	if rep.CanLoseNow != 1 || rep.PGsAtNow != 64 || ec.CanLoseNow != 0 || ec.PGsAtNow != 32 {
		t.Fatalf("a host down: 3 copies %+v, 2+1 %+v", rep, ec)
	}
	if got := ec.Now(); got != "32 of 32 pg(s) can lose only 0 more OSD(s)" {
		t.Fatalf("2+1 pool now: %q", got)
	}
	c := find(st, "PG_LAST_COPY")
	if c == nil || !strings.HasPrefix(c.Summary, "32 pg(s) are down to their last copy, or their last K shards: one more failure among 4 OSD(s)") {
		t.Fatalf("a host down: the 2+1 pgs (only) have nothing to spare: %+v", c)
	}
	var degradedEC *Check
	for i := range st.Checks {
		if st.Checks[i].Code == "PG_DEGRADED" && strings.Contains(st.Checks[i].Summary, `pool "ec"`) {
			degradedEC = &st.Checks[i]
		}
	}
	if degradedEC == nil || !strings.Contains(degradedEC.Summary, "fewer than 3 shards up") ||
		!strings.Contains(degradedEC.Detail[0], "2 of 3 shards up, on osd.") || !strings.Contains(degradedEC.Detail[0], "its data is lost if any of them fails") {
		t.Fatalf("degraded 2+1 pgs must word their risk in shards: %+v", degradedEC)
	}
	for _, id := range []clustermap.OSDID{0, 1} { // and host h1
		o, _ := m.OSD(id)
		o.Up = false
	}
	st = Compute(m, nil, nil, time.Now())
	ec = redundancyOf(t, st, "ec")
	in := find(st, "PG_INACTIVE")
	if ec.CanLoseNow != -1 || ec.Now() != "32 pg(s) unreadable until OSDs return" || in == nil {
		t.Fatalf("two hosts of three down: %+v %+v", ec, in)
	}
	for _, d := range find(st, "PG_INACTIVE").Detail {
		if strings.HasPrefix(d, "2.") && !strings.Contains(d, "1 of 3 shards up") || strings.HasPrefix(d, "2.") && !strings.Contains(d, "cannot be read until 1 more shard(s) return (any 2 of 3 rebuild it)") {
			t.Fatalf("unreadable 2+1 pg: %q", d)
		}
	}
}

// MaxAvail is what fits before the fullest OSD, for its share of the
// data, is full, times the share of raw space that holds data.
func TestPoolMaxAvail(t *testing.T) {
	m := ecMap()
	o, _ := m.OSD(5)
	o.Weight = 2 // gets twice the data of each other OSD
	const gib = int64(1) << 30
	stats := map[clustermap.OSDID]report.OSDStats{}
	for id := clustermap.OSDID(0); id < 6; id++ {
		stats[id] = report.OSDStats{TotalBytes: 100 * gib, FreeBytes: 60 * gib}
	}
	s := stats[5]
	s.FreeBytes = 40 * gib // room for its double share: 40 - 5 (the full ratio's margin) = 35
	stats[5] = s
	st := Compute(m, stats, nil, time.Now())
	room := 35 * float64(gib) * 7 / 2 // osd.5 bounds: 35 GiB for 2/7 of the data
	for _, c := range []struct {
		pool string
		want float64
	}{{"default", room / 3}, {"ec", room * 2 / 3}} {
		got := float64(redundancyOf(t, st, c.pool).MaxAvail)
		if got < c.want*0.999 || got > c.want*1.001 {
			t.Fatalf("pool %s: max avail %.0f, want %.0f", c.pool, got, c.want)
		}
	}
	// An OSD out takes no data and does not bound the others.
	o.In = false
	st = Compute(m, stats, nil, time.Now())
	if got, want := float64(redundancyOf(t, st, "default").MaxAvail), 55*float64(gib)*5/3; got < want*0.999 || got > want*1.001 {
		t.Fatalf("osd.5 out: max avail %.0f, want %.0f", got, want)
	}
}
