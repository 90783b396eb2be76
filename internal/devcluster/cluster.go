package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/meta"
)

// Options describe a dev cluster: `cairn dev`'s flags.
type Options struct {
	Dir         string
	Hosts       int
	OSDsPerHost int
	EtcdPort    int // the peer port is the next one
	OSDPort     int // osd.N listens on this + N
	LeaseTTL    time.Duration
	External    []string // etcd endpoints to use instead of starting a mon
	IPv6        bool
	DownOut     time.Duration
	NBDPort     int // 0: no NBD server
	S3Port      int // 0: no S3 gateway
	// TLS: the S3 gateway serves HTTPS with a certificate made for DIR,
	// and every connection to and between OSDs is TLS, etcd's too
	// (cairn.conf's encrypt; package rpc says how the peers authenticate).
	TLS bool
	// NoLocalSockets: every process talks to the OSDs over TCP on the
	// loopback, not over their local sockets (cairn.conf's local_sockets).
	NoLocalSockets bool
	// DashboardPort: the mon serves the web dashboard on this port of the
	// first loopback address, without a password (0: none).
	DashboardPort int
	// MetricsPort: osd.N serves Prometheus metrics on this + N, the NBD
	// gateway on this + the number of OSDs, the mon (etcd's) on the next,
	// the S3 gateway on the one after (0: none).
	MetricsPort int
	// The S3 gateway's collector: grace of replaced data and how old an
	// abandoned write's intent must be (0: cairn s3's defaults).
	S3GCGrace, S3IntentTimeout time.Duration
	S3IndexShardKeys           int // the gateway's --index-shard-keys (0: its default)
	// S3DataPool is the gateway's --data-pool ("": none, data in pool
	// s3), made at the first start if missing: erasure-coded S3DataEC
	// ("K+M", which needs CAIRN_EXPERIMENTAL_EC=1) when set, else
	// replicated as s3 is.
	S3DataPool, S3DataEC string
	// Passed to every OSD when set (cairn osd has the defaults).
	DataCacheSize    int64
	DataCacheReserve bool
	AutoRestart      bool
	// WritebackSize is each OSD's --writeback-size ("" or "0": none).
	WritebackSize string
	// FlashCacheSize is each OSD's --flash-cache-size ("" or "0": none).
	FlashCacheSize string
	// StallTimeout is each OSD's --stall-timeout (0: its default).
	StallTimeout time.Duration

	// Self is the cairn binary every process runs (default: this one).
	Self string
	// Out receives what the start-up says before the cluster is up;
	// Logf the supervisor's lines about processes that exit and restart.
	Out  io.Writer
	Logf func(format string, args ...any)
}

// OSDCacheArgs are the data cache, write-back area, flash read cache and
// stall timeout options, as flags of cairn osd.
func (o Options) OSDCacheArgs() []string {
	var args []string
	if o.DataCacheSize != 0 {
		args = append(args, "--data-cache-size", strconv.FormatInt(o.DataCacheSize, 10))
	}
	if !o.DataCacheReserve {
		args = append(args, "--data-cache-reserve=false")
	}
	if o.WritebackSize != "" && o.WritebackSize != "0" {
		args = append(args, "--writeback-size", o.WritebackSize)
	}
	if o.FlashCacheSize != "" && o.FlashCacheSize != "0" {
		args = append(args, "--flash-cache-size", o.FlashCacheSize)
	}
	if o.StallTimeout != 0 {
		args = append(args, "--stall-timeout", o.StallTimeout.String())
	}
	return args
}

// Loopback returns the address of host h: 127.0.0.h+1, or [::1] with IPv6.
func (o Options) Loopback(h int) string {
	if o.IPv6 {
		return "[::1]"
	}
	return fmt.Sprintf("127.0.0.%d", h+1)
}

// Cluster is a running dev cluster, its processes supervised until Stop.
type Cluster struct {
	FSID    string
	Dir     string // absolute
	Conf    string // DIR/cairn.conf
	Pool    client.PoolInfo
	NBDAddr string  // "" without an NBD server
	S3      *S3Info // nil without an S3 gateway
	// Dashboard is the web dashboard's URL ("": none).
	Dashboard string

	sup     *supervisor
	closers []func() // run in reverse order by Stop
}

