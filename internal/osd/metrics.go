package osd

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cairn-storage/cairn/internal/metricsrv"
	"github.com/cairn-storage/cairn/internal/proto"
)

// The OSD's Prometheus metrics, served on Options.MetricsListen. The IO
// path only adds to counters and a histogram (a few atomic adds per
// request); everything else (PG states, space, recovery left) is read when
// Prometheus scrapes. Labels are bounded: the operation and status names
// of the wire protocol, the PG states; never an object or a PG.
type metrics struct {
	reg      *prometheus.Registry
	ops      *prometheus.CounterVec   // by op
	failed   *prometheus.CounterVec   // by op
	byStatus *prometheus.CounterVec   // failures by status
	latency  *prometheus.HistogramVec // by op
	bytesIn  *prometheus.CounterVec   // by op: request payload
	bytesOut *prometheus.CounterVec   // by op: reply payload
	scrubbed *prometheus.CounterVec   // objects scrubbed, by kind (scrub, deep-scrub)
	found    prometheus.Counter       // inconsistent copies scrub found
	repaired *prometheus.CounterVec   // copies repaired, by how (scrub, read)
	shards   *prometheus.CounterVec   // EC shards recovery wrote, by how (copied, rebuilt)
	partial  [2]prometheus.Counter    // EC partial writes: the version asked, known
	byOp     [256]*opMetrics          // each operation's series, looked up once
}

// opMetrics are one operation's series, so the IO path does no label lookup.
type opMetrics struct {
	ops, failed       prometheus.Counter
	latency           prometheus.Observer
	bytesIn, bytesOut prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	labels := prometheus.Labels{"osd": s.id.String()}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "cairn", Subsystem: "osd", Name: name, Help: help, ConstLabels: labels}
	}
	m.ops = prometheus.NewCounterVec(prometheus.CounterOpts(opts("requests_total", "Requests served, by operation.")), []string{"op"})
	m.failed = prometheus.NewCounterVec(prometheus.CounterOpts(opts("request_failures_total", "Requests answered with an error, by operation.")), []string{"op"})
	m.byStatus = prometheus.NewCounterVec(prometheus.CounterOpts(opts("request_errors_total", "Requests answered with an error, by status.")), []string{"status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "osd", Name: "request_duration_seconds",
		Help: "Time to serve a request, by operation (a write includes its replication).", ConstLabels: labels,
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"op"})
	m.bytesIn = prometheus.NewCounterVec(prometheus.CounterOpts(opts("request_bytes_total", "Payload bytes received in requests, by operation.")), []string{"op"})
	m.bytesOut = prometheus.NewCounterVec(prometheus.CounterOpts(opts("response_bytes_total", "Payload bytes sent in replies, by operation.")), []string{"op"})
	m.scrubbed = prometheus.NewCounterVec(prometheus.CounterOpts(opts("scrubbed_objects_total", "Objects compared across copies by scrub, by kind.")), []string{"kind"})
	m.found = prometheus.NewCounter(prometheus.CounterOpts(opts("inconsistent_objects_total", "Objects whose copies scrub found to differ or fail their checksums.")))
	m.repaired = prometheus.NewCounterVec(prometheus.CounterOpts(opts("repaired_objects_total", "Copies rewritten from a good copy, by how the damage was found (scrub, read).")), []string{"by"})
	m.shards = prometheus.NewCounterVec(prometheus.CounterOpts(opts("recovered_shards_total", "Erasure-coded shards recovery wrote to a position, by how: copied as they were from the OSD that held the position before it moved, or rebuilt from K others.")), []string{"how"})
	partial := prometheus.NewCounterVec(prometheus.CounterOpts(opts("ec_partial_writes_total", "Partial writes of erasure-coded objects this OSD ran as primary, by how it knew the version every position holds: asked of each first, or known from its own last write of the object (a small write then reads only the data it changes, and each parity position XORs in its delta).")), []string{"version"})
	m.partial = [2]prometheus.Counter{partial.WithLabelValues("asked"), partial.WithLabelValues("known")}
	m.reg.MustRegister(m.ops, m.failed, m.byStatus, m.latency, m.bytesIn, m.bytesOut, m.scrubbed, m.found, m.repaired, m.shards, partial,
		newStateCollector(s, labels), newStoreCollector(s, labels),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every series exists from the start, at zero, so a rate over it is
	// defined before the first event (and a dashboard shows a flat line,
	// not "no data").
	for op := proto.Op(0); op < 255; op++ {
		if op.Valid() {
			n := op.String()
			m.byOp[op] = &opMetrics{ops: m.ops.WithLabelValues(n), latency: m.latency.WithLabelValues(n),
				bytesIn: m.bytesIn.WithLabelValues(n), bytesOut: m.bytesOut.WithLabelValues(n), failed: m.failed.WithLabelValues(n)}
		}
	}
	for st := proto.Status(1); st.Valid(); st++ {
		m.byStatus.WithLabelValues(st.String())
	}
	for _, k := range []string{"scrub", "deep-scrub"} {
		m.scrubbed.WithLabelValues(k)
	}
	for _, by := range []string{"scrub", "read"} {
		m.repaired.WithLabelValues(by)
	}
	for _, how := range []string{"copied", "rebuilt"} {
		m.shards.WithLabelValues(how)
	}
	return m
}

