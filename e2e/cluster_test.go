package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/devcluster"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// cairnBin is the binary under test, built once by TestMain.
var cairnBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "cairn-e2e-bin")
	if err != nil {
		panic(err)
	}
	cairnBin = filepath.Join(dir, "cairn")
	out, err := exec.Command("go", "build", "-o", cairnBin, "github.com/cairn-storage/cairn/cmd/cairn").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build cairn: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// devProcess is an entry of dev.json.
type devProcess = devcluster.Process

// cluster is a running `cairn dev`.
type cluster struct {
	t        testing.TB
	dir      string
	conf     string
	cmd      *exec.Cmd
	out      *bytes.Buffer
	procs    map[string]devProcess
	extra    []*exec.Cmd // processes the test restarted itself
	etcdPort int
	osdPort  int
	nbdPort  int
	s3Port   int // 0: no S3 gateway
	// metricsPort: osd.N serves metrics on this + N, the NBD gateway on
	// the next (0: none).
	metricsPort int
	dashPort    int
	hosts       int
	perHost     int
	leaseTTL    time.Duration
	opts        clusterOpts
}

type clusterOpts struct {
	hosts, perHost int
	metrics        bool          // every OSD and the NBD gateway serve Prometheus metrics
	dir            string        // reuse a directory (restart); "" = new temp dir
	leaseTTL       time.Duration // default 3 s
	external       []string      // etcd endpoints to use instead of starting a mon
	ipv6           bool
	downOut        time.Duration // default: cairn dev's (30 s)
	// autoRestart lets cairn dev restart processes that exit. Off by
	// default: tests kill OSDs and restart them themselves (c.kill,
	// c.restart), and some need an OSD to stay down.
	autoRestart bool
	// s3 starts cairn dev's S3 gateway (with its pool s3 and user admin);
	// other tests run without it. s3GCGrace and s3IntentTimeout set its
	// collector's times (0: the gateway's defaults).
	s3                         bool
	s3GCGrace, s3IntentTimeout time.Duration
	s3IndexShardKeys           int // the gateway's --index-shard-keys (0: its default)
	// s3DataPool and s3DataEC: cairn dev --s3-data-pool, --s3-data-ec
	// (which runs cairn dev with the experimental EC switch on).
	s3DataPool, s3DataEC string
	dashboard            bool     // the mon serves the web dashboard (c.dashPort)
	writeback            string   // cairn dev --writeback-size: each OSD's write-back area
	flashCache           string   // cairn dev --flash-cache-size: each OSD's read cache on its meta device
	tls                  bool     // cairn dev --tls: the S3 gateway serves HTTPS, the cluster's traffic is encrypted
	tcpOnly              bool     // cairn dev --local-sockets=false: every connection to an OSD is TCP
	env                  []string // more environment for cairn dev and its daemons (failpoints), so the test may run in parallel
}

// freePorts finds n consecutive free TCP ports on 127.0.0.1 to .4, below
// the kernel's ephemeral range (32768 and up by default): a port taken from
// that range can be free when checked and then be handed out as the local
// port of some other test's outgoing connection before cairn listens on it.
// A range once handed out is never handed out again in this process, so
// tests running in parallel never pick each other's ports between the check
// and their daemons' listening.
func freePorts(t testing.TB, n int) int {
	const lo, hi = 10000, 32000
	if n > hi-lo {
		t.Fatalf("freePorts: %d ports asked for", n)
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for try := 0; try < 100; try++ {
		base := lo + rand.IntN(hi-lo-n)
		if portsTaken(base, n) {
			continue
		}
		ok := true
		for i := 0; i < n && ok; i++ {
			for _, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"} {
				ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, base+i))
				if err != nil {
					ok = false
					break
				}
				ln.Close()
			}
		}
		if ok {
			portsGiven = append(portsGiven, [2]int{base, base + n})
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven [][2]int // ranges [from, to) freePorts handed out
)

// portsTaken says whether [base, base+n) overlaps a range handed out.
func portsTaken(base, n int) bool {
	for _, r := range portsGiven {
		if base < r[1] && r[0] < base+n {
			return true
		}
	}
	return false
}

