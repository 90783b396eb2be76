package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needPrometheus fails (with CAIRN_REQUIRE_TOOLS, as .ci/run sets) or
// skips a test that needs Prometheus and promtool.
func needPrometheus(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CAIRN_REQUIRE_TOOLS") != "" {
				t.Fatalf("%s is not installed (apt-get install prometheus)", tool)
			}
			t.Skipf("%s is not installed (apt-get install prometheus)", tool)
		}
	}
}

// TestOSDMetricsScrapedByPrometheus: an OSD started with --metrics-listen
// serves metrics that promtool accepts, and a real Prometheus scraping it
// sees the requests it served, its PGs by state and its store's space.
func TestOSDMetricsScrapedByPrometheus(t *testing.T) {
	needPrometheus(t)
	c := startCluster(t, clusterOpts{})
	port := freePorts(t, 2)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	c.kill("osd.0")
	c.restart("osd.0", "--metrics-listen", metricsAddr)
	c.waitHealthy(60*time.Second, "with osd.0 serving metrics")

	ctx := context.Background()
	p := c.pool("default")
	for i := range 60 {
		name := fmt.Sprintf("m-%02d", i)
		if err := p.Put(ctx, name, []byte(strings.Repeat("x", 5000))); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Get(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	body := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{`cairn_osd_requests_total{op="replicate",osd="osd.0"}`, `cairn_osd_primary_pgs{osd="osd.0",state="active+clean"}`,
		`cairn_osd_store_bytes{kind="total",osd="osd.0"}`, `cairn_osd_request_duration_seconds_bucket{op=`} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, body)
		}
	}
	lint := exec.Command("promtool", "check", "metrics")
	lint.Stdin = strings.NewReader(body)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}

	prom := startPrometheus(t, metricsAddr, port+1)
	// Requests go on while Prometheus scrapes, so rates have something to show.
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; wctx.Err() == nil; i++ {
			p.Put(wctx, fmt.Sprintf("m-%02d", i%60), []byte(strings.Repeat("y", 5000)))
		}
	}()
	defer func() { stop(); <-done }()
	for _, q := range []struct {
		query string
		min   float64
	}{
		{`sum(cairn_osd_requests_total{osd="osd.0"})`, 60},
		{`sum(cairn_osd_primary_pgs{osd="osd.0"})`, 1},
		{`cairn_osd_store_bytes{osd="osd.0",kind="total"}`, 1 << 20},
		{`histogram_quantile(0.99, sum by (le) (rate(cairn_osd_request_duration_seconds_bucket{osd="osd.0"}[1m])))`, 0},
	} {
		v := promQuery(t, prom, q.query, 30*time.Second)
		t.Logf("%s = %g", q.query, v)
		if v < q.min {
			t.Errorf("%s = %g, want at least %g", q.query, v, q.min)
		}
	}
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return string(b)
}

// startPrometheus runs a Prometheus that scrapes target every second, on
// port, until the test ends; it returns its address.
func startPrometheus(t *testing.T, target string, port int) string {
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cairn\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	log, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	})
	return addr
}

// promQuery asks Prometheus for an instant query until it has a value,
// and returns it.
func promQuery(t *testing.T, addr, query string, within time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(query))
		if err == nil {
			var r struct {
				Status string
				Data   struct {
					Result []struct {
						Value [2]any
					}
				}
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if json.Unmarshal(b, &r) == nil && r.Status == "success" && len(r.Data.Result) > 0 {
				if s, ok := r.Data.Result[0].Value[1].(string); ok {
					if v, err := strconv.ParseFloat(s, 64); err == nil && v == v { // not NaN
						return v
					}
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("Prometheus has no value for %s after %s (last answer: %s)", query, within, last)
	return 0
}
