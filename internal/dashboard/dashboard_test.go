package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/report"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func io4(r, w uint64) report.IOCounters {
	return report.IOCounters{ReadOps: r, WriteOps: w, ReadBytes: r * 4096, WriteBytes: w * 4096}
}

// TestHistoryRates: rates are the counters' change over the interval,
// summed over OSDs; a restarted OSD counts what it served since its
// start, and samples older than the window go.
func TestHistoryRates(t *testing.T) {
	h := NewHistory(time.Minute)
	start := t0.Add(-time.Hour)
	h.Add(t0, map[clustermap.OSDID]report.OSDStats{0: {Started: start, ClientIO: io4(100, 50)}, 1: {Started: start, ClientIO: io4(10, 10)}}, 1, 10)
	if len(h.Samples()) != 0 {
		t.Fatal("the first call only sets the baseline")
	}
	restarted := t0.Add(5 * time.Second)
	h.Add(t0.Add(10*time.Second), map[clustermap.OSDID]report.OSDStats{
		0: {Started: start, ClientIO: io4(300, 150)},   // +200 reads, +100 writes
		1: {Started: restarted, ClientIO: io4(20, 30)}, // restarted: all of it counts
	}, 2, 10)
	s := h.Samples()
	if len(s) != 1 || s[0].ReadOps != 22 || s[0].WriteOps != 13 || s[0].WriteBytes != 13*4096 || s[0].Used != 2 {
		t.Fatalf("sample %+v, want 22 reads/s and 13 writes/s", s)
	}
	for i := 2; i <= 12; i++ {
		h.Add(t0.Add(time.Duration(i)*10*time.Second), map[clustermap.OSDID]report.OSDStats{0: {Started: start, ClientIO: io4(300, 150)}}, 2, 10)
	}
	s = h.Samples()
	if len(s) != 7 || !s[0].Time.Equal(t0.Add(60*time.Second)) || s[len(s)-1].ReadOps != 0 {
		t.Fatalf("after two minutes of a one-minute window: %d samples from %v", len(s), s[0].Time)
	}
}

// TestForecast: the date the cluster fills at the current growth, and
// plain words when it does not grow or the history is too short.
func TestForecast(t *testing.T) {
	const gib = 1 << 30
	samples := []Sample{{Time: t0, Used: 10 * gib}, {Time: t0.Add(time.Hour), Used: 11 * gib}}
	c := Forecast(samples, 11*gib, 100*gib, t0.Add(time.Hour))
	if c.GrowthPerDay != 24*gib {
		t.Fatalf("growth %v/day, want 24 GiB", c.GrowthPerDay)
	}
	want := t0.Add(time.Hour).Add(time.Duration(float64(c.Limit-11*gib) / (24 * gib) * 24 * float64(time.Hour)))
	if d := c.FullAt.Sub(want); d > time.Second || d < -time.Second || !strings.Contains(c.Text, "add capacity before") {
		t.Fatalf("full at %v, want %v; text %q", c.FullAt, want, c.Text)
	}
	flat := Forecast([]Sample{{Time: t0, Used: gib}, {Time: t0.Add(time.Hour), Used: gib}}, gib, 100*gib, t0)
	if !flat.FullAt.IsZero() || !strings.Contains(flat.Text, "did not grow") {
		t.Fatalf("flat usage: %+v", flat)
	}
	short := Forecast(samples[:1], gib, 100*gib, t0)
	if !strings.Contains(short.Text, "trend shows after") {
		t.Fatalf("one sample: %q", short.Text)
	}
}

type fakeSource struct {
	m      *clustermap.Map
	stats  map[clustermap.OSDID]report.OSDStats
	events []report.Event
}

func (f *fakeSource) Map(context.Context) (*clustermap.Map, int64, error) { return f.m, 1, nil }
func (f *fakeSource) Stats(context.Context) (map[clustermap.OSDID]report.OSDStats, error) {
	return f.stats, nil
}
func (f *fakeSource) Reports(context.Context) ([]report.Event, error) { return f.events, nil }

