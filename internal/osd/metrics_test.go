package osd

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-storage/cairn/internal/clustermap"
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
