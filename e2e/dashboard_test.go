package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/dashboard"
)

// TestDashboardInChromium loads the mon's web dashboard in headless
// Chromium at three moments: a healthy cluster with a volume and client
// writes, right after a corrupted copy was repaired on read, and with an
// OSD killed (its PGs degraded), and once it is marked out and its data
// copied again. Each page's
// DOM, as Chromium rendered it, must name what matters then; the
// screenshots go to $CAIRN_SCREENSHOTS (default: the test's temp dir).
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	browser := needChromium(t)
	c := startCluster(t, clusterOpts{dashboard: true, downOut: 10 * time.Minute})
	url := fmt.Sprintf("http://127.0.0.1:%d/", c.dashPort)
	shots := os.Getenv("CAIRN_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	ctx := context.Background()
	p := c.pool("default")
	if _, err := c.cli(nil, "volume", "create", "default/vm1", "--size", "1G"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		name := fmt.Sprintf("obj-%03d", i)
		if err := p.Put(ctx, name, payload(name, 0, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	v := waitView(t, url, "writes sampled and the volume listed", func(v dashboard.View) bool {
		return v.Status.Health == "HEALTH_OK" && len(v.Catalog.Volumes) == 1 && maxWriteOps(v) > 0
	})
	t.Logf("healthy: %.0f writes/s at the peak sample, %d samples", maxWriteOps(v), len(v.History))
	dom := render(t, browser, url, filepath.Join(shots, "dashboard-healthy.png"))
	requireAll(t, "healthy", dom, "HEALTH_OK", "All is well", "default/vm1", "osd.5", "writes/s", "<polyline")

	data := payload("victim", 0, mib)
	if err := p.Put(ctx, "victim", data); err != nil {
		t.Fatal(err)
	}
	primary := fmt.Sprintf("osd.%d", actingOf(t, c, "default", "victim")[0])
	flipByteInDataFile(t, c.procs[primary].Data, mib, 4242)
	if got, err := p.Get(ctx, "victim"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after corrupting the primary's copy: %v", err)
	}
	waitView(t, url, "the repair reported", func(v dashboard.View) bool { return hasCheck(v, "OBJECT_REPAIRED") })
	dom = render(t, browser, url, filepath.Join(shots, "dashboard-repaired.png"))
	requireAll(t, "after the repair", dom, "HEALTH_WARN", "OBJECT_REPAIRED", "victim", primary)

	c.kill("osd.1")
	v = waitView(t, url, "osd.1 down with its PGs degraded", func(v dashboard.View) bool {
		return v.Status.OSDsUp == 5 && v.Status.PGsOK < v.Status.PGs && hasCheck(v, "OSD_DOWN")
	})
	dom = render(t, browser, url, filepath.Join(shots, "dashboard-osd-down.png"))
	requireAll(t, "osd.1 down", dom, "HEALTH_WARN", "OSD_DOWN", `class="down">down`, "osd.1", "degraded")

	if _, err := c.cli(nil, "osd", "out", "1"); err != nil {
		t.Fatal(err)
	}
	sawWork := false
	v = waitView(t, url, "backfill done with osd.1 out", func(v dashboard.View) bool {
		sawWork = sawWork || len(v.Status.Work) > 0
		return v.Status.OSDsIn == 5 && v.Status.PGsOK == v.Status.PGs
	})
	dom = render(t, browser, url, filepath.Join(shots, "dashboard-backfilled.png"))
	requireAll(t, "osd.1 out, its data copied again", dom, `class="down">down`, `class="out">out`, fmt.Sprintf("%d/%d PGs active+clean", v.Status.PGs, v.Status.PGs))
	t.Logf("after backfill: %d/%d PGs active+clean (recovery seen in progress: %v); screenshots in %s", v.Status.PGsOK, v.Status.PGs, sawWork, shots)
}

func needChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CAIRN_REQUIRE_TOOLS") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// render loads url in headless Chromium, saves a screenshot to png and
// returns the DOM as Chromium built it.
func render(t *testing.T, browser, url, png string) string {
	t.Helper()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, append(append(args, extra...), url)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
		}
		return out
	}
	run("--window-size=1280,1500", "--screenshot="+png)
	if fi, err := os.Stat(png); err != nil || fi.Size() < 10<<10 {
		t.Fatalf("screenshot %s: %v (an empty page?)", png, err)
	}
	return string(run("--dump-dom"))
}

func requireAll(t *testing.T, what, dom string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(dom, w) {
			t.Errorf("%s: the rendered page lacks %q", what, w)
		}
	}
	if t.Failed() {
		t.Fatalf("%s: page:\n%s", what, dom)
	}
}

// waitView polls /api/status until cond holds (60 s at most).
func waitView(t *testing.T, url, what string, cond func(dashboard.View) bool) dashboard.View {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var v dashboard.View
	var last error
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "api/status")
		if err == nil {
			v = dashboard.View{}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err == nil && cond(v) {
				return v
			}
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	b, _ := json.Marshal(v.Status)
	t.Fatalf("dashboard: no %s after 60 s (last error %v); status %s", what, last, b)
	return v
}

func maxWriteOps(v dashboard.View) float64 {
	m := 0.0
	for _, s := range v.History {
		m = max(m, s.WriteOps)
	}
	return m
}

func hasCheck(v dashboard.View, code string) bool {
	for _, c := range v.Status.Checks {
		if c.Code == code {
			return true
		}
	}
	return false
}