func startCluster(t testing.TB, o clusterOpts) *cluster {
	t.Helper()
	if o.hosts == 0 {
		o.hosts, o.perHost = 3, 2
	}
	if o.leaseTTL == 0 {
		o.leaseTTL = 3 * time.Second
	}
	c := &cluster{t: t, dir: o.dir, hosts: o.hosts, perHost: o.perHost, leaseTTL: o.leaseTTL, opts: o}
	if c.dir == "" {
		c.dir = filepath.Join(t.TempDir(), "dev")
	}
	c.etcdPort = freePorts(t, 2)
	c.osdPort = freePorts(t, o.hosts*o.perHost)
	c.nbdPort = freePorts(t, 1)
	if o.s3 {
		c.s3Port = freePorts(t, 1)
	}
	if o.metrics {
		c.metricsPort = freePorts(t, o.hosts*o.perHost+3)
	}
	if o.dashboard {
		c.dashPort = freePorts(t, 1)
	}
	c.start()
	t.Cleanup(c.stop)
	return c
}

// devArgs is the cairn dev command line of the cluster and its options.
func (c *cluster) devArgs() []string {
	args := []string{"dev", "--dir", c.dir,
		"--hosts", fmt.Sprint(c.hosts), "--osds-per-host", fmt.Sprint(c.perHost),
		"--etcd-port", fmt.Sprint(c.etcdPort), "--osd-port", fmt.Sprint(c.osdPort), "--lease-ttl", c.leaseTTL.String(),
		"--nbd-port", fmt.Sprint(c.nbdPort), "--s3-port", fmt.Sprint(c.s3Port), "--metrics-port", fmt.Sprint(c.metricsPort),
		"--dashboard-port", fmt.Sprint(c.dashPort)}
	if c.opts.s3GCGrace > 0 {
		args = append(args, "--s3-gc-grace", c.opts.s3GCGrace.String())
	}
	if c.opts.s3IntentTimeout > 0 {
		args = append(args, "--s3-intent-timeout", c.opts.s3IntentTimeout.String())
	}
	if c.opts.s3IndexShardKeys > 0 {
		args = append(args, "--s3-index-shard-keys", fmt.Sprint(c.opts.s3IndexShardKeys))
	}
	if c.opts.s3DataPool != "" {
		args = append(args, "--s3-data-pool", c.opts.s3DataPool)
	}
	if c.opts.s3DataEC != "" {
		args = append(args, "--s3-data-ec", c.opts.s3DataEC)
	}
	if c.opts.tls {
		args = append(args, "--tls")
	}
	if c.opts.tcpOnly {
		args = append(args, "--local-sockets=false")
	}
	if c.opts.flashCache != "" {
		args = append(args, "--flash-cache-size", c.opts.flashCache)
	}
	if c.opts.writeback != "" {
		args = append(args, "--writeback-size", c.opts.writeback)
	}
	if len(c.opts.external) > 0 {
		args = append(args, "--etcd-endpoints", strings.Join(c.opts.external, ","))
	}
	if c.opts.ipv6 {
		args = append(args, "--ipv6")
	}
	if c.opts.downOut > 0 {
		args = append(args, "--down-out", c.opts.downOut.String())
	}
	if !c.opts.autoRestart {
		args = append(args, "--restart=false")
	}
	return args
}

