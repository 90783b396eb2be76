package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// TestBadInput: every kind of bad input gets an error that names the
// problem, and nothing stored is lost.
func TestBadInput(t *testing.T) {
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	cl := c.client()
	p, err := cl.Pool("default")
	if err != nil {
		t.Fatal(err)
	}
	keep := payload("keep", 0, 300<<10)
	if err := p.Put(ctx, "keep", keep); err != nil {
		t.Fatal(err)
	}

	cliCases := []struct {
		args []string
		want string
	}{
		{[]string{"obj", "get", "nosuchpool", "x"}, `pool "nosuchpool": pool not found`},
		{[]string{"obj", "put", "default", "", "/dev/null"}, "object name is empty"},
		{[]string{"obj", "put", "default", strings.Repeat("n", 1500), "/dev/null"}, "more than the limit of 1024"},
		{[]string{"obj", "get", "default", "never-written"}, "not found"},
		{[]string{"obj", "rm", "default", "never-written"}, "not found"},
		{[]string{"pool", "create", "wide", "--size", "4"}, "only 3 host(s)"},
		{[]string{"pool", "create", "bad/name"}, "only letters, digits"},
		{[]string{"pool", "create", "x", "--size", "3", "--min-size", "4"}, "min_size 4 must be between 1 and size 3"},
		{[]string{"pool", "create", "x", "--class", "tape"}, `unknown device class "tape"`},
		{[]string{"pool", "create", "default"}, "already exists"},
		{[]string{"pool", "rm", "nosuchpool"}, "pool not found"},
		{[]string{"obj", "put", "default", "x", "/no/such/file"}, "no such file"},
	}
	for _, tc := range cliCases {
		_, err := c.cli(nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairn %s: want an error containing %q, got %v", strings.Join(tc.args, " "), tc.want, err)
		}
	}
	checkECPools(t, c)
	// Volumes and snapshots.
	for _, args := range [][]string{
		{"volume", "create", "default/bv", "--size", "8M"},
		{"volume", "snap", "create", "default/bv@s"},
		{"volume", "snap", "create", "default/bv@s2"},
		{"volume", "create", "default/big", "--size", "64M", "--object-size", "32M"},
	} {
		if out, err := c.cli(nil, args...); err != nil {
			t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	diffFile := filepath.Join(t.TempDir(), "d.cvol")
	if out, err := c.cli(nil, "volume", "export-diff", "--from-snap", "s", "default/bv@s2", diffFile); err != nil {
		t.Fatalf("export-diff: %v\n%s", err, out)
	}
	volCases := []struct {
		args []string
		want string
	}{
		{[]string{"volume", "snap", "create", "default/bv"}, "name the snapshot: POOL/NAME@SNAP"},
		{[]string{"volume", "snap", "create", "default/bv@s"}, "snapshot exists: default/bv@s"},
		{[]string{"volume", "snap", "create", "default/bv@bad/name"}, "snapshot name"},
		{[]string{"volume", "snap", "create", "default/nosuch@s"}, "volume does not exist: default/nosuch"},
		{[]string{"volume", "snap", "rm", "default/bv@never"}, "snapshot does not exist: default/bv@never"},
		{[]string{"volume", "snap", "rollback", "default/bv@"}, "the snapshot name after @ is empty"},
		{[]string{"volume", "export", "default/bv@never", "-"}, "snapshot does not exist"},
		{[]string{"volume", "export-diff", "--from-snap", "never", "default/bv", "-"}, "snapshot does not exist: default/bv@never"},
		{[]string{"volume", "clone", "default/bv", "default/c"}, "clone needs a snapshot"},
		{[]string{"volume", "clone", "default/bv@s", "default/bv"}, "volume exists: default/bv"},
		{[]string{"volume", "flatten", "default/bv"}, "is not a clone"},
		{[]string{"volume", "rm", "default/bv"}, "has snapshots s, s2: remove them first"},
		{[]string{"volume", "import-diff", diffFile, "default/nosuch"}, "volume does not exist"},
		{[]string{"volume", "import-diff", diffFile, "default/bv"}, "already has snapshot"},
		{[]string{"volume", "import", diffFile, "default/new"}, "this is a diff stream"},
		{[]string{"volume", "snap", "create", "default/big@s"}, "snapshots need objects of at most 16777216 bytes"},
	}
	for _, tc := range volCases {
		_, err := c.cli(nil, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairn %s: want an error containing %q, got %v", strings.Join(tc.args, " "), tc.want, err)
		}
	}

	// A config readable by others is refused, naming the fix.
	loose := filepath.Join(t.TempDir(), "cairn.conf")
	b, _ := os.ReadFile(c.conf)
	os.WriteFile(loose, b, 0o644)
	if out, err := exec.Command(cairnBin, "--conf", loose, "status").CombinedOutput(); err == nil || !strings.Contains(string(out), "chmod 600") {
		t.Errorf("a world-readable cairn.conf: want a refusal naming chmod 600, got %v: %s", err, out)
	}

	// Through the client package.
	if err := p.Put(ctx, strings.Repeat("n", 1025), nil); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("oversize name: want ErrInvalid, got %v", err)
	}
	if _, err := cl.Pool("nosuchpool"); !errors.Is(err, client.ErrPoolNotFound) {
		t.Errorf("unknown pool: want ErrPoolNotFound, got %v", err)
	}
	if err := p.Create(ctx, "keep", true); !errors.Is(err, client.ErrExists) {
		t.Errorf("exclusive create of an existing object: want ErrExists, got %v", err)
	}

	// Garbage on the wire: the OSD drops that one connection and keeps serving.
	osd := c.procs["osd.0"]
	for i, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		randomBytes(4096),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		conn, err := net.DialTimeout("tcp", osd.Addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(junk)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, conn)
		conn.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("junk %d: the OSD kept a garbage connection open for 10 s", i)
		}
	}
	// A peer without the cluster key is refused.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = rpc.Dial(dctx, osd.Addr, []byte("not the cluster key, not at all"))
	cancel()
	if !errors.Is(err, rpc.ErrAuth) {
		t.Errorf("dial with a wrong key: want ErrAuth, got %v", err)
	}
	// etcd itself refuses a client that does not derive its password from the key.
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d/v3/kv/range", c.etcdPort)
	body := fmt.Sprintf(`{"key":"%s"}`, base64.StdEncoding.EncodeToString([]byte("/cairn/map")))
	if resp, err := http.Post(etcdURL, "application/json", strings.NewReader(body)); err != nil {
		t.Errorf("etcd: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || !strings.Contains(string(b), "user name is empty") {
			t.Errorf("etcd answered a client without credentials: %d %s", resp.StatusCode, b)
		}
	}
	// A well-authenticated but malformed request gets an error reply.
	cfg, _ := client.LoadConfig(c.conf)
	dctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	conn, err := rpc.Dial(dctx, osd.Addr, cfg.ClusterKey)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := conn.Call(ctx, &proto.Request{Op: proto.OpWrite, Epoch: 1, Object: "x"})
	conn.Close()
	if err != nil || resp.Status == proto.StatusOK {
		t.Errorf("a write with a stale epoch and wrong pg: want an error status, got %+v, %v", resp, err)
	}

	// A second dev cluster on the same ports is refused, naming the port.
	out, err := exec.Command(cairnBin, "dev", "--dir", filepath.Join(t.TempDir(), "second"),
		"--etcd-port", fmt.Sprint(c.etcdPort), "--osd-port", fmt.Sprint(c.osdPort)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), fmt.Sprintf("127.0.0.1:%d is not free", c.etcdPort)) {
		t.Errorf("cairn dev on busy ports: want an error naming the port, got %v: %s", err, out)
	}

	// Nothing was lost along the way.
	got, err := p.Get(ctx, "keep")
	if err != nil || string(got) != string(keep) {
		t.Fatalf("object written before the bad input: %v", err)
	}
	st, err := c.status()
	if err != nil || st["health"] != "HEALTH_OK" {
		t.Fatalf("cluster not healthy after bad input: %v %v", st, err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}
