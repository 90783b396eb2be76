package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devJSON reads the cluster's dev.json as it is now.
func (c *cluster) devJSON() map[string]devProcess {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "dev.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	var info struct {
		Processes []devProcess `json:"processes"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		c.t.Fatalf("dev.json: %v\n%s", err, b)
	}
	procs := map[string]devProcess{}
	for _, p := range info.Processes {
		procs[p.Name] = p
	}
	return procs
}

// waitNewPID waits until dev.json lists a running process name with a pid
// other than old, and returns that pid.
func (c *cluster) waitNewPID(name string, old int, within time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if p := c.devJSON()[name]; p.PID != old && p.PID != 0 && !dead(p.PID) {
			return p.PID
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("dev.json shows no new running %s (old pid %d) after %s: %+v", name, old, within, c.devJSON()[name])
	return 0
}

// TestDevRestartsItsProcesses runs a cairn dev with automatic restarts on:
// an OSD killed with SIGKILL is started again by cairn dev, and `cairn dev
// restart` restarts a running one; dev.json follows the pids, the OSDs come
// back up, and Ctrl-C stops the restarted processes too. On the same
// cluster: `osd rm` of several OSDs removes all or none, and an OSD removed
// from the map that then dies is not restarted (it would refuse to start).
func TestDevRestartsItsProcesses(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{autoRestart: true})
	ctx := context.Background()
	p := c.pool("default")
	if err := p.Put(ctx, "before", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	allUp := func(st map[string]any, _ string) bool { return st["osds_up"] == float64(6) }

	old := c.procs["osd.1"].PID
	c.kill("osd.1")
	killed := time.Now()
	c.waitNewPID("osd.1", old, 15*time.Second)
	c.waitStatus(30*time.Second, "the crashed osd.1 up again", allUp)
	t.Logf("osd.1 restarted by cairn dev and up %.1f s after SIGKILL", time.Since(killed).Seconds())

	old = c.devJSON()["osd.2"].PID
	out, err := exec.Command(cairnBin, "dev", "restart", "osd.2", "--dir", c.dir).CombinedOutput()
	if err != nil {
		t.Fatalf("cairn dev restart osd.2: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`restarted osd\.2: pid (\d+) \(was (\d+)\)`).FindStringSubmatch(string(out))
	if m == nil || m[2] != fmt.Sprint(old) {
		t.Fatalf("cairn dev restart osd.2 said %q, want the new pid and the old one (%d)", out, old)
	}
	if p := c.devJSON()["osd.2"]; fmt.Sprint(p.PID) != m[1] || dead(p.PID) || !dead(old) {
		t.Fatalf("after cairn dev restart osd.2: dev.json pid %d (said %s) dead %v; old pid %d dead %v", p.PID, m[1], dead(p.PID), old, dead(old))
	}
	c.waitStatus(30*time.Second, "the restarted osd.2 up", allUp)
	if got, err := p.Get(ctx, "before"); err != nil || string(got) != "kept" {
		t.Fatalf("object after the restarts: %q, %v", got, err)
	}

	t.Run("osd rm several", func(t *testing.T) { checkOSDRmSeveral(t, c) })
	t.Run("connection errors", func(t *testing.T) { checkConnectErrors(t, c) })

	procs := c.devJSON()
	c.stop()
	for name, p := range procs {
		if !dead(p.PID) {
			t.Errorf("%s (pid %d, from dev.json) still runs after Ctrl-C", name, p.PID)
		}
	}
}

// checkOSDRmSeveral: `osd rm 0 1` with osd.0 in removes nothing; `osd rm 1 3`
// of two out OSDs removes both; osd.3, removed, is not restarted when it dies.
func checkOSDRmSeveral(t *testing.T, c *cluster) {
	if out, err := c.cli(nil, "osd", "out", "1", "3"); err != nil {
		t.Fatalf("osd out 1 3: %v\n%s", err, out)
	}
	if _, err := c.cli(nil, "osd", "rm", "0", "1"); err == nil || !strings.Contains(err.Error(), "osd out 0") {
		t.Fatalf("osd rm 0 1 with osd.0 in: want a refusal saying to mark osd.0 out, got %v", err)
	}
	if st, err := c.status(); err != nil || st["osds"] != float64(6) {
		t.Fatalf("a refused osd rm 0 1 removed something: %v %v", st["osds"], err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := c.cli(nil, "osd", "rm", "1", "3")
		if err == nil {
			if !strings.Contains(string(out), "removed osd.1") || !strings.Contains(string(out), "removed osd.3") {
				t.Fatalf("osd rm 1 3 said %q", out)
			}
			break
		}
		if !strings.Contains(err.Error(), "wait for HEALTH_OK") || time.Now().After(deadline) {
			t.Fatalf("osd rm 1 3 of out OSDs: %v", err)
		}
		time.Sleep(time.Second)
	}
	st, err := c.status()
	if err != nil || st["osds"] != float64(4) {
		t.Fatalf("after osd rm 1 3: %v OSDs (%v), want 4", st["osds"], err)
	}
	// osd.3 may already have stopped by itself on seeing its removal (an
	// OSD removed from the map while it runs does); either way it is not
	// started again.
	old := c.devJSON()["osd.3"].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kill osd.3: %v", err)
	}
	time.Sleep(3 * time.Second) // past the first restart's backoff
	if p := c.devJSON()["osd.3"]; p.PID != old || !dead(p.PID) {
		t.Fatalf("osd.3, removed from the map, was restarted after it died: pid %d (was %d)", p.PID, old)
	}
}

// checkConnectErrors: a cairn.conf with another cluster's key, and one whose
// mon does not answer, get errors that say so and what to check, not etcd's
// "authentication failed" or "context deadline exceeded" alone.
func checkConnectErrors(t *testing.T, c *cluster) {
	b, err := os.ReadFile(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`(?m)^cluster_key = .*$`)
	other := filepath.Join(t.TempDir(), "other.conf")
	os.WriteFile(other, key.ReplaceAll(b, []byte("cluster_key = "+strings.Repeat("ab", 32))), 0o600)
	for _, args := range [][]string{{"obj", "ls", "default"}, {"status"}} {
		out, err := exec.Command(cairnBin, append([]string{"--conf", other}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "key does not match this cluster") || !strings.Contains(string(out), other) {
			t.Errorf("cairn %s with another cluster's key: want an error naming %s and the key mismatch, got %v: %s", args[0], other, err, out)
		}
	}
	port := freePorts(t, 1)
	down := filepath.Join(t.TempDir(), "down.conf")
	eps := regexp.MustCompile(`(?m)^etcd_endpoints = .*$`)
	os.WriteFile(down, eps.ReplaceAll(b, []byte(fmt.Sprintf("etcd_endpoints = http://127.0.0.1:%d", port))), 0o600)
	out, err := exec.Command(cairnBin, "--conf", down, "obj", "ls", "default").CombinedOutput()
	want := fmt.Sprintf("no mon answered at http://127.0.0.1:%d", port)
	if err == nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "may be down") {
		t.Errorf("cairn obj ls with no mon at the conf's endpoint: want %q and that the mon may be down, got %v: %s", want, err, out)
	}
}
