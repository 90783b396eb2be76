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

// TestThreeMonsAndExternalEtcd starts three `cairn mon` processes that form
// one etcd cluster, points a dev cluster at them with --etcd-endpoints, and
// SIGKILLs one mon: the cluster keeps working on the other two.
func TestThreeMonsAndExternalEtcd(t *testing.T) {
	t.Parallel()
	port := freePorts(t, 2)
	dir := t.TempDir()
	var initial, endpoints []string
	names := []string{"a", "b", "c"}
	for i, n := range names {
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.%d:%d", n, i+1, port+1))
		endpoints = append(endpoints, fmt.Sprintf("http://127.0.0.%d:%d", i+1, port))
	}
	mons := map[string]*exec.Cmd{}
	for i, n := range names {
		logf, err := os.Create(filepath.Join(dir, "mon."+n+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(cairnBin, "mon", "--name", n, "--data", filepath.Join(dir, "mon."+n),
			"--client-url", endpoints[i], "--peer-url", fmt.Sprintf("http://127.0.0.%d:%d", i+1, port+1),
			"--initial-cluster", strings.Join(initial, ","))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		mons[n] = cmd
	}
	t.Cleanup(func() {
		for _, cmd := range mons {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
	})

	c := startCluster(t, clusterOpts{external: endpoints})
	ctx := context.Background()
	p := c.pool("default")
	for i := 0; i < 50; i++ {
		name := fmt.Sprintf("m%02d", i)
		if err := p.Put(ctx, name, payload(name, 0, 10000+i)); err != nil {
			t.Fatal(err)
		}
	}
	// Lose one member: etcd keeps a quorum of two.
	mons["b"].Process.Kill()
	mons["b"].Wait()
	delete(mons, "b")
	for i := 50; i < 100; i++ {
		name := fmt.Sprintf("m%02d", i)
		if err := p.Put(ctx, name, payload(name, 0, 10000+i)); err != nil {
			t.Fatalf("write after losing one of three mons: %v", err)
		}
	}
	// The map still changes (a pool is created) and status still answers.
	if _, err := c.cli(nil, "pool", "create", "after", "--size", "2"); err != nil {
		t.Fatalf("pool create with one of three mons down: %v", err)
	}
	c.waitStatus(20*time.Second, "HEALTH_OK with two of three mons", func(st map[string]any, raw string) bool {
		return st["health"] == "HEALTH_OK" && st["pools"] == float64(2)
	})
	for i := 0; i < 100; i++ {
		name := fmt.Sprintf("m%02d", i)
		got, err := p.Get(ctx, name)
		if err != nil || !bytes.Equal(got, payload(name, 0, 10000+i)) {
			t.Fatalf("read %s: %v", name, err)
		}
	}
}

// TestIPv6Cluster runs a dev cluster IPv6-only, on [::1].
func TestIPv6Cluster(t *testing.T) {
	t.Parallel()
	if ln, err := listenTCP("[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	c := startCluster(t, clusterOpts{ipv6: true})
	for name, p := range c.procs {
		if !strings.Contains(p.Addr, "[::1]") {
			t.Fatalf("%s listens on %s, want [::1]", name, p.Addr)
		}
	}
	data := payload("six", 0, 200<<10)
	if _, err := c.cli(data, "obj", "put", "default", "six"); err != nil {
		t.Fatal(err)
	}
	out, err := c.cli(nil, "obj", "get", "default", "six")
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("IPv6 round trip: %v", err)
	}
	out, err = c.cli(nil, "osd", "tree")
	if err != nil || strings.Count(string(out), "[::1]:") != 6 || strings.Contains(string(out), "down") {
		t.Fatalf("osd tree should show 6 OSDs up on [::1]: %v\n%s", err, out)
	}
}
