package bench

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// sampleRun is a plausible 30-second 4 MiB write: throughput ramps up,
// one slow second, a latency tail.
func sampleRun() ([]Sample, *Histogram) {
	r := rand.New(rand.NewPCG(7, 8))
	total := NewHistogram()
	var samples []Sample
	for sec := 1; sec <= 30; sec++ {
		h := NewHistogram()
		ops := 40 + r.IntN(10)
		if sec < 3 {
			ops /= 4 - sec
		}
		if sec == 17 {
			ops = 12
		}
		var last time.Duration
		for range ops {
			last = time.Duration(math.Exp(r.NormFloat64()*0.4) * float64(150*time.Millisecond))
			if r.IntN(200) == 0 {
				last *= 8
			}
			h.Record(last)
		}
		total.Merge(h)
		samples = append(samples, Sample{Second: sec, Ops: int64(ops), Bytes: int64(ops) << 22, InFlight: 16, LastLatency: last, Latency: h})
	}
	return samples, total
}

// parseSVG decodes the whole document and returns its element names.
func parseSVG(t *testing.T, doc string) []xml.StartElement {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	var elems []xml.StartElement
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elems = append(elems, se.Copy())
		}
	}
	if len(elems) == 0 || elems[0].Name.Local != "svg" {
		t.Fatal("root element is not <svg>")
	}
	return elems
}

func panels(elems []xml.StartElement) []string {
	var ids []string
	for _, e := range elems {
		var class, id string
		for _, a := range e.Attr {
			switch a.Name.Local {
			case "class":
				class = a.Value
			case "id":
				id = a.Value
			}
		}
		if e.Name.Local == "g" && class == "panel" {
			ids = append(ids, id)
		}
	}
	return ids
}

func TestPlotSVG(t *testing.T) {
	samples, total := sampleRun()
	const title = `cairn bench write <pool "data"> 4 MiB & 16 in flight`
	var b strings.Builder
	if err := PlotSVG(&b, title, samples, total); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	elems := parseSVG(t, doc)
	if !strings.Contains(doc, "cairn bench write &lt;pool &#34;data&#34;&gt; 4 MiB &amp; 16 in flight") {
		t.Error("escaped title missing")
	}
	if got := panels(elems); len(got) != 2 || got[0] != "throughput" || got[1] != "latency" {
		t.Errorf("panels %v, want [throughput latency]", got)
	}
	for _, want := range []string{"MiB/s", "IOPS", "time (s)", "percentile", "99.9%", "99.99%", "p99", "max", "ms"} {
		if !strings.Contains(doc, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "NaN", "Inf", "@import", "href"} {
		if strings.Contains(doc, bad) {
			t.Errorf("chart contains %q", bad)
		}
	}
	if err := os.WriteFile("/tmp/bench-sample.svg", []byte(doc), 0o644); err != nil {
		t.Log(err) // the sample file is a convenience, not part of the contract
	}
}

func TestPlotSVGDegenerate(t *testing.T) {
	one := NewHistogram()
	one.Record(3 * time.Millisecond)
	tiny := NewHistogram()
	tiny.Record(0)
	for name, c := range map[string]struct {
		samples []Sample
		total   *Histogram
	}{
		"empty":        {nil, nil},
		"empty hist":   {nil, NewHistogram()},
		"one sample":   {[]Sample{{Second: 1, Ops: 1, Bytes: 4096}}, one},
		"zero latency": {[]Sample{{Second: 1}, {Second: 2}}, tiny},
	} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			if err := PlotSVG(&b, name, c.samples, c.total); err != nil {
				t.Fatal(err)
			}
			doc := b.String()
			if len(panels(parseSVG(t, doc))) != 2 {
				t.Error("want two panels")
			}
			if strings.Contains(doc, "NaN") || strings.Contains(doc, "Inf") {
				t.Errorf("NaN/Inf in chart:\n%s", doc)
			}
		})
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestPlotSVGWriteError(t *testing.T) {
	if err := PlotSVG(failWriter{}, "x", nil, nil); err == nil {
		t.Fatal("writer error not returned")
	}
}
