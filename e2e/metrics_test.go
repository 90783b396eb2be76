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

// TestMetricsScrapedByPrometheus: an OSD and an NBD gateway started with
// --metrics-listen serve metrics that promtool accepts, and a real
// Prometheus scraping them sees the requests the OSD served, its PGs by
// state and its store's space, and the NBD writes qemu-io made.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	needPrometheus(t)
	needTools(t, "qemu-io")
	c := startCluster(t, clusterOpts{})
	port := freePorts(t, 4)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	nbdAddr, nbdMetrics := fmt.Sprintf("127.0.0.1:%d", port+2), fmt.Sprintf("127.0.0.1:%d", port+3)
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
	promLint(t, body)

	nbdWrites(t, c, nbdAddr, nbdMetrics)
	prom := startPrometheus(t, []string{metricsAddr, nbdMetrics}, port+1)
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
		{`sum(cairn_nbd_bytes_total{export="default/metrics",direction="written"})`, 1 << 20},
		{`sum(cairn_nbd_commands_total{export="default/metrics",command="write"})`, 1},
	} {
		v := promQuery(t, prom, q.query, 30*time.Second)
		t.Logf("%s = %g", q.query, v)
		if v < q.min {
			t.Errorf("%s = %g, want at least %g", q.query, v, q.min)
		}
	}
}

// promLint fails the test if promtool finds fault with an exposition.
func promLint(t *testing.T, body string) {
	t.Helper()
	lint := exec.Command("promtool", "check", "metrics")
	lint.Stdin = strings.NewReader(body)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// nbdWrites starts a cairn nbd with metrics and writes 2 MiB to a new
// volume with qemu-io through it; the gateway's metrics must show it.
func nbdWrites(t *testing.T, c *cluster, addr, metricsAddr string) {
	if out, err := c.cli(nil, "volume", "create", "default/metrics", "--size", "64M"); err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	srv := exec.Command(cairnBin, "--conf", c.conf, "nbd", "--listen", addr, "--metrics-listen", metricsAddr)
	srv.Stdout, srv.Stderr = io.Discard, io.Discard
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	c.extra = append(c.extra, srv)
	uri := "nbd://" + addr + "/default/metrics"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command("qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 2M", uri).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu-io write through %s: %v\n%s", uri, err, out)
		}
	}
	body := httpGet(t, "http://"+metricsAddr+"/metrics")
	if !strings.Contains(body, `cairn_nbd_bytes_total{direction="written",export="default/metrics"}`) {
		t.Fatalf("the NBD gateway's metrics lack the writes:\n%s", body)
	}
	promLint(t, body)
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

// startPrometheus runs a Prometheus that scrapes targets every second, on
// port, until the test ends; it returns its address.
func startPrometheus(t *testing.T, targets []string, port int) string {
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cairn\n    static_configs:\n      - targets: ['%s']\n", strings.Join(targets, "', '"))
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
