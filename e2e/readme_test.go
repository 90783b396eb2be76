package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeDevLines returns the lines of the sh block of README.md's section
// "Using the dev cluster".
func readmeDevLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Using the dev cluster\n")
	if !ok {
		t.Fatal(`README.md has no section "Using the dev cluster"`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```sh\n")
	if !ok {
		t.Fatal("the section has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestReadmeDevClusterCommands runs the commands README.md shows for the
// dev cluster, as written and in order, on a fresh cluster like `make dev`'s:
// from a directory where bin/cairn is the binary under test and cairn-dev
// the cluster's directory; only the NBD port is the test cluster's. Each
// must succeed; `status --watch` runs until interrupted, as a user would.
func TestReadmeDevClusterCommands(t *testing.T) {
	t.Parallel()
	lines := readmeDevLines(t)
	c := startCluster(t, clusterOpts{})
	work := t.TempDir()
	os.Mkdir(filepath.Join(work, "bin"), 0o755)
	for link, target := range map[string]string{"bin/cairn": cairnBin, "cairn-dev": c.dir} {
		if err := os.Symlink(target, filepath.Join(work, link)); err != nil {
			t.Fatal(err)
		}
	}
	var exports []string
	for _, line := range lines {
		if strings.HasPrefix(line, "export ") {
			exports = append(exports, line)
			continue
		}
		prog := strings.Fields(line)[0]
		if _, err := exec.LookPath(prog); err != nil && !strings.HasPrefix(prog, "bin/") {
			t.Logf("skipped (no %s here): %s", prog, line)
			continue
		}
		run := strings.ReplaceAll(line, "127.0.0.1:10809", fmt.Sprintf("127.0.0.1:%d", c.nbdPort))
		script := "set -eo pipefail\n" + strings.Join(exports, "\n") + "\n"
		if strings.Contains(line, "--watch") {
			checkWatch(t, work, script+"exec "+run, line)
			continue
		}
		out := runReadmeLine(t, work, script+run, line)
		if strings.HasPrefix(line, "bin/cairn obj get default greeting") && string(out) != "hello\n" {
			t.Fatalf("%s printed %q, want hello", line, out)
		}
	}
}

// runReadmeLine runs one line with bash in dir and fails the test, showing
// the line, if it does not succeed within two minutes.
func runReadmeLine(t *testing.T, dir, script, line string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = dir, readmeEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("README line failed (%v):\n  %s\nstdout: %s\nstderr: %s", err, line, out, stderr.String())
	}
	t.Logf("%.1fs  %s", time.Since(start).Seconds(), line)
	return out
}

// checkWatch runs a line that refreshes until interrupted: after 3 s it
// must still run and have shown the health, and end on Ctrl-C (SIGINT).
func checkWatch(t *testing.T, dir, script, line string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir, cmd.Env = dir, readmeEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("README line ended by itself (%v):\n  %s\n%s", err, line, out.String())
	case <-time.After(3 * time.Second):
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("README line did not end on Ctrl-C:\n  %s", line)
	}
	if !strings.Contains(out.String(), "HEALTH_") {
		t.Fatalf("README line showed no health:\n  %s\n%s", line, out.String())
	}
	t.Logf("3.0s  %s", line)
}

// readmeEnv is the test's environment without a CAIRN_CONF of its own:
// the README's export line sets it.
func readmeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_CONF=") {
			env = append(env, kv)
		}
	}
	return env
}
