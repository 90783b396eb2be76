package metricsrv

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestTableAndSection(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_x_total", Help: "Things | stuff."}, []string{"kind"})
	c.WithLabelValues("a").Inc()
	reg.MustRegister(c, prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_other", Help: "not ours"}))
	tab, err := Table(reg, "cairn_")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab, "| `cairn_x_total` | counter | kind | Things \\| stuff. |") || strings.Contains(tab, "go_other") {
		t.Fatalf("table:\n%s", tab)
	}
	doc := "head\n<!-- begin x -->\nold\n<!-- end x -->\ntail\n"
	got, ok := Section(doc, "x", "new\n")
	if !ok || got != "head\n<!-- begin x -->\nnew\n<!-- end x -->\ntail\n" {
		t.Fatalf("section: %q", got)
	}
	if _, ok := Section(doc, "y", "new\n"); ok {
		t.Fatal("found a section that is not there")
	}
}
