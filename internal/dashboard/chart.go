package dashboard

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// series is one line of a chart: its name, colour and value per sample.
type series struct {
	name, color string
	value       func(Sample) float64
}

var opsSeries = []series{
	{"reads/s", "#3b6fd6", func(s Sample) float64 { return s.ReadOps }},
	{"writes/s", "#e67e22", func(s Sample) float64 { return s.WriteOps }},
}

var byteSeries = []series{
	{"read", "#3b6fd6", func(s Sample) float64 { return s.ReadBytes }},
	{"written", "#e67e22", func(s Sample) float64 { return s.WriteBytes }},
}

const chartW, chartH, chartPad = 540.0, 120.0, 40.0

// chart draws the samples as an SVG line chart: time across (the span of
// the samples), zero to the largest value up.
func chart(title string, samples []Sample, ss []series) template.HTML {
	samples = thin(samples, maxPoints)
	top := 0.0
	for _, s := range samples {
		for _, se := range ss {
			top = max(top, se.value(s))
		}
	}
	top = niceCeil(top)
	t0, t1 := samples[0].Time, samples[len(samples)-1].Time
	span := t1.Sub(t0).Seconds()
	x := func(i int) float64 {
		if span <= 0 {
			return chartPad + chartW
		}
		return chartPad + chartW*samples[i].Time.Sub(t0).Seconds()/span
	}
	y := func(v float64) float64 { return 10 + chartH*(1-v/top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" aria-label="%s" width="%.0f" height="%.0f">`, title, chartW+chartPad+10, chartH+34)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#ccc"/>`, chartPad, y(0), chartPad+chartW, y(0))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="10" x2="%.0f" y2="%.0f" stroke="#ccc"/>`, chartPad, chartPad, y(0))
	fmt.Fprintf(&b, `<text x="2" y="14">%s</text><text x="2" y="%.0f">0</text>`, axisLabel(title, top), y(0))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`, chartPad, chartH+30, t0.Format("15:04"))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`, chartPad+chartW, chartH+30, t1.Format("15:04 MST"))
	for k, se := range ss {
		pts := make([]string, len(samples))
		for i, s := range samples {
			pts[i] = fmt.Sprintf("%.1f,%.1f", x(i), y(se.value(s)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, se.color, strings.Join(pts, " "))
		last := se.value(samples[len(samples)-1])
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" style="fill:%s">%s %s</text>`, chartPad+120+float64(k)*190, chartH+30, se.color, se.name, valueLabel(title, last))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func axisLabel(title string, top float64) string {
	if title == "throughput" {
		return humanBytes(int64(top)) + "/s"
	}
	return fmt.Sprintf("%.0f", top)
}

func valueLabel(title string, v float64) string {
	if title == "throughput" {
		return humanBytes(int64(v)) + "/s now"
	}
	if v < 10 {
		return fmt.Sprintf("%.1f now", v)
	}
	return fmt.Sprintf("%.0f now", v)
}

// maxPoints bounds the points of a line, whatever the sampling rate.
const maxPoints = 360

// thin keeps at most n samples: each kept one stands for a run of them,
// with the run's largest rates (a peak stays visible) and its last time.
func thin(samples []Sample, n int) []Sample {
	if len(samples) <= n {
		return samples
	}
	step := (len(samples) + n - 1) / n
	out := make([]Sample, 0, n)
	for i := 0; i < len(samples); i += step {
		run := samples[i:min(i+step, len(samples))]
		k := run[len(run)-1]
		for _, s := range run {
			k.ReadOps, k.WriteOps = max(k.ReadOps, s.ReadOps), max(k.WriteOps, s.WriteOps)
			k.ReadBytes, k.WriteBytes = max(k.ReadBytes, s.ReadBytes), max(k.WriteBytes, s.WriteBytes)
		}
		out = append(out, k)
	}
	return out
}