func (c *cluster) start() {
	t := c.t
	t.Helper()
	c.out = &bytes.Buffer{}
	c.cmd = exec.Command(cairnBin, c.devArgs()...)
	c.cmd.Env = append(os.Environ(), c.opts.env...)
	if c.opts.s3DataEC != "" {
		c.cmd.Env = append(c.cmd.Env, client.ExperimentalECEnv+"=1")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = pw, pw
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	up := make(chan bool, 1)
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !sent && strings.Contains(sc.Text(), "is up") {
				up <- true
				sent = true
			}
		}
		if !sent {
			up <- false
		}
	}()
	select {
	case ok := <-up:
		if !ok {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("cairn dev exited before the cluster was up:\n%s\n%s", c.out.String(), c.logs())
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("cairn dev not up after 120 s:\n%s", c.logs())
	}
	c.conf = filepath.Join(c.dir, "cairn.conf")
	b, err := os.ReadFile(filepath.Join(c.dir, "dev.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info devcluster.Info
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	c.procs = map[string]devProcess{}
	for _, p := range info.Processes {
		c.procs[p.Name] = p
	}
	mons := 1
	if len(c.opts.external) > 0 {
		mons = 0
	}
	gateways := 1 // nbd
	if c.s3Port > 0 {
		gateways++
	}
	if len(c.procs) != mons+c.hosts*c.perHost+gateways {
		t.Fatalf("dev.json lists %d processes, want %d (mon, OSDs, nbd, s3)", len(c.procs), mons+c.hosts*c.perHost+gateways)
	}
}

func listenTCP(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// logs returns the tail of every process log, for failure messages.
func (c *cluster) logs() string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// stop ends the dev cluster with SIGINT (Ctrl-C) and waits for it.
func (c *cluster) stop() {
	for _, e := range c.extra {
		e.Process.Signal(syscall.SIGTERM)
	}
	for _, e := range c.extra {
		done := make(chan struct{})
		go func() { e.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			e.Process.Kill()
		}
	}
	c.extra = nil
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	if c.t.Failed() {
		c.t.Logf("logs of the cluster of a failed test:\n%s", c.logs())
	}
	c.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
		c.t.Errorf("cairn dev did not stop within 30 s of Ctrl-C")
	}
	// Every process it started must be gone.
	for name, p := range c.procs {
		if syscall.Kill(p.PID, 0) == nil {
			time.Sleep(2 * time.Second)
			if syscall.Kill(p.PID, 0) == nil {
				c.t.Errorf("%s (pid %d) still running after cairn dev stopped", name, p.PID)
				syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
	c.cmd = nil
}

// kill SIGKILLs one process of the cluster.
func (c *cluster) kill(name string) { c.signal(name, syscall.SIGKILL) }

// terminate stops a process as an operator's service manager does
// (SIGTERM) and waits until it has exited.
func (c *cluster) terminate(name string) { c.signal(name, syscall.SIGTERM) }

// signal sends sig to a process and waits until it is dead (its parent,
// cairn dev, reaps it): until then it holds its files, and a restart would
// find its store locked.
func (c *cluster) signal(name string, sig syscall.Signal) {
	p, ok := c.procs[name]
	if !ok {
		c.t.Fatalf("no process %s", name)
	}
	if err := syscall.Kill(p.PID, sig); err != nil {
		c.t.Fatalf("%v to %s: %v", sig, name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !dead(p.PID) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s (pid %d) still alive 30 s after %v", name, p.PID, sig)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dead reports whether process pid has exited: it is gone, or a zombie
// not yet reaped.
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// restart starts a killed process again with the arguments dev.json recorded.
func (c *cluster) restart(name string, extraArgs ...string) {
	p := c.procs[name]
	lf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(p.Args[0], append(p.Args[1:], extraArgs...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.PID = cmd.Process.Pid
	c.procs[name] = p
	c.extra = append(c.extra, cmd)
}

// cli runs the cairn CLI against the cluster.
func (c *cluster) cli(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(cairnBin, append([]string{"--conf", c.conf}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("cairn %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// client dials the cluster with the public client package.
// localConns counts the connections open to the cluster's OSDs over their
// local sockets (rpc.LocalName), from /proc/net/unix, where an accepted
// connection bears its listener's name.
func (c *cluster) localConns() int {
	c.t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		c.t.Fatal(err)
	}
	names := map[string]bool{}
	for name, p := range c.procs {
		if strings.HasPrefix(name, "osd.") {
			names[rpc.LocalName(p.Addr)] = true
		}
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		// Num RefCount Protocol Flags Type St Inode Path; St 03: connected.
		f := strings.Fields(line)
		if len(f) == 8 && f[5] == "03" && names[f[7]] {
			n++
		}
	}
	return n
}

func (c *cluster) client() *client.Client {
	c.t.Helper()
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// pool returns a handle for a pool, through a new client.
func (c *cluster) pool(name string) *client.Pool {
	c.t.Helper()
	p, err := c.client().Pool(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

// status runs `cairn status --json`.
func (c *cluster) status() (map[string]any, error) {
	out, err := c.cli(nil, "status", "--json")
	if err != nil {
		return nil, err
	}
	var st map[string]any
	return st, json.Unmarshal(out, &st)
}

// waitStatus polls `cairn status` until cond holds or timeout passes.
func (c *cluster) waitStatus(timeout time.Duration, what string, cond func(st map[string]any, raw string) bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		st, err := c.status()
		if err == nil {
			b, _ := json.Marshal(st)
			last = string(b)
			if cond(st, last) {
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("status never showed %s within %s; last: %s", what, timeout, last)
}

// payload returns deterministic pseudo-random bytes for (name, size), so
// tests can check content without keeping it in memory.
func payload(name string, gen, size int) []byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], h.Sum64())
	binary.LittleEndian.PutUint64(seed[8:], uint64(gen))
	r := rand.NewChaCha8(seed)
	b := make([]byte, size)
	r.Read(b)
	return b
}

// logUniformSize draws a size in [0, max] whose logarithm is uniform, so
// small and large objects are both common.
func logUniformSize(r *rand.Rand, max int) int {
	return int(math.Exp(r.Float64()*math.Log(float64(max+1)))) - 1
}

func digest(b []byte) [32]byte { return sha256.Sum256(b) }
