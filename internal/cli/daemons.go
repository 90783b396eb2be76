package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/mon"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/osd"
	"github.com/cairn-storage/cairn/internal/runtimepolicy"
	"github.com/spf13/cobra"
)

var logger = log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds|log.LUTC)

func monCmd(g *globals) *cobra.Command {
	var o mon.Options
	var dashListen string
	var dashAuth bool
	var dashEvery time.Duration
	cmd := &cobra.Command{
		Use:   "mon",
		Short: "run a monitor: an embedded etcd member holding the cluster map",
		Long: `Runs one etcd member inside cairn, so no separate etcd install is needed.
One mon is a working cluster; three mons on three hosts, started with the same
--initial-cluster, form a real etcd cluster that survives the loss of one.
With --conf, the mon also creates the cluster map for that cluster's fsid if
etcd holds none yet.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Logf = logger.Printf
			ctx := cmd.Context()
			var cfg *client.Config
			if g.conf != "" || os.Getenv("CAIRN_CONF") != "" {
				c, err := client.LoadConfig(g.conf)
				if err != nil {
					return err
				}
				cfg = c
				if c.EtcdAuth {
					o.EtcdPassword = c.EtcdPassword()
				}
				if err := monTLS(&o, c); err != nil {
					return err
				}
			}
			if dashListen != "" && cfg == nil {
				return fmt.Errorf("mon: --dashboard-listen needs the cluster's cairn.conf (--conf or $CAIRN_CONF): the dashboard is a client of the cluster")
			}
			return mon.Run(ctx, o, func() {
				if cfg == nil {
					return
				}
				if dashListen != "" {
					go func() {
						if err := serveDashboard(ctx, cfg, o.ClientURL, dashListen, dashAuth, dashEvery); err != nil {
							logger.Printf("mon: %v", err)
						}
					}()
				}
				go func() {
					ms, err := meta.Connect(ctx, []string{o.ClientURL}, meta.AuthFor(cfg))
					if err != nil {
						logger.Printf("mon: %v", err)
						return
					}
					defer ms.Close()
					if _, err := ms.Init(ctx, cfg.FSID); err != nil {
						logger.Printf("mon: %v", err)
					}
				}()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Name, "name", "a", "member name, unique among the mons")
	f.StringVar(&o.DataDir, "data", "cairn-mon", "directory for the etcd data")
	f.StringVar(&o.ClientURL, "client-url", "http://127.0.0.1:2379", "URL clients and OSDs reach etcd at")
	f.StringVar(&o.PeerURL, "peer-url", "http://127.0.0.1:2380", "URL the other mons reach this one at")
	f.StringVar(&o.InitialCluster, "initial-cluster", "", "all members: NAME=PEERURL,... (default: this mon alone)")
	f.StringVar(&o.ClusterState, "initial-cluster-state", "new", "new, or existing when joining a running cluster")
	f.StringVar(&o.MetricsURL, "metrics-url", "", "serve etcd's Prometheus metrics at /metrics on this URL, e.g. http://127.0.0.1:9299")
	f.StringVar(&dashListen, "dashboard-listen", "", "serve the web dashboard on this address, e.g. 127.0.0.1:8080 (needs --conf)")
	f.DurationVar(&dashEvery, "dashboard-sample-every", 10*time.Second, "how often the dashboard samples client IO and usage (it keeps an hour); volumes and buckets are listed every three samples")
	f.BoolVar(&dashAuth, "dashboard-auth", true, "ask for the dashboard password (cairn dashboard password prints it); false only where every user of the address may see the cluster")
	return cmd
}

// monTLS gives a mon whose URLs are https a certificate of the cluster's
// etcd CA (derived from the cluster key: conf/etcdtls.go).
func monTLS(o *mon.Options, c *client.Config) error {
	if !strings.HasPrefix(o.ClientURL, "https://") && !strings.HasPrefix(o.PeerURL, "https://") {
		return nil
	}
	var err error
	if o.CertPEM, o.KeyPEM, o.CAPEM, err = c.EtcdServerCert(o.ClientURL, o.PeerURL); err != nil {
		return err
	}
	o.ClientTLS, err = c.EtcdClientTLS()
	return err
}

func osdCmd(g *globals) *cobra.Command {
	var o osd.Options
	var id int
	var class, debugListen, writeback, flashCache string
	cmd := &cobra.Command{
		Use:   "osd",
		Short: "run an OSD daemon on one data directory (and the osd admin commands)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.DataDir == "" {
				return fmt.Errorf("osd: --data DIR is required")
			}
			writes := runtimepolicy.ForStorage(cmd.Context())
			cfg, err := client.LoadConfig(g.conf)
			if err != nil {
				return err
			}
			o.Conf, o.ID, o.Class, o.Logf = cfg, clustermap.OSDID(id), clustermap.DeviceClass(class), logger.Printf
			o.WriteLoad = writes
			if o.WritebackBytes, err = parseAreaSize("--writeback-size", writeback); err != nil {
				return err
			}
			if o.FlashCacheBytes, err = parseAreaSize("--flash-cache-size", flashCache); err != nil {
				return err
			}
			if o.StallTimeout == 0 {
				o.StallTimeout = -1 // none
			}
			if debugListen != "" {
				if err := serveDebug(debugListen); err != nil {
					return err
				}
			}
			return explainIndexDamage(osd.Run(cmd.Context(), o), id, o.DataDir, o.MetaDir)
		},
	}
	f := cmd.Flags()
	f.IntVar(&id, "id", -1, "OSD id (default: the one stored in --data, or a new one)")
	f.StringVar(&o.DataDir, "data", "", "directory for object data")
	f.StringVar(&o.MetaDir, "meta-dir", "", "directory for the journal and metadata, e.g. on a faster device (default DATA/meta)")
	f.StringVar(&o.Listen, "listen", "127.0.0.1:6800", "address to serve on: IPv4 host:port or [IPv6]:port")
	f.StringVar(&o.Host, "host", "", "host name in the failure-domain tree (default: this machine's name)")
	f.StringVar(&o.Rack, "rack", "", "rack of the host (default \"default\")")
	f.StringVar(&class, "class", "hdd", "device class: hdd, ssd or nvme")
	f.StringVar(&o.Flash, "flash-device", "", "name of the device of --meta-dir, shared by the OSDs whose indexes it holds: placement never puts two of them in one PG (default: detected from /sys, by serial number; \"none\": not shared)")
	f.Float64Var(&o.Weight, "weight", 1, "relative capacity (e.g. TiB)")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", 10*time.Second, "how long the OSD may be silent before it is marked down")
	f.Int64Var(&o.ReserveBytes, "reserve", 0, "bytes of free disk kept in reserve; writes fail with 'disk full' below it (default 64 MiB)")
	f.Int64Var(&o.CacheBytes, "cache-size", 0, "bytes of index cache, half for object records and small objects' data, half for pebble's blocks (default 256 MiB)")
	f.Int64Var(&o.DataCacheBytes, "data-cache-size", 0, "bytes of memory for repeated large reads (128 KiB to 4 MiB), outside the Go heap; negative: none (default 1 GiB, or a sixteenth of the machine's memory if less)")
	f.BoolVar(&o.ReserveDataCache, "data-cache-reserve", true, "take the data cache's memory at start, faulted in at idle priority, and keep it; false: take it as reads fill the cache")
	f.StringVar(&writeback, "writeback-size", "0", "size of the write-back area on the --meta-dir device, e.g. 8G: small overwrites stay there, durable, until they are moved to the data disk in sorted batches (0: none)")
	f.StringVar(&flashCache, "flash-cache-size", "0", "size of a read cache on the --meta-dir device, e.g. 16G: data blocks of small reads that went to the data disk are kept there and read from flash next time, as ZFS's L2ARC (0: none)")
	f.DurationVar(&o.StallTimeout, "stall-timeout", objstore.DefaultStallTimeout, "how long the --meta-dir device may leave a commit-log write or index flush unanswered before the OSD stops, as after an IO error (its data comes back from the other copies); 0: wait forever")
	f.StringVar(&debugListen, "debug-listen", "", "serve Go profiling (/debug/pprof) on this address, e.g. 127.0.0.1:6060")
	f.StringVar(&o.MetricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this address, e.g. 127.0.0.1:9283")
	f.IntVar(&o.RecoveryParallel, "recovery-parallel", 4, "objects recovery and backfill copy at once; fewer leaves more room for client IO")
	f.DurationVar(&o.ScrubInterval, "scrub-interval", 24*time.Hour, "how often each placement group is scrubbed (negative: never)")
	f.DurationVar(&o.DeepScrubInterval, "deep-scrub-interval", 7*24*time.Hour, "how often each placement group is deep-scrubbed, reading all data (negative: never)")
	cmd.AddCommand(osdTreeCmd(g), osdDFCmd(g), osdInOutCmd(g, "out"), osdInOutCmd(g, "in"), osdRmCmd(g), osdWritebackCmd(g))
	return cmd
}

func osdInOutCmd(g *globals, which string) *cobra.Command {
	short := "mark OSDs out: placement moves their data to the other OSDs"
	if which == "in" {
		short = "mark OSDs in: placement may put data on them again"
	}
	return &cobra.Command{
		Use:   which + " ID...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			for _, a := range args {
				id, err := parseOSDID(a)
				if err != nil {
					return err
				}
				if err := c.SetOSDIn(cmd.Context(), id, which == "in"); err != nil {
					return err
				}
				fmt.Fprintf(g.out, "marked osd.%d %s\n", id, which)
			}
			return nil
		},
	}
}

// osdWritebackCmd is `cairn osd writeback off|on ID...`.
func osdWritebackCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "writeback off|on ID...",
		Short: "turn OSDs' write-back areas off (they drain to the data disk and take no new writes, e.g. before replacing the flash) or on again",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "on" && args[0] != "off" {
				return fmt.Errorf("cairn osd writeback %s: say off or on, then the OSD ids", args[0])
			}
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			for _, a := range args[1:] {
				id, err := parseOSDID(a)
				if err != nil {
					return err
				}
				if err := c.SetOSDWriteback(cmd.Context(), id, args[0] == "on"); err != nil {
					return err
				}
				what := "on"
				if args[0] == "off" {
					what = "off: it drains to the data disk (cairn osd df shows what is left)"
				}
				fmt.Fprintf(g.out, "osd.%d write-back area %s\n", id, what)
			}
			return nil
		},
	}
}

func osdRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "remove OSDs that are out and whose data has moved elsewhere (all or none)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]int, len(args))
			for i, a := range args {
				id, err := parseOSDID(a)
				if err != nil {
					return err
				}
				ids[i] = id
			}
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.RemoveOSDs(cmd.Context(), ids...); err != nil {
				return err
			}
			for _, id := range ids {
				fmt.Fprintf(g.out, "removed osd.%d\n", id)
			}
			return nil
		},
	}
}

// explainIndexDamage adds to an OSD's refusal to start on a damaged index
// what the operator does about it: the store cannot be trusted, but its
// objects have other copies, so the OSD is replaced by an empty one.
func explainIndexDamage(err error, flagID int, dataDir, metaDir string) error {
	var ie *objstore.IndexCorruptionError
	if !errors.As(err, &ie) {
		return err
	}
	id := osdIDText(flagID, dataDir)
	wipe := dataDir
	if metaDir != "" {
		wipe += " and " + metaDir
	}
	return fmt.Errorf("%w. The OSD will not start on a damaged index, but its objects have other copies: "+
		"mark it out with `cairn osd out %s`, wait for HEALTH_OK, remove it with `cairn osd rm %s`, "+
		"empty %s, and start the OSD again: it joins empty and the cluster copies its data back", err, id, id, wipe)
}

// osdIDText returns the OSD's id as given by --id or, without it, as
// recorded in its data directory (osd.json), for advice; "ID" if neither.
func osdIDText(flagID int, dataDir string) string {
	if flagID >= 0 {
		return strconv.Itoa(flagID)
	}
	var idn struct {
		ID *int `json:"osd_id"`
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "osd.json"))
	if err != nil || json.Unmarshal(b, &idn) != nil || idn.ID == nil {
		return "ID"
	}
	return strconv.Itoa(*idn.ID)
}

// parseOSDID accepts "3" or "osd.3".
func parseOSDID(s string) (int, error) {
	id, err := strconv.Atoi(strings.TrimPrefix(s, "osd."))
	if err != nil || id < 0 {
		return 0, fmt.Errorf("%q is not an OSD id (want a number like 3 or osd.3)", s)
	}
	return id, nil
}

// serveDebug serves net/http/pprof for profiling a running daemon.
func serveDebug(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listener: %w", err)
	}
	go http.Serve(ln, nil)
	return nil
}

// parseAreaSize parses a size flag of the meta device (flag names it): 0,
// or a size as parseBytes takes.
func parseAreaSize(flag, s string) (int64, error) {
	if strings.TrimSpace(s) == "0" {
		return 0, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", flag, err)
	}
	return int64(n), nil
}