// Info returns dev.json's content as it is now.
func (c *Cluster) Info() Info { return c.sup.snapshot() }

// Stop ends every process of the cluster (OSDs and the NBD server before
// the mon, gently first) and releases what Start opened.
func (c *Cluster) Stop() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

// Start starts a complete cluster on this machine, or the one already in
// o.Dir again with its data: one mon (embedded etcd, unless o.External),
// o.Hosts × o.OSDsPerHost OSD processes (host N on 127.0.0.N), and an NBD
// server; it creates the pool "default" (one copy per host, at most 3),
// writes DIR/cairn.conf and DIR/dev.json, answers `cairn dev restart` on
// DIR/dev.sock, and returns once every OSD is up. Its processes run until
// Stop (or until this process dies).
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o, err = o.prepare(); err != nil {
		return nil, err
	}
	confPath := filepath.Join(o.Dir, "cairn.conf")
	cfg, err := loadConf(o, confPath)
	if err != nil {
		return nil, err
	}
	sup := newSupervisor(o.Self, o.Dir, confPath, cfg.EtcdEndpoints, o.AutoRestart, o.Logf)
	closeSocket, err := sup.serve()
	if err != nil {
		return nil, err
	}
	c = &Cluster{FSID: cfg.FSID, Dir: o.Dir, Conf: confPath, sup: sup}
	c.closers = append(c.closers, closeSocket, sup.stop)
	started := c // a failing return sets c to nil before this runs
	defer func() {
		if err != nil {
			started.Stop()
			c = nil
		}
	}()
	if len(o.External) == 0 {
		if err := c.startMon(o, cfg); err != nil {
			return nil, err
		}
	}
	ms, err := c.connectMeta(ctx, o, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.startOSDs(o); err != nil {
		return nil, err
	}
	if err := waitOSDsUp(ctx, ms, o.Hosts*o.OSDsPerHost, o.Dir); err != nil {
		return nil, err
	}
	sup.setRemoved(func(name string) string { return removedOSD(ctx, ms, name) })
	cl, err := c.openDefaultPool(ctx, o, cfg)
	if err != nil {
		return nil, err
	}
	if o.NBDPort > 0 {
		addr := fmt.Sprintf("%s:%d", o.Loopback(0), o.NBDPort)
		args := []string{"nbd", "--conf", confPath, "--listen", addr}
		metrics := o.metricsAddr(o.Loopback(0), o.Hosts*o.OSDsPerHost)
		if metrics != "" {
			args = append(args, "--metrics-listen", metrics)
		}
		if err := sup.start("nbd", addr, "", args); err != nil {
			return nil, err
		}
		if err := sup.setMetrics("nbd", metrics); err != nil {
			return nil, err
		}
		if err := waitListening(ctx, addr, "the NBD gateway (log in "+o.Dir+"/nbd.log)"); err != nil {
			return nil, err
		}
		c.NBDAddr = addr
	}
	if o.S3Port > 0 {
		if err := c.startS3(ctx, o, cfg, ms, cl); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// prepare checks o and fills in what it leaves out: Out and Logf that
// drop what they are given, Dir made absolute (and created), Self this
// binary. Ports another process holds fail here, before anything starts.
func (o Options) prepare() (Options, error) {
	if o.Hosts < 1 || o.Hosts > 250 || o.OSDsPerHost < 1 || o.OSDsPerHost > 64 {
		return o, fmt.Errorf("dev: --hosts must be 1..250 and --osds-per-host 1..64")
	}
	if err := checkPorts(o); err != nil {
		return o, err
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return o, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return o, err
	}
	o.Dir = dir
	if o.Self == "" {
		if o.Self, err = os.Executable(); err != nil {
			return o, err
		}
	}
	return o, nil
}

// loadConf reads the cluster's config at path: a cluster restarted from
// its directory keeps its FSID and etcd endpoints. A new cluster gets a new
// one, pointing at its own mon (with etcd authentication on) or at
// o.External.
func loadConf(o Options, path string) (*conf.Config, error) {
	cfg, err := conf.Load(path)
	switch {
	case err == nil:
		fmt.Fprintf(o.Out, "restarting cluster %s from %s\n", cfg.FSID, o.Dir)
		if cfg.Encrypt != o.TLS || cfg.NoLocalSockets != o.NoLocalSockets { // every process starts again: they all follow
			cfg.Encrypt, cfg.NoLocalSockets = o.TLS, o.NoLocalSockets
			if len(o.External) == 0 {
				cfg.EtcdEndpoints = []string{o.etcdURL(0)}
			}
			if err := cfg.Save(path); err != nil {
				return nil, err
			}
		}
		return cfg, nil
	case errors.Is(err, os.ErrNotExist):
		eps := o.External
		if len(eps) == 0 {
			eps = []string{o.etcdURL(0)}
		}
		cfg = conf.New(eps)
		cfg.EtcdAuth = len(o.External) == 0 // our own mon: turn etcd auth on
		cfg.Encrypt, cfg.NoLocalSockets = o.TLS, o.NoLocalSockets
		if err := cfg.Save(path); err != nil {
			return nil, err
		}
		return cfg, nil
	default:
		return nil, err
	}
}

// etcdURL is the mon's client URL (port 0) or peer URL (1): https when
// the cluster encrypts its traffic.
func (o Options) etcdURL(port int) string {
	scheme := "http"
	if o.TLS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d", scheme, o.Loopback(0), o.EtcdPort+port)
}

// startMon starts the cluster's one mon, mon.a, on the first loopback
// address.
func (c *Cluster) startMon(o Options, cfg *conf.Config) error {
	data := filepath.Join(c.Dir, "mon.a")
	args := []string{"mon", "--conf", c.Conf, "--name", "a", "--data", data,
		"--client-url", o.etcdURL(0), "--peer-url", o.etcdURL(1)}
	metrics := o.metricsAddr(o.Loopback(0), o.Hosts*o.OSDsPerHost+1)
	if metrics != "" {
		args = append(args, "--metrics-url", "http://"+metrics)
	}
	if o.DashboardPort != 0 {
		addr := fmt.Sprintf("%s:%d", o.Loopback(0), o.DashboardPort)
		// A dev cluster is small: sample often, so what a test (or a
		// newcomer) does shows within seconds.
		args = append(args, "--dashboard-listen", addr, "--dashboard-auth=false", "--dashboard-sample-every", "2s")
		c.Dashboard = "http://" + addr + "/"
	}
	if err := c.sup.start("mon.a", cfg.EtcdEndpoints[0], data, args); err != nil {
		return err
	}
	if err := c.sup.setDashboard(c.Dashboard); err != nil {
		return err
	}
	return c.sup.setMetrics("mon.a", metrics)
}

// connectMeta waits for etcd to answer, creates the cluster map if there
// is none, and sets its down-out interval to o.DownOut (if given).
func (c *Cluster) connectMeta(ctx context.Context, o Options, cfg *conf.Config) (*meta.Store, error) {
	var ms *meta.Store
	if err := waitFor(ctx, 60*time.Second, "etcd", func() error {
		var err error
		ms, err = meta.ConnectConf(ctx, cfg)
		return err
	}); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { ms.Close() })
	if _, err := ms.Init(ctx, cfg.FSID); err != nil {
		return nil, err
	}
	if _, err := ms.Update(ctx, func(m *clustermap.Map) error {
		secs := int(o.DownOut / time.Second)
		if m.DownOutSeconds == secs || secs <= 0 {
			return meta.ErrNoChange
		}
		m.DownOutSeconds = secs
		return nil
	}); err != nil {
		return nil, err
	}
	return ms, nil
}

// startOSDs starts o.OSDsPerHost OSDs on each of o.Hosts hosts: host h
// (named host<h+1>) on loopback address h, osd.N listening on port
// o.OSDPort+N.
func (c *Cluster) startOSDs(o Options) error {
	for h := 0; h < o.Hosts; h++ {
		ip := o.Loopback(h)
		for j := 0; j < o.OSDsPerHost; j++ {
			id := h*o.OSDsPerHost + j
			name := "osd." + strconv.Itoa(id)
			data := filepath.Join(c.Dir, name)
			addr := fmt.Sprintf("%s:%d", ip, o.OSDPort+id)
			args := []string{"osd", "--conf", c.Conf, "--id", strconv.Itoa(id), "--data", data,
				"--listen", addr, "--host", fmt.Sprintf("host%d", h+1), "--lease-ttl", o.LeaseTTL.String()}
			args = append(args, o.OSDCacheArgs()...)
			metrics := o.metricsAddr(ip, id)
			if metrics != "" {
				args = append(args, "--metrics-listen", metrics)
			}
			if err := c.sup.start(name, addr, data, args); err != nil {
				return err
			}
			if err := c.sup.setMetrics(name, metrics); err != nil {
				return err
			}
		}
	}
	return nil
}

// metricsAddr is where the i-th process of the cluster serves metrics on
// ip ("" when the cluster serves none).
func (o Options) metricsAddr(ip string, i int) string {
	if o.MetricsPort <= 0 {
		return ""
	}
	return net.JoinHostPort(ip, strconv.Itoa(o.MetricsPort+i))
}

// waitOSDsUp waits until the map has osd.0 to osd.<total-1> up; if they are
// not within 90 s, the error points at their logs in dir.
func waitOSDsUp(ctx context.Context, ms *meta.Store, total int, dir string) error {
	return waitFor(ctx, 90*time.Second, "OSDs", func() error {
		m, _, err := ms.Map(ctx)
		if err != nil {
			return err
		}
		up := 0
		for i := 0; i < total; i++ {
			if osd, ok := m.OSD(clustermap.OSDID(i)); ok && osd.Up {
				up++
			}
		}
		if up < total {
			return fmt.Errorf("%d of %d OSDs up (logs in %s)", up, total, dir)
		}
		return nil
	})
}

// openDefaultPool connects a client and takes the pool "default", creating
// it if missing with one copy per host, at most 3.
func (c *Cluster) openDefaultPool(ctx context.Context, o Options, cfg *conf.Config) (*client.Client, error) {
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { cl.Close() })
	pool, err := cl.Pool("default")
	if err == nil {
		c.Pool, err = pool.Info()
	} else {
		size := min(3, o.Hosts)
		c.Pool, err = cl.CreatePool(ctx, client.PoolSpec{Name: "default", Size: size, FailureDomain: clustermap.DomainHost})
	}
	return cl, err
}

