package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Chart geometry (SVG user units). Fixed so charts of different runs can be
// put side by side and compared.
const (
	svgW      = 900
	svgH      = 780
	plotLeft  = 90
	plotRight = svgW - 90 // room for the IOPS axis
	colorBW   = "#1f77b4"
	colorIOPS = "#d62728"
	colorLat  = "#2ca02c"
	gridColor = "#e0e0e0"
	axisColor = "#444"
	fontAttrs = `font-family="sans-serif" font-size="12" fill="#222"`
)

// panel is a plot area in SVG coordinates.
type panel struct{ x0, y0, x1, y1 float64 }

// PlotSVG writes a self-contained SVG chart of a run (no scripts, no
// external fonts or files, so it can be attached to a bug report or served
// as-is): a throughput panel (MiB/s on the left axis, IOPS on the right, per
// second) and a latency-distribution panel (latency on a log scale against
// percentile on a "nines" scale, so the tail is as visible as the median).
// Empty inputs give a chart that says "no data" rather than an error; the
// only error is the writer's.
func PlotSVG(w io.Writer, title string, samples []Sample, total *Histogram) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="32" text-anchor="middle" font-family="sans-serif" font-size="18" font-weight="bold" fill="#111">%s</text>`+"\n", svgW/2, esc(title))

	throughputPanel(&b, panel{plotLeft, 90, plotRight, 350}, samples)
	latencyPanel(&b, panel{plotLeft, 460, plotRight, 720}, total)

	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func throughputPanel(b *strings.Builder, p panel, samples []Sample) {
	b.WriteString(`<g class="panel" id="throughput">` + "\n")
	defer b.WriteString("</g>\n")
	panelTitle(b, p, "Throughput per second")

	maxSec, maxBW, maxIOPS := 1.0, 0.0, 0.0
	for _, s := range samples {
		maxSec = max(maxSec, float64(s.Second))
		maxBW = max(maxBW, float64(s.Bytes)/MiB)
		maxIOPS = max(maxIOPS, float64(s.Ops))
	}
	// One tick count for both y axes so the grid lines serve both.
	const yTicks = 5
	bwStep := niceStep(maxBW / yTicks)
	iopsStep := niceStep(maxIOPS / yTicks)
	bwTop, iopsTop := bwStep*yTicks, iopsStep*yTicks
	xStep := math.Max(1, math.Ceil(niceStep(maxSec/10))) // whole seconds
	xTop := math.Ceil(maxSec/xStep) * xStep

	xPos := func(sec float64) float64 { return p.x0 + (p.x1-p.x0)*sec/xTop }
	yBW := func(v float64) float64 { return p.y1 - (p.y1-p.y0)*v/bwTop }
	yIOPS := func(v float64) float64 { return p.y1 - (p.y1-p.y0)*v/iopsTop }

	for i := 0; i <= yTicks; i++ {
		y := yBW(bwStep * float64(i))
		line(b, p.x0, y, p.x1, y, gridColor, "")
		text(b, p.x0-8, y+4, "end", fmtTick(bwStep*float64(i)))
		text(b, p.x1+8, y+4, "start", fmtTick(iopsStep*float64(i)))
	}
	for t := 0.0; t <= xTop+xStep/2; t += xStep {
		x := xPos(t)
		line(b, x, p.y1, x, p.y1+5, axisColor, "")
		text(b, x, p.y1+20, "middle", fmtTick(t))
	}
	frame(b, p)
	text(b, (p.x0+p.x1)/2, p.y1+40, "middle", "time (s)")
	vtext(b, p.x0-60, (p.y0+p.y1)/2, "MiB/s", colorBW)
	vtext(b, p.x1+65, (p.y0+p.y1)/2, "IOPS", colorIOPS)

	if len(samples) == 0 {
		text(b, (p.x0+p.x1)/2, (p.y0+p.y1)/2, "middle", "no data")
		return
	}
	bw := make([][2]float64, len(samples))
	ops := make([][2]float64, len(samples))
	for i, s := range samples {
		x := xPos(float64(s.Second))
		bw[i] = [2]float64{x, yBW(float64(s.Bytes) / MiB)}
		ops[i] = [2]float64{x, yIOPS(float64(s.Ops))}
	}
	polyline(b, bw, colorBW, "")
	polyline(b, ops, colorIOPS, "6,4")
	legend(b, p, []legendItem{{"MiB/s (left)", colorBW, ""}, {"IOPS (right)", colorIOPS, "6,4"}})
}

// maxNines is the right edge of the latency panel: 99.99%.
const maxNines = 4

func latencyPanel(b *strings.Builder, p panel, h *Histogram) {
	b.WriteString(`<g class="panel" id="latency">` + "\n")
	defer b.WriteString("</g>\n")
	panelTitle(b, p, "Latency distribution")

	xPos := func(nines float64) float64 { return p.x0 + (p.x1-p.x0)*nines/maxNines }
	for n := 0; n <= maxNines; n++ {
		x := xPos(float64(n))
		line(b, x, p.y0, x, p.y1, gridColor, "")
		text(b, x, p.y1+20, "middle", ninesLabels[n])
	}
	text(b, (p.x0+p.x1)/2, p.y1+40, "middle", "percentile")

	if h.Count() == 0 {
		frame(b, p)
		text(b, (p.x0+p.x1)/2, (p.y0+p.y1)/2, "middle", "no data")
		return
	}

	// Log y axis over whole decades around [min, max], in nanoseconds.
	lo := math.Max(1, float64(h.Min()))
	hi := math.Max(lo, float64(h.Max()))
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	yPos := func(ns float64) float64 {
		ns = math.Max(ns, 1)
		return p.y1 - (p.y1-p.y0)*(math.Log10(ns)-dLo)/(dHi-dLo)
	}
	// Label 2× and 5× too when there are few decades, so the axis is readable.
	mults := []float64{1}
	if dHi-dLo <= 2 {
		mults = []float64{1, 2, 5}
	}
	for d := dLo; d <= dHi; d++ {
		for _, m := range mults {
			v := m * math.Pow(10, d)
			if math.Log10(v) > dHi+1e-9 {
				break
			}
			y := yPos(v)
			line(b, p.x0, y, p.x1, y, gridColor, "")
			text(b, p.x0-8, y+4, "end", fmtTickDuration(v))
		}
	}
	frame(b, p)
	vtext(b, p.x0-70, (p.y0+p.y1)/2, "latency", colorLat)

	const steps = 400
	pts := make([][2]float64, 0, steps+1)
	for i := 0; i <= steps; i++ {
		nines := maxNines * float64(i) / steps
		q := 1 - math.Pow(10, -nines)
		pts = append(pts, [2]float64{xPos(nines), yPos(float64(h.Quantile(q)))})
	}
	polyline(b, pts, colorLat, "")

	// Mark the percentiles the summary prints, with their values.
	for _, m := range []struct {
		label string
		q     float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}} {
		v := h.Quantile(m.q)
		x, y := xPos(-math.Log10(1-m.q)), yPos(float64(v))
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", f(x), f(y), colorLat)
		// Below-right of the point lies under the (rising) curve: free space.
		text(b, x+6, y+16, "start", m.label+" "+fmtTickDuration(float64(v)))
	}
	maxY := yPos(float64(h.Max()))
	fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3.5" fill="none" stroke="%s"/>`+"\n", f(p.x1), f(maxY), colorLat)
	text(b, p.x1-6, maxY-8, "end", "max "+fmtTickDuration(float64(h.Max())))

	legend(b, p, []legendItem{{fmt.Sprintf("latency at percentile (%d ops)", h.Count()), colorLat, ""}})
}

