package nbdgw

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cairn-storage/cairn/internal/nbd"
)

// Metrics counts what the NBD gateway's clients do, per export (a volume
// or snapshot: as many series as volumes served, never per block), and how
// long each command takes.
type Metrics struct {
	Registry *prometheus.Registry
	cmds     *prometheus.CounterVec   // by export and command
	failed   *prometheus.CounterVec   // by export and command
	bytes    *prometheus.CounterVec   // by export and direction (read, written)
	latency  *prometheus.HistogramVec // by command
	open     *prometheus.GaugeVec     // open devices, by export
}

// NewMetrics returns the gateway's metrics, with the Go runtime's and the
// process's.
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.cmds = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "nbd", Name: "commands_total",
		Help: "NBD commands served, by export and command."}, []string{"export", "command"})
	m.failed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "nbd", Name: "command_failures_total",
		Help: "NBD commands answered with an error, by export and command."}, []string{"export", "command"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "nbd", Name: "bytes_total",
		Help: "Bytes read and written by NBD clients, by export and direction."}, []string{"export", "direction"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "nbd", Name: "command_duration_seconds",
		Help: "Time to serve an NBD command, by command.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, []string{"command"})
	m.open = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "nbd", Name: "open_exports",
		Help: "Exports open by clients (one per connection), by export."}, []string{"export"})
	m.Registry.MustRegister(m.cmds, m.failed, m.bytes, m.latency, m.open,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// measured is a device whose commands are counted under its export.
type measured struct {
	nbd.Device
	m      *Metrics
	export string
}

func (m *Metrics) wrap(d nbd.Device, export string) nbd.Device {
	m.open.WithLabelValues(export).Inc()
	md := &measured{Device: d, m: m, export: export}
	if mp, ok := d.(nbd.Mapper); ok {
		return measuredMapper{md, mp}
	}
	return md
}

// done counts one command that started at start, with n bytes moved.
func (d *measured) done(cmd string, start time.Time, n int, direction string, err error) {
	d.m.cmds.WithLabelValues(d.export, cmd).Inc()
	d.m.latency.WithLabelValues(cmd).Observe(time.Since(start).Seconds())
	if err != nil {
		d.m.failed.WithLabelValues(d.export, cmd).Inc()
	} else if n > 0 {
		d.m.bytes.WithLabelValues(d.export, direction).Add(float64(n))
	}
}

func (d *measured) Read(ctx context.Context, off uint64, length uint32) ([]nbd.Chunk, error) {
	start := time.Now()
	c, err := d.Device.Read(ctx, off, length)
	d.done("read", start, int(length), "read", err)
	return c, err
}

func (d *measured) Write(ctx context.Context, off uint64, data []byte) error {
	start := time.Now()
	err := d.Device.Write(ctx, off, data)
	d.done("write", start, len(data), "written", err)
	return err
}

func (d *measured) Zero(ctx context.Context, off uint64, length uint32, punch bool) error {
	start := time.Now()
	err := d.Device.Zero(ctx, off, length, punch)
	d.done("write_zeroes", start, 0, "", err)
	return err
}

func (d *measured) Trim(ctx context.Context, off uint64, length uint32) error {
	start := time.Now()
	err := d.Device.Trim(ctx, off, length)
	d.done("trim", start, 0, "", err)
	return err
}

func (d *measured) Flush(ctx context.Context) error {
	start := time.Now()
	err := d.Device.Flush(ctx)
	d.done("flush", start, 0, "", err)
	return err
}

func (d *measured) Close() error {
	d.m.open.WithLabelValues(d.export).Dec()
	return d.Device.Close()
}

// measuredMapper keeps block status (nbd.Mapper) working through the
// wrapper for devices that have it.
type measuredMapper struct {
	*measured
	nbd.Mapper
}
