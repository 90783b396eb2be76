package e2e

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDaemonsRunWithSchedTrace: every long-running process of a cluster
// runs with the scheduler trace that keeps Go's sysmon out of its deep
// sleep (internal/cli/sysmon.go), whether it inherited it from cairn dev or
// was started without it and executed itself again, and none prints a
// trace line.
func TestDaemonsRunWithSchedTrace(t *testing.T) {
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	hasTrace := func(pid int) bool {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatalf("environment of pid %d: %v", pid, err)
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if s := string(kv); strings.HasPrefix(s, "GODEBUG=") && strings.Contains(s, "schedtrace=2147483647") {
				return true
			}
		}
		return false
	}
	for name, p := range c.procs {
		if !hasTrace(p.PID) {
			t.Errorf("%s (pid %d) runs without the scheduler trace", name, p.PID)
		}
	}

	// Restarted by hand, from an environment without it (as a service
	// manager would): the OSD executes itself again, keeping its pid.
	c.kill("osd.0")
	t.Setenv("GODEBUG", "")
	c.restart("osd.0")
	pid := c.procs["osd.0"].PID
	deadline := time.Now().Add(10 * time.Second)
	for !hasTrace(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("restarted osd.0 (pid %d) still runs without the scheduler trace after 10 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.waitStatus(30*time.Second, "osd.0 back up", func(st map[string]any, raw string) bool {
		return st["osds_up"] == float64(3)
	})
	// The runtime prints its first trace line once the monotonic clock
	// passes the period, so a host up for longer than 24.8 days gets one
	// line at each start; nothing after it for as long again.
	if up, err := os.ReadFile("/proc/uptime"); err == nil {
		var secs float64
		if _, err := fmt.Sscan(string(up), &secs); err == nil && secs > 2147483.647 {
			t.Logf("host up %.0f days: a trace line at start is expected", secs/86400)
			return
		}
	}
	for name, p := range c.procs {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("SCHED ")) {
			t.Errorf("%s printed a scheduler trace line:\n%s", name, b)
		}
	}
}