// noteShard counts a shard recovery wrote, by how; m may be nil (tests).
func (m *metrics) noteShard(copied bool) {
	if m == nil {
		return
	}
	m.shards.WithLabelValues(map[bool]string{true: "copied", false: "rebuilt"}[copied]).Inc()
}

// notePartial counts a partial EC write, by whether the primary knew the
// version its positions hold; m may be nil (tests).
func (m *metrics) notePartial(known bool) {
	if m == nil {
		return
	}
	if known {
		m.partial[1].Inc()
		return
	}
	m.partial[0].Inc()
}

// observe counts one request.
func (m *metrics) observe(req *proto.Request, resp *proto.Response, took time.Duration) {
	om := m.byOp[req.Op]
	if om == nil {
		return // not an operation: the request was refused as such
	}
	om.ops.Inc()
	om.latency.Observe(took.Seconds())
	if n := len(req.Data) + len(req.Txn); n > 0 {
		om.bytesIn.Add(float64(n))
	}
	if resp == nil {
		return
	}
	if n := len(resp.Data); n > 0 {
		om.bytesOut.Add(float64(n))
	}
	if resp.Status != proto.StatusOK {
		om.failed.Inc()
		m.byStatus.WithLabelValues(resp.Status.String()).Inc()
	}
}

// noteScrub counts what one PG's scrub found; m may be nil (tests).
func (m *metrics) noteScrub(kind string, res scrubResult) {
	if m == nil {
		return
	}
	m.scrubbed.WithLabelValues(kind).Add(float64(res.Objects))
	m.found.Add(float64(res.Errors))
	m.repaired.WithLabelValues("scrub").Add(float64(res.Repaired))
}

// stateCollector reads what the OSD holds when Prometheus scrapes: its
// primary PGs by state, the object copies recovery has left, its store's
// space and objects.
type stateCollector struct {
	s                                *Server
	pgs, left, space, objects, conns *prometheus.Desc
}

func newStateCollector(s *Server, labels prometheus.Labels) *stateCollector {
	return &stateCollector{s: s,
		pgs:     prometheus.NewDesc("cairn_osd_primary_pgs", "Placement groups this OSD leads, by state.", []string{"state"}, labels),
		left:    prometheus.NewDesc("cairn_osd_recovery_objects_left", "Object copies this OSD's primary PGs still have to bring up to date.", nil, labels),
		space:   prometheus.NewDesc("cairn_osd_store_bytes", "The store's device: total, free and used bytes.", []string{"kind"}, labels),
		objects: prometheus.NewDesc("cairn_osd_store_objects", "Objects in the store.", nil, labels),
		conns: prometheus.NewDesc("cairn_osd_connections", "Connections open to this OSD, by transport: its local socket (clients, gateways and OSDs of its host) or TCP.",
			[]string{"transport"}, labels),
	}
}

// pgStates are the states a primary reports (pgSummary), all exported
// even when zero so a dashboard sees them fall to zero.
var pgStates = []string{"active+clean", "active+recovering", "active+undersized", "active+unfound", "peering", "down"}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pgs
	ch <- c.left
	ch <- c.space
	ch <- c.objects
	ch <- c.conns
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	states, _ := c.s.pgSummary()
	for _, st := range pgStates {
		ch <- prometheus.MustNewConstMetric(c.pgs, prometheus.GaugeValue, float64(states[st]), st)
	}
	left := int64(0)
	c.s.pgMu.Lock()
	for _, p := range c.s.pgs {
		left += p.nMissing.Load()
	}
	c.s.pgMu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.left, prometheus.GaugeValue, float64(left))
	if u, err := c.s.store.Usage(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.space, prometheus.GaugeValue, float64(u.TotalBytes), "total")
		ch <- prometheus.MustNewConstMetric(c.space, prometheus.GaugeValue, float64(u.FreeBytes), "free")
		ch <- prometheus.MustNewConstMetric(c.space, prometheus.GaugeValue, float64(u.TotalBytes-u.FreeBytes), "used")
		ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(u.Objects))
	}
	var tcp, local int
	if srv := c.s.rpcSrv.Load(); srv != nil {
		tcp, local = srv.Conns()
	}
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(tcp), "tcp")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(local), "local")
}

// serveMetrics serves /metrics on addr until ctx ends.
func (s *Server) serveMetrics(ctx context.Context, addr string) error {
	at, err := metricsrv.Serve(ctx, addr, s.metrics.reg, s.logf)
	if err != nil {
		return err
	}
	s.logf("%s: metrics on http://%s/metrics", s.id, at)
	return nil
}
