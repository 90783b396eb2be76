package s3gw

import (
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics counts the gateway's requests by S3 operation (operation's
// names, "Unknown" for none) and outcome (the S3 error code, "OK" for
// success): both bounded sets, never a bucket or a key.
type Metrics struct {
	Registry *prometheus.Registry
	requests *prometheus.CounterVec   // by operation and code
	latency  *prometheus.HistogramVec // by operation
	bytes    *prometheus.CounterVec   // by operation and direction (in, out)
	// md5Bodies counts large PUT bodies by how their MD5 was hashed.
	md5Bodies *prometheus.CounterVec
}

// NewMetrics returns the gateway's metrics, with the Go runtime's and the
// process's.
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "s3", Name: "requests_total",
		Help: "S3 requests answered, by operation and outcome (the S3 error code, or OK)."}, []string{"operation", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "s3", Name: "request_duration_seconds",
		Help: "Time from a request's headers to the end of its answer, by operation.", Buckets: prometheus.ExponentialBuckets(100e-6, 2, 20)}, []string{"operation"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "s3", Name: "bytes_total",
		Help: "Body bytes received (in) and sent (out), by operation."}, []string{"operation", "direction"})
	m.md5Bodies = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "s3", Name: "md5_bodies_total",
		Help: "PUT bodies of 1 MiB or more, by how their ETag MD5 was hashed: on the multi-lane server with other bodies (lanes) or alone (its group too small for the lanes, or every lane in use)."}, []string{"hashing"})
	m.Registry.MustRegister(m.requests, m.latency, m.bytes, m.md5Bodies,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.md5Bodies.WithLabelValues("lanes")
	m.md5Bodies.WithLabelValues("alone")
	for op := range handlers {
		m.latency.WithLabelValues(op)
		m.requests.WithLabelValues(op, "OK")
		m.bytes.WithLabelValues(op, "in")
		m.bytes.WithLabelValues(op, "out")
	}
	return m
}

// measured is a request being counted: its body's bytes as the handler
// reads them, its answer's as it writes them.
type measured struct {
	http.ResponseWriter
	in, out int64
	body    io.ReadCloser
}

func (m *measured) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	m.in += int64(n)
	return n, err
}

func (m *measured) Close() error { return m.body.Close() }

func (m *measured) Write(p []byte) (int, error) {
	n, err := m.ResponseWriter.Write(p)
	m.out += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (m *measured) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// observe counts one answered request.
func (m *Metrics) observe(op, code string, start time.Time, w *measured) {
	if op == "" {
		op = "Unknown"
	}
	m.requests.WithLabelValues(op, code).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	m.bytes.WithLabelValues(op, "in").Add(float64(w.in))
	m.bytes.WithLabelValues(op, "out").Add(float64(w.out))
}