// checkPorts fails early, naming the port, when another process (often
// another cairn dev, or one still shutting down) holds a port we need.
func checkPorts(o Options) error {
	var addrs []string
	if len(o.External) == 0 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", o.Loopback(0), o.EtcdPort), fmt.Sprintf("%s:%d", o.Loopback(0), o.EtcdPort+1))
	}
	for h := 0; h < o.Hosts; h++ {
		for j := 0; j < o.OSDsPerHost; j++ {
			addrs = append(addrs, fmt.Sprintf("%s:%d", o.Loopback(h), o.OSDPort+h*o.OSDsPerHost+j))
		}
	}
	if o.NBDPort > 0 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", o.Loopback(0), o.NBDPort))
	}
	if o.S3Port > 0 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", o.Loopback(0), o.S3Port))
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("dev: %s is not free (another cairn dev, or one still stopping?): %v; wait, or choose others with --etcd-port, --osd-port, --nbd-port and --s3-port", a, err)
		}
		ln.Close()
	}
	return nil
}

// removedOSD says so if name is an OSD that the cluster map no longer
// holds: it was removed with cairn osd rm and would refuse to start.
// Anything else, and a map it cannot read, says "".
func removedOSD(ctx context.Context, ms *meta.Store, name string) string {
	rest, ok := strings.CutPrefix(name, "osd.")
	if !ok {
		return ""
	}
	id, err := strconv.Atoi(rest)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, _, err := ms.Map(ctx)
	if err != nil {
		return ""
	}
	if _, ok := m.OSD(clustermap.OSDID(id)); ok {
		return ""
	}
	return fmt.Sprintf("osd.%d was removed from the cluster map (cairn osd rm)", id)
}

// waitListening waits until a gateway that was started answers on addr:
// up means answering, so clients may use an endpoint as soon as it is
// printed.
func waitListening(ctx context.Context, addr, what string) error {
	return waitFor(ctx, 30*time.Second, what, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	})
}

// waitFor polls fn until it succeeds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, fn func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = fn(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s: %w", what, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