func testCluster() *fakeSource {
	m := &clustermap.Map{Epoch: 9, FSID: "fsid-1"}
	stats := map[clustermap.OSDID]report.OSDStats{}
	for i := range 3 {
		host := []string{"h1", "h2", "h3"}[i]
		m.UpsertHost(host, "")
		m.UpsertOSD(clustermap.OSD{ID: clustermap.OSDID(i), Host: host, Class: clustermap.ClassHDD, Weight: 1, Up: true, In: true, Addr: "127.0.0.1:1"})
		stats[clustermap.OSDID(i)] = report.OSDStats{TotalBytes: 100 << 30, UsedBytes: 30 << 30, UsedRatio: 0.3, Updated: time.Now(), PGStates: map[string]int{"active+clean": 8}}
	}
	m.Pools = []clustermap.Pool{{ID: 1, Name: "default", Size: 3, MinSize: 2, PGNum: 24, FailureDomain: clustermap.DomainHost}}
	return &fakeSource{m: m, stats: stats}
}

func get(t *testing.T, h http.Handler, path, user, pass string) (int, string) {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	if user != "" {
		r.SetBasicAuth(user, pass)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

// TestPageShowsTheCluster: the page names the health and each finding,
// every OSD with its state, pools, volumes and buckets; the JSON has the
// same view.
func TestPageShowsTheCluster(t *testing.T) {
	src := testCluster()
	o, _ := src.m.OSD(1)
	o.Up = false
	src.events = []report.Event{{Kind: "corruption", OSD: 2, PG: "1.3", Object: "obj-7", Detail: "checksum mismatch at 4096, repaired from osd.0", Time: time.Now(), Count: 1}}
	d := New(Options{Source: src})
	d.catalog = Catalog{Volumes: []Volume{{Pool: "default", Name: "vm1", Size: 10 << 30, Snapshots: 2}}, Buckets: []Bucket{{Pool: "s3", Name: "photos", Owner: "admin", Objects: 3, Bytes: 1 << 20}}}
	code, body := get(t, d, "/", "", "")
	if code != 200 {
		t.Fatalf("GET /: %d %s", code, body)
	}
	for _, want := range []string{"HEALTH_WARN", "osd.1", `class="down">down`, "fsid-1", "3 copies, one per host, writes need 2: can lose 2 hosts", "default/vm1", "photos", "obj-7"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	code, body = get(t, d, "/api/status", "", "")
	var v View
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil {
		t.Fatalf("GET /api/status: %d %v", code, err)
	}
	if v.Status.OSDsUp != 2 || len(v.Pools) != 1 || len(v.Catalog.Volumes) != 1 {
		t.Fatalf("view: %d OSDs up, %d pools, %d volumes", v.Status.OSDsUp, len(v.Pools), len(v.Catalog.Volumes))
	}
}

// TestPasswordAndReadOnly: with a password every path asks for it; the
// dashboard answers GET only.
func TestPasswordAndReadOnly(t *testing.T) {
	d := New(Options{Source: testCluster(), User: "admin", Password: "s3cret"})
	for _, p := range []string{"/", "/api/status"} {
		if code, _ := get(t, d, p, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s without password: %d", p, code)
		}
		if code, _ := get(t, d, p, "admin", "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong password: %d", p, code)
		}
		if code, _ := get(t, d, p, "admin", "s3cret"); code != 200 {
			t.Errorf("%s with the password: %d", p, code)
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", nil)
	r.SetBasicAuth("admin", "s3cret")
	d.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", w.Code)
	}
}

// TestChartDrawsEverySample: one point per sample and series, scaled into
// the chart.
func TestChartDrawsEverySample(t *testing.T) {
	var s []Sample
	for i := range 30 {
		s = append(s, Sample{Time: t0.Add(time.Duration(i) * 10 * time.Second), ReadOps: float64(i * 10), WriteOps: 5})
	}
	svg := string(chart("IOPS", s, opsSeries))
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}
	if !strings.Contains(svg, ">500<") || !strings.Contains(svg, "290 now") {
		t.Fatalf("axis or legend wrong: %s", svg)
	}
}

// TestThinKeepsPeaks: an hour of 2-second samples draws at most maxPoints
// points, and a one-sample burst still shows.
func TestThinKeepsPeaks(t *testing.T) {
	var s []Sample
	for i := range 1800 {
		s = append(s, Sample{Time: t0.Add(time.Duration(i) * 2 * time.Second), WriteOps: 1})
	}
	s[777].WriteOps = 900
	th := thin(s, maxPoints)
	peak := 0.0
	for _, x := range th {
		peak = max(peak, x.WriteOps)
	}
	if len(th) > maxPoints || peak != 900 || !th[len(th)-1].Time.Equal(s[len(s)-1].Time) {
		t.Fatalf("%d points, peak %v, last %v", len(th), peak, th[len(th)-1].Time)
	}
}