// ninesLabels are the x ticks of the latency panel, one per nine.
var ninesLabels = [maxNines + 1]string{"0%", "90%", "99%", "99.9%", "99.99%"}

type legendItem struct{ label, color, dash string }

// legend is drawn in the strip above the plot, right-aligned, so it never
// hides data.
func legend(b *strings.Builder, p panel, items []legendItem) {
	x := p.x1
	y := p.y0 - 12
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		x -= 7 * float64(utf8.RuneCountInString(it.label)) // rough width of 12px sans-serif
		text(b, x, y, "start", it.label)
		line(b, x-28, y-4, x-6, y-4, it.color, it.dash)
		x -= 28 + 18
	}
}

func panelTitle(b *strings.Builder, p panel, s string) {
	fmt.Fprintf(b, `<text x="%s" y="%s" font-family="sans-serif" font-size="14" font-weight="bold" fill="#111">%s</text>`+"\n", f(p.x0), f(p.y0-12), esc(s))
}

func frame(b *strings.Builder, p panel) {
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="%s"/>`+"\n",
		f(p.x0), f(p.y0), f(p.x1-p.x0), f(p.y1-p.y0), axisColor)
}

func line(b *strings.Builder, x0, y0, x1, y1 float64, color, dash string) {
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1"%s/>`+"\n",
		f(x0), f(y0), f(x1), f(y1), color, dashAttr(dash))
}

func polyline(b *strings.Builder, pts [][2]float64, color, dash string) {
	if len(pts) == 1 { // a lone point is invisible as a line
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", f(pts[0][0]), f(pts[0][1]), color)
		return
	}
	b.WriteString(`<polyline fill="none" stroke="` + color + `" stroke-width="2" stroke-linejoin="round"` + dashAttr(dash) + ` points="`)
	for i, pt := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f(pt[0]) + "," + f(pt[1]))
	}
	b.WriteString(`"/>` + "\n")
}

func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + dash + `"`
}

func text(b *strings.Builder, x, y float64, anchor, s string) {
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="%s" %s>%s</text>`+"\n", f(x), f(y), anchor, fontAttrs, esc(s))
}

// vtext is a rotated axis label.
func vtext(b *strings.Builder, x, y float64, s, color string) {
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)" font-family="sans-serif" font-size="13" fill="%s">%s</text>`+"\n",
		f(x), f(y), f(x), f(y), color, esc(s))
}

// f formats a coordinate compactly; 0.1 unit is finer than any screen pixel.
func f(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // strings.Builder never fails
	return b.String()
}

// niceStep rounds raw up to 1, 2, 2.5 or 5 × 10^k so tick labels are round.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// fmtTickDuration labels a nanosecond value with the unit that keeps it
// short: 500 ns, 20 µs, 1.5 ms, 10 s.
func fmtTickDuration(ns float64) string {
	type u struct {
		name string
		div  float64
	}
	for _, x := range []u{{"s", float64(time.Second)}, {"ms", float64(time.Millisecond)}, {"µs", float64(time.Microsecond)}} {
		if ns >= x.div {
			return strconv.FormatFloat(roundSig(ns/x.div, 3), 'g', -1, 64) + " " + x.name
		}
	}
	return strconv.FormatFloat(roundSig(ns, 3), 'g', -1, 64) + " ns"
}

func roundSig(v float64, digits int) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, float64(digits)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}
