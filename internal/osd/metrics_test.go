package osd

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/metricsrv"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
)

// A request is counted under its operation, with its bytes, its latency
// and, if it failed, its status; a request that is no operation at all is
// not counted.
func TestMetricsObserve(t *testing.T) {
	m := newMetrics(&Server{id: clustermap.OSDID(3)})
	m.observe(&proto.Request{Op: proto.OpWrite, Data: make([]byte, 4096)}, &proto.Response{Status: proto.StatusOK}, time.Millisecond)
	m.observe(&proto.Request{Op: proto.OpRead}, &proto.Response{Status: proto.StatusOK, Data: make([]byte, 100)}, time.Millisecond)
	m.observe(&proto.Request{Op: proto.OpRead}, &proto.Response{Status: proto.StatusNotFound}, time.Millisecond)
	m.observe(&proto.Request{Op: 250}, nil, time.Millisecond)
	if n := testutil.ToFloat64(m.ops.WithLabelValues("write")); n != 1 {
		t.Errorf("writes counted: %g", n)
	}
	if n := testutil.ToFloat64(m.ops.WithLabelValues("read")); n != 2 {
		t.Errorf("reads counted: %g", n)
	}
	if n := testutil.ToFloat64(m.bytesIn.WithLabelValues("write")); n != 4096 {
		t.Errorf("write bytes: %g", n)
	}
	if n := testutil.ToFloat64(m.bytesOut.WithLabelValues("read")); n != 100 {
		t.Errorf("read bytes: %g", n)
	}
	if n := testutil.ToFloat64(m.failed.WithLabelValues("read")); n != 1 {
		t.Errorf("failed reads: %g", n)
	}
	if n := testutil.ToFloat64(m.byStatus.WithLabelValues(proto.StatusNotFound.String())); n != 1 {
		t.Errorf("failures not found: %g", n)
	}
	total := 0.0
	for _, om := range m.byOp {
		if om != nil {
			total += testutil.ToFloat64(om.ops)
		}
	}
	if total != 3 {
		t.Errorf("%g requests counted in all, want 3 (the non-operation is not counted)", total)
	}
}

func BenchmarkMetricsObserve(b *testing.B) {
	m := newMetrics(&Server{id: clustermap.OSDID(3)})
	req := &proto.Request{Op: proto.OpWrite, Data: make([]byte, 4096)}
	resp := &proto.Response{Status: proto.StatusOK}
	for b.Loop() {
		start := time.Now()
		m.observe(req, resp, time.Since(start))
	}
}

// The store's totals and the client IO by pool are read at scrape time.
func TestMetricsStoreAndPools(t *testing.T) {
	st, err := objstore.Open(objstore.Options{Dir: t.TempDir(), ReserveBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var tx objstore.Txn
	tx.Put("1.0", "x", make([]byte, 4096))
	if err := st.Apply(&tx); err != nil {
		t.Fatal(err)
	}
	m := &clustermap.Map{Epoch: 1, Pools: []clustermap.Pool{{ID: 1, Name: "default", Size: 3, MinSize: 2, PGNum: 8}}}
	s := &Server{id: 3, store: st, view: mapview.Static(m), pgs: map[clustermap.PGID]*pgState{}}
	ok := &proto.Response{Status: proto.StatusOK}
	s.clientIO.count(&proto.Request{Op: proto.OpPut, PG: clustermap.PGID{Pool: 1}, Data: make([]byte, 8192)}, ok)
	s.clientIO.count(&proto.Request{Op: proto.OpPut, PG: clustermap.PGID{Pool: 9}, Data: make([]byte, 10)}, ok) // a removed pool
	fams, err := newMetrics(s).reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				if l.GetName() != "osd" {
					key += "," + l.GetName() + "=" + l.GetValue()
				}
			}
			if c := mt.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
		}
	}
	if got["cairn_osd_pool_client_bytes_total,kind=write,pool=default"] != 8192 || got["cairn_osd_pool_client_requests_total,kind=write,pool=default"] != 1 {
		t.Errorf("pool series: %v", got)
	}
	if got["cairn_osd_commit_log_writes_total"] < 1 || got["cairn_osd_commit_log_commits_total"] < 1 {
		t.Errorf("store series: %v", got)
	}
	for k := range got {
		if strings.Contains(k, "pool=") && !strings.Contains(k, "pool=default") {
			t.Errorf("series of a pool the map does not have: %s", k)
		}
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/metrics.md's OSD section from the registry")

// TestMetricsDocumented keeps docs/metrics.md's table of the OSD's metrics
// equal to what it serves.
func TestMetricsDocumented(t *testing.T) {
	st, err := objstore.Open(objstore.Options{Dir: t.TempDir(), ReserveBytes: -1, FlashCacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := &clustermap.Map{Epoch: 1, Pools: []clustermap.Pool{{ID: 1, Name: "default", Size: 3, MinSize: 2, PGNum: 8}}}
	s := &Server{id: 3, store: st, view: mapview.Static(m), pgs: map[clustermap.PGID]*pgState{}}
	s.clientIO.count(&proto.Request{Op: proto.OpPut, PG: clustermap.PGID{Pool: 1}}, &proto.Response{Status: proto.StatusOK})
	if err := metricsrv.CheckDoc("../../docs/metrics.md", "osd", newMetrics(s).reg, *updateDocs); err != nil {
		t.Fatal(err)
	}
}
