package cli

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/spf13/cobra"
)

// DevProcess is one entry of DIR/dev.json: enough to find, kill and restart
// a process of the dev cluster (tests use args to restart a killed OSD).
type DevProcess struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Addr string   `json:"addr"`
	Data string   `json:"data"`
	Log  string   `json:"log"`
	Args []string `json:"args"`
	// Restarts counts how often cairn dev started it again.
	Restarts int `json:"restarts,omitempty"`
}

// DevInfo is the content of DIR/dev.json.
type DevInfo struct {
	Conf          string       `json:"conf"`
	EtcdEndpoints []string     `json:"etcd_endpoints"`
	Processes     []DevProcess `json:"processes"`
}

type devOptions struct {
	dir         string
	hosts       int
	osdsPerHost int
	etcdPort    int
	osdPort     int
	leaseTTL    time.Duration
	external    []string
	ipv6        bool
	downOut     time.Duration
	nbdPort     int
	// Passed to every OSD when set (cairn osd has the defaults).
	dataCacheSize    int64
	dataCacheReserve bool
	autoRestart      bool
}

func devCmd(g *globals) *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "start a local cluster: etcd plus hosts × OSDs as separate processes on 127.0.0.x",
		Long: `Starts a complete cluster on this machine: one mon (embedded etcd) and
--hosts × --osds-per-host OSD processes, host N listening on 127.0.0.N, with all
data under --dir. Creates the pool "default" (3 copies, one per host), writes
DIR/cairn.conf and DIR/dev.json, prints how to use it, and runs until Ctrl-C.
Running it again on the same --dir restarts the same cluster with its data.
A process that exits is started again, after a wait that grows to 30 s while
it keeps exiting (--restart=false: never); "cairn dev restart NAME" restarts
one now. DIR/dev.json always lists the running pids.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runDev(cmd.Context(), g, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "cairn-dev", "directory for the cluster's config, data and logs")
	f.IntVar(&o.hosts, "hosts", 3, "number of hosts (127.0.0.1, 127.0.0.2, ...)")
	f.IntVar(&o.osdsPerHost, "osds-per-host", 2, "OSD processes per host")
	f.IntVar(&o.etcdPort, "etcd-port", 2379, "etcd client port (the peer port is the next one)")
	f.IntVar(&o.osdPort, "osd-port", 6800, "port of osd.0; osd.N listens on this + N")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 5*time.Second, "how long an OSD may be silent before it is marked down")
	f.StringSliceVar(&o.external, "etcd-endpoints", nil, "use this existing etcd cluster instead of starting a mon")
	f.BoolVar(&o.ipv6, "ipv6", false, "run IPv6-only: etcd and every OSD on [::1]")
	f.IntVar(&o.nbdPort, "nbd-port", 10809, "port of the NBD server for volumes on 127.0.0.1 (0: none)")
	f.Int64Var(&o.dataCacheSize, "data-cache-size", 0, "each OSD's memory for repeated large reads, as cairn osd --data-cache-size (0: its default)")
	f.BoolVar(&o.dataCacheReserve, "data-cache-reserve", true, "whether each OSD takes its data cache's memory at start, as cairn osd --data-cache-reserve")
	f.DurationVar(&o.downOut, "down-out", 30*time.Second, "how long an OSD may stay down before it is marked out and its data re-replicated")
	f.BoolVar(&o.autoRestart, "restart", true, "start a process that exits again, after a wait that grows to 30 s while it keeps exiting; false: leave it stopped until `cairn dev restart NAME`")
	cmd.AddCommand(devRestartCmd())
	return cmd
}

// osdCacheArgs are the data cache flags given to cairn dev, for its OSDs.
func (o devOptions) osdCacheArgs() []string {
	var args []string
	if o.dataCacheSize != 0 {
		args = append(args, "--data-cache-size", strconv.FormatInt(o.dataCacheSize, 10))
	}
	if !o.dataCacheReserve {
		args = append(args, "--data-cache-reserve=false")
	}
	return args
}

func runDev(ctx context.Context, g *globals, o devOptions) error {
	if o.hosts < 1 || o.hosts > 250 || o.osdsPerHost < 1 || o.osdsPerHost > 64 {
		return fmt.Errorf("dev: --hosts must be 1..250 and --osds-per-host 1..64")
	}
	if err := checkDevPorts(o); err != nil {
		return err
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	confPath := filepath.Join(dir, "cairn.conf")
	cfg, err := conf.Load(confPath)
	switch {
	case err == nil:
		fmt.Fprintf(g.out, "restarting cluster %s from %s\n", cfg.FSID, dir)
	case errors.Is(err, os.ErrNotExist):
		eps := o.external
		if len(eps) == 0 {
			eps = []string{fmt.Sprintf("http://%s:%d", o.loopback(0), o.etcdPort)}
		}
		cfg = conf.New(eps)
		cfg.EtcdAuth = len(o.external) == 0 // our own mon: turn etcd auth on
		if err := cfg.Save(confPath); err != nil {
			return err
		}
	default:
		return err
	}

	sup := newDevSupervisor(self, dir, confPath, cfg.EtcdEndpoints, o.autoRestart)
	closeSocket, err := sup.serve()
	if err != nil {
		return err
	}
	defer closeSocket()
	defer sup.stop()
	start := sup.start

	if len(o.external) == 0 {
		data := filepath.Join(dir, "mon.a")
		args := []string{"mon", "--conf", confPath, "--name", "a", "--data", data,
			"--client-url", fmt.Sprintf("http://%s:%d", o.loopback(0), o.etcdPort),
			"--peer-url", fmt.Sprintf("http://%s:%d", o.loopback(0), o.etcdPort+1)}
		if err := start("mon.a", cfg.EtcdEndpoints[0], data, args); err != nil {
			return err
		}
	}
	var ms *meta.Store
	if err := waitFor(ctx, 60*time.Second, "etcd", func() error {
		var err error
		ms, err = meta.ConnectConf(ctx, cfg)
		return err
	}); err != nil {
		return err
	}
	defer ms.Close()
	if _, err := ms.Init(ctx, cfg.FSID); err != nil {
		return err
	}
	if _, err := ms.Update(ctx, func(m *clustermap.Map) error {
		secs := int(o.downOut / time.Second)
		if m.DownOutSeconds == secs || secs <= 0 {
			return meta.ErrNoChange
		}
		m.DownOutSeconds = secs
		return nil
	}); err != nil {
		return err
	}

	total := o.hosts * o.osdsPerHost
	for h := 0; h < o.hosts; h++ {
		ip := o.loopback(h)
		for j := 0; j < o.osdsPerHost; j++ {
			id := h*o.osdsPerHost + j
			name := "osd." + strconv.Itoa(id)
			data := filepath.Join(dir, name)
			addr := fmt.Sprintf("%s:%d", ip, o.osdPort+id)
			args := []string{"osd", "--conf", confPath, "--id", strconv.Itoa(id), "--data", data,
				"--listen", addr, "--host", fmt.Sprintf("host%d", h+1), "--lease-ttl", o.leaseTTL.String()}
			args = append(args, o.osdCacheArgs()...)
			if err := start(name, addr, data, args); err != nil {
				return err
			}
		}
	}
	if err := waitFor(ctx, 90*time.Second, "OSDs", func() error {
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
	}); err != nil {
		return err
	}

	sup.setRemoved(func(name string) string { return removedOSD(ctx, ms, name) })

	c, err := client.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	pool, err := c.Pool("default")
	var pinfo client.PoolInfo
	if err == nil {
		pinfo, err = pool.Info()
	} else {
		size := min(3, o.hosts)
		pinfo, err = c.CreatePool(ctx, client.PoolSpec{Name: "default", Size: size, FailureDomain: clustermap.DomainHost})
	}
	if err != nil {
		return err
	}

	if o.nbdPort > 0 {
		addr := fmt.Sprintf("%s:%d", o.loopback(0), o.nbdPort)
		if err := start("nbd", addr, "", []string{"nbd", "--conf", confPath, "--listen", addr}); err != nil {
			return err
		}
	}
	info := sup.snapshot()
	if g.json {
		if err := g.printJSON(info); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	w := g.out
	fmt.Fprintf(w, "cairn dev cluster %s is up, data in %s\n\n", cfg.FSID, dir)
	for _, p := range info.Processes {
		fmt.Fprintf(w, "  %-8s %-26s pid %-7d log %s\n", p.Name, p.Addr, p.PID, p.Log)
	}
	fmt.Fprintf(w, "\n  pool %q: %d copies (min %d), %d pgs, one copy per %s\n", pinfo.Name, pinfo.Size, pinfo.MinSize, pinfo.PGNum, pinfo.FailureDomain)
	fmt.Fprintf(w, "  config: %s (process list: %s)\n\n", confPath, filepath.Join(dir, "dev.json"))
	fmt.Fprintf(w, "Try it from another terminal:\n")
	fmt.Fprintf(w, "  export CAIRN_CONF=%s\n", confPath)
	fmt.Fprintf(w, "  cairn status\n  cairn osd tree\n")
	fmt.Fprintf(w, "  echo hello | cairn obj put default greeting && cairn obj get default greeting\n")
	if o.nbdPort > 0 {
		fmt.Fprintf(w, "  cairn volume create default/vm1 --size 10G && qemu-img info nbd://%s/default/vm1\n", fmt.Sprintf("%s:%d", o.loopback(0), o.nbdPort))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A process that exits is restarted; cairn dev restart osd.0 --dir %s restarts one now.\n", o.dir)
	fmt.Fprintf(w, "Ctrl-C stops the cluster; cairn dev --dir %s starts it again with its data.\n", o.dir)
	<-ctx.Done()
	fmt.Fprintf(w, "stopping %d processes...\n", len(info.Processes))
	return nil
}

// checkDevPorts fails early, naming the port, when another process (often
// another cairn dev, or one still shutting down) holds a port we need.
func checkDevPorts(o devOptions) error {
	var addrs []string
	if len(o.external) == 0 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", o.loopback(0), o.etcdPort), fmt.Sprintf("%s:%d", o.loopback(0), o.etcdPort+1))
	}
	for h := 0; h < o.hosts; h++ {
		for j := 0; j < o.osdsPerHost; j++ {
			addrs = append(addrs, fmt.Sprintf("%s:%d", o.loopback(h), o.osdPort+h*o.osdsPerHost+j))
		}
	}
	if o.nbdPort > 0 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", o.loopback(0), o.nbdPort))
	}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("dev: %s is not free (another cairn dev, or one still stopping?): %v; wait, or choose others with --etcd-port, --osd-port and --nbd-port", a, err)
		}
		ln.Close()
	}
	return nil
}

// loopback returns the address of host h: 127.0.0.h+1, or [::1] with --ipv6.
func (o devOptions) loopback(h int) string {
	if o.ipv6 {
		return "[::1]"
	}
	return fmt.Sprintf("127.0.0.%d", h+1)
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
