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
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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

// TestMetricsScrapedByPrometheus: cairn dev gives every OSD, the NBD and
// S3 gateways and the mon a metrics address and lists it in dev.json; their
// metrics pass promtool's lint, and a real Prometheus scraping them all
// sees the requests the OSDs served, their PGs by state and their space,
// the NBD writes qemu-io made, the S3 requests an SDK made, and etcd's
// leader.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	t.Parallel()
	needPrometheus(t)
	needTools(t, "qemu-io")
	c := startCluster(t, clusterOpts{metrics: true, s3: true})
	var targets []string
	for _, p := range c.devJSON() {
		if strings.HasPrefix(p.Name, "osd.") || p.Name == "nbd" || p.Name == "mon.a" || p.Name == "s3" {
			if p.Metrics == "" {
				t.Fatalf("%s has no metrics address in dev.json", p.Name)
			}
			targets = append(targets, p.Metrics)
		}
	}
	osd0, nbdMetrics := c.devJSON()["osd.0"].Metrics, c.devJSON()["nbd"].Metrics

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
	body := httpGet(t, "http://"+osd0+"/metrics")
	for _, want := range []string{`cairn_osd_requests_total{op="replicate",osd="osd.0"}`, `cairn_osd_primary_pgs{osd="osd.0",state="active+clean"}`,
		`cairn_osd_store_bytes{kind="total",osd="osd.0"}`, `cairn_osd_request_duration_seconds_bucket{op=`} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %s:\n%s", want, body)
		}
	}
	promLint(t, body)
	nbdWrites(t, c, nbdMetrics)
	s3Requests(t, c)

	prom := startPrometheus(t, targets, freePorts(t, 1))
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
		{`sum(cairn_osd_requests_total)`, 120},
		{`count(count by (osd) (cairn_osd_primary_pgs))`, float64(len(targets) - 3)}, // all but nbd, s3 and the mon
		{`max(etcd_server_has_leader)`, 1},
		{`sum(cairn_osd_primary_pgs)`, 1},
		{`min(cairn_osd_store_bytes{kind="total"})`, 1 << 20},
		{`histogram_quantile(0.99, sum by (le) (rate(cairn_osd_request_duration_seconds_bucket[1m])))`, 0},
		{`sum(cairn_nbd_bytes_total{export="default/metrics",direction="written"})`, 1 << 20},
		{`sum(cairn_nbd_commands_total{export="default/metrics",command="write"})`, 1},
		{`sum(cairn_s3_requests_total{operation="PutObject",code="OK"})`, 3},
		{`sum(cairn_s3_requests_total{operation="GetObject",code="NoSuchKey"})`, 1},
		{`sum(cairn_s3_bytes_total{operation="PutObject",direction="in"})`, 3 * 4096},
	} {
		v := promQuery(t, prom, q.query, q.min, 30*time.Second)
		t.Logf("%s = %g", q.query, v)
		if v < q.min {
			t.Errorf("%s = %g, want at least %g", q.query, v, q.min)
		}
	}
	checkDashboard(t, prom)
}

// checkDashboard runs every query of the Grafana dashboard in the repo
// against Prometheus: each must be valid PromQL over series the daemons
// export (most have data by now; an empty one must at least name real
// metrics).
func checkDashboard(t *testing.T, prom string) {
	b, err := os.ReadFile("../dashboards/grafana-cairn.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboards/grafana-cairn.json: %v", err)
	}
	names := promMetricNames(t, prom)
	withData := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRefs.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				if !names[m] && !names[base+"_bucket"] {
					t.Errorf("panel %q uses %s, which no daemon exports", p.Title, m)
				}
			}
			if n := promSeries(t, prom, tg.Expr); n > 0 {
				withData++
			}
		}
	}
	t.Logf("dashboard: %d of its queries have data", withData)
	if withData < 8 {
		t.Errorf("only %d dashboard queries have data", withData)
	}
}

var metricRefs = regexp.MustCompile(`\b(cairn|process)_[a-z0-9_]+`)

// promMetricNames lists the metric names Prometheus has scraped.
func promMetricNames(t *testing.T, prom string) map[string]bool {
	var r struct {
		Status string
		Data   []string
	}
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+prom+"/api/v1/label/__name__/values")), &r); err != nil || r.Status != "success" {
		t.Fatalf("metric names from Prometheus: %v %s", err, r.Status)
	}
	out := map[string]bool{}
	for _, n := range r.Data {
		out[n] = true
	}
	return out
}

// promSeries runs a query and returns how many series it gives; an invalid
// query fails the test.
func promSeries(t *testing.T, prom, query string) int {
	var r struct {
		Status, Error string
		Data          struct{ Result []json.RawMessage }
	}
	resp, err := http.Get("http://" + prom + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("dashboard query %s: %v %s %s", query, err, r.Status, r.Error)
	}
	return len(r.Data.Result)
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

// nbdWrites writes 2 MiB to a new volume with qemu-io through cairn
// dev's NBD gateway; the gateway's metrics must show it.
func nbdWrites(t *testing.T, c *cluster, metricsAddr string) {
	if out, err := c.cli(nil, "volume", "create", "default/metrics", "--size", "64M"); err != nil {
		t.Fatalf("volume create: %v\n%s", err, out)
	}
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 0 2M", c.nbdURI("default/metrics"))
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

// promQuery asks Prometheus for an instant query until it has a value of
// at least min (a target scraped a second later may still be missing), and
// returns the last value it had.
func promQuery(t *testing.T, addr, query string, min float64, within time.Duration) float64 {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	var got float64
	var have bool
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
						got, have = v, true
						if v >= min {
							return v
						}
					}
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !have {
		t.Fatalf("Prometheus has no value for %s after %s (last answer: %s)", query, within, last)
	}
	return got
}

// s3Requests makes the S3 gateway answer three PUTs and a GET of a
// missing key, and checks its metrics pass promtool's lint.
func s3Requests(t *testing.T, c *cluster) {
	t.Helper()
	cl := sdkClient(c.s3Info())
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("metrics")}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("metrics"), Key: aws.String(fmt.Sprint(i)),
			Body: strings.NewReader(strings.Repeat("s", 4096))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("metrics"), Key: aws.String("missing")}); err == nil {
		t.Fatal("GET of a missing key succeeded")
	}
	promLint(t, httpGet(t, "http://"+c.devJSON()["s3"].Metrics+"/metrics"))
}
