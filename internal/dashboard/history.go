package dashboard

import (
	"fmt"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/report"
)

// Sample is the cluster at one moment: client IO as rates over the time
// since the previous sample, and space.
type Sample struct {
	Time       time.Time `json:"time"`
	ReadOps    float64   `json:"read_ops_per_s"`
	WriteOps   float64   `json:"write_ops_per_s"`
	ReadBytes  float64   `json:"read_bytes_per_s"`
	WriteBytes float64   `json:"write_bytes_per_s"`
	Used       int64     `json:"used_bytes"`
	Total      int64     `json:"total_bytes"`
}

// History keeps the samples of the last window, oldest first.
type History struct {
	window  time.Duration
	samples []Sample
	prev    map[clustermap.OSDID]counted
	prevAt  time.Time
}

// counted is one OSD's counters at the previous sample.
type counted struct {
	started time.Time
	io      report.IOCounters
}

// NewHistory keeps samples for window (the dashboard shows an hour).
func NewHistory(window time.Duration) *History {
	return &History{window: window}
}

// Add records the cluster as the OSDs' stats show it at now. The first
// call only sets the counters' baseline. An OSD that restarted since the
// previous sample counts what it served since it started.
func (h *History) Add(now time.Time, stats map[clustermap.OSDID]report.OSDStats, used, total int64) {
	var sum report.IOCounters
	next := make(map[clustermap.OSDID]counted, len(stats))
	for id, st := range stats {
		next[id] = counted{started: st.Started, io: st.ClientIO}
		d := st.ClientIO
		if p, ok := h.prev[id]; ok && p.started.Equal(st.Started) {
			d = delta(p.io, st.ClientIO)
		} else if st.Started.Before(h.prevAt) {
			continue // first seen, but it ran before: its counters are older than the interval
		}
		sum.ReadOps += d.ReadOps
		sum.WriteOps += d.WriteOps
		sum.ReadBytes += d.ReadBytes
		sum.WriteBytes += d.WriteBytes
	}
	first := h.prev == nil
	dt := now.Sub(h.prevAt).Seconds()
	h.prev, h.prevAt = next, now
	if first || dt <= 0 {
		return
	}
	h.samples = append(h.samples, Sample{Time: now, Used: used, Total: total,
		ReadOps: float64(sum.ReadOps) / dt, WriteOps: float64(sum.WriteOps) / dt,
		ReadBytes: float64(sum.ReadBytes) / dt, WriteBytes: float64(sum.WriteBytes) / dt})
	cut := 0
	for cut < len(h.samples) && now.Sub(h.samples[cut].Time) > h.window {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
}

// delta is b − a, counter by counter; a counter that went back (it should
// not without a restart) counts from zero.
func delta(a, b report.IOCounters) report.IOCounters {
	sub := func(x, y uint64) uint64 {
		if y < x {
			return y
		}
		return y - x
	}
	return report.IOCounters{ReadOps: sub(a.ReadOps, b.ReadOps), WriteOps: sub(a.WriteOps, b.WriteOps),
		ReadBytes: sub(a.ReadBytes, b.ReadBytes), WriteBytes: sub(a.WriteBytes, b.WriteBytes)}
}

// Samples returns a copy of the samples, oldest first.
func (h *History) Samples() []Sample {
	return append([]Sample(nil), h.samples...)
}

// Capacity is the space of the cluster and when it runs out.
type Capacity struct {
	Used  int64 `json:"used_bytes"`
	Total int64 `json:"total_bytes"`
	// Limit is where writes stop (the full ratio of Total).
	Limit int64 `json:"limit_bytes"`
	// GrowthPerDay is the usage trend over the samples (bytes/day;
	// negative: shrinking); FullAt when it reaches Limit at that rate.
	GrowthPerDay float64   `json:"growth_bytes_per_day"`
	FullAt       time.Time `json:"full_at,omitzero"`
	// Text says it in words, with what to do.
	Text string `json:"text"`
}

// minTrend is the shortest span of samples a trend is drawn from.
const minTrend = 2 * time.Minute

// Forecast judges the space from the samples: the trend is the change of
// usage from the oldest sample to the newest.
func Forecast(samples []Sample, used, total int64, now time.Time) Capacity {
	c := Capacity{Used: used, Total: total, Limit: int64(float64(total) * clustermap.FullRatio)}
	if len(samples) < 2 || samples[len(samples)-1].Time.Sub(samples[0].Time) < minTrend {
		c.Text = fmt.Sprintf("%s of %s used; the growth trend shows after %s of samples", humanBytes(used), humanBytes(total), minTrend)
		return c
	}
	a, b := samples[0], samples[len(samples)-1]
	span := b.Time.Sub(a.Time)
	c.GrowthPerDay = float64(b.Used-a.Used) / span.Hours() * 24
	left := c.Limit - used
	switch {
	case left <= 0:
		c.Text = "the cluster is full: writes are refused until data is deleted or OSDs are added"
	case c.GrowthPerDay <= 0:
		c.Text = fmt.Sprintf("%s of %s used; usage did not grow over the last %s", humanBytes(used), humanBytes(total), span.Round(time.Minute))
	case float64(left)/c.GrowthPerDay > 3650:
		c.Text = fmt.Sprintf("%s of %s used, growing %s/day: not full within ten years at that rate", humanBytes(used), humanBytes(total), humanBytes(int64(c.GrowthPerDay)))
	default:
		days := float64(left) / c.GrowthPerDay
		c.FullAt = now.Add(time.Duration(days * 24 * float64(time.Hour))).UTC()
		c.Text = fmt.Sprintf("%s of %s used, growing %s/day (over the last %s): full on %s; add capacity before then",
			humanBytes(used), humanBytes(total), humanBytes(int64(c.GrowthPerDay)), span.Round(time.Minute), c.FullAt.Format("2006-01-02 15:04 MST"))
	}
	return c
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), -1
	for (f >= unit || f <= -unit) && i < 5 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTPE"[i])
}
