package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/devcluster"
	"github.com/spf13/cobra"
)

func devCmd(g *globals) *cobra.Command {
	o := devcluster.Options{Logf: logger.Printf}
	var localSockets bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "start a local cluster: etcd plus hosts × OSDs as separate processes on 127.0.0.x",
		Long: `Starts a complete cluster on this machine: one mon (embedded etcd) and
--hosts × --osds-per-host OSD processes, host N listening on 127.0.0.N, with all
data under --dir, an NBD server and an S3 gateway (HTTPS with --tls: the
certificate and its CA are made once, in DIR). Creates the pool "default"
(3 copies, one per host), the pool "s3" for the gateway's buckets (and with
--s3-data-pool a pool for new buckets' data, erasure-coded with --s3-data-ec)
and the S3 user admin with an access key, writes DIR/cairn.conf, DIR/dev.json and
DIR/s3.json, prints how to use it, and runs until Ctrl-C.
Running it again on the same --dir restarts the same cluster with its data.
A process that exits is started again, after a wait that grows to 30 s while
it keeps exiting (--restart=false: never); "cairn dev restart NAME" restarts
one now. DIR/dev.json always lists the running pids.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.NoLocalSockets = !localSockets
			return runDev(cmd.Context(), g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", "cairn-dev", "directory for the cluster's config, data and logs")
	f.IntVar(&o.Hosts, "hosts", 3, "number of hosts (127.0.0.1, 127.0.0.2, ...)")
	f.IntVar(&o.OSDsPerHost, "osds-per-host", 2, "OSD processes per host")
	f.IntVar(&o.EtcdPort, "etcd-port", 2379, "etcd client port (the peer port is the next one)")
	f.IntVar(&o.OSDPort, "osd-port", 6800, "port of osd.0; osd.N listens on this + N")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", 5*time.Second, "how long an OSD may be silent before it is marked down")
	f.StringSliceVar(&o.External, "etcd-endpoints", nil, "use this existing etcd cluster instead of starting a mon")
	f.BoolVar(&o.IPv6, "ipv6", false, "run IPv6-only: etcd and every OSD on [::1]")
	f.IntVar(&o.NBDPort, "nbd-port", 10809, "port of the NBD server for volumes on 127.0.0.1 (0: none)")
	f.IntVar(&o.MetricsPort, "metrics-port", 9300, "osd.N serves Prometheus metrics on this port + N, then the NBD gateway, the mon and the S3 gateway (0: none)")
	f.IntVar(&o.DashboardPort, "dashboard-port", 8080, "port of the mon's web dashboard on 127.0.0.1, without a password (0: none)")
	f.IntVar(&o.S3Port, "s3-port", 9000, "port of the S3 gateway on 127.0.0.1, for user admin (DIR/s3.json has its key; 0: none)")
	f.BoolVar(&o.TLS, "tls", false, "HTTPS for the S3 gateway (a certificate signed by a CA made for DIR: clients trust DIR/s3-ca.pem) and encrypted cluster traffic (client and OSD connections, and etcd over https)")
	f.BoolVar(&localSockets, "local-sockets", true, "processes reach the OSDs over Unix sockets, as on one host they do by default (false: over TCP on the loopback, to measure the network path)")
	f.DurationVar(&o.S3GCGrace, "s3-gc-grace", 0, "the S3 gateway's --gc-grace (0: its default)")
	f.DurationVar(&o.S3IntentTimeout, "s3-intent-timeout", 0, "the S3 gateway's --intent-timeout (0: its default)")
	f.IntVar(&o.S3IndexShardKeys, "s3-index-shard-keys", 0, "the S3 gateway's --index-shard-keys (0: its default)")
	f.StringVar(&o.S3DataPool, "s3-data-pool", "", "the S3 gateway's --data-pool, made if missing (see --s3-data-ec); buckets made before keep their data in s3")
	f.StringVar(&o.S3DataEC, "s3-data-ec", "", "make --s3-data-pool erasure-coded K+M (one shard per host, or per OSD with fewer than K+M hosts; needs "+client.ExperimentalECEnv+"=1)")
	f.Int64Var(&o.DataCacheSize, "data-cache-size", 0, "each OSD's memory for repeated large reads, as cairn osd --data-cache-size (0: its default)")
	f.StringVar(&o.WritebackSize, "writeback-size", "", "each OSD's write-back area on its meta device, as cairn osd --writeback-size (e.g. 64M; empty or 0: none)")
	f.StringVar(&o.FlashCacheSize, "flash-cache-size", "", "each OSD's read cache on its meta device, as cairn osd --flash-cache-size (e.g. 1G; empty or 0: none)")
	f.DurationVar(&o.StallTimeout, "stall-timeout", 0, "each OSD's --stall-timeout: how long its meta device may leave a commit unanswered before it stops (0: cairn osd's default)")
	f.BoolVar(&o.DataCacheReserve, "data-cache-reserve", true, "whether each OSD takes its data cache's memory at start, as cairn osd --data-cache-reserve")
	f.DurationVar(&o.DownOut, "down-out", 30*time.Second, "how long an OSD may stay down before it is marked out and its data re-replicated")
	f.BoolVar(&o.AutoRestart, "restart", true, "start a process that exits again, after a wait that grows to 30 s while it keeps exiting; false: leave it stopped until `cairn dev restart NAME`")
	cmd.AddCommand(devRestartCmd())
	return cmd
}

// runDev starts the dev cluster, says how to use it and runs until ctx
// ends.
func runDev(ctx context.Context, g *globals, o devcluster.Options) error {
	o.Out = g.out
	dc, err := devcluster.Start(ctx, o)
	if err != nil {
		return err
	}
	defer dc.Stop()
	info := dc.Info()
	if g.json {
		if err := g.printJSON(info); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	w := g.out
	pinfo := dc.Pool
	fmt.Fprintf(w, "cairn dev cluster %s is up, data in %s\n\n", dc.FSID, dc.Dir)
	for _, p := range info.Processes {
		fmt.Fprintf(w, "  %-8s %-26s pid %-7d log %s\n", p.Name, p.Addr, p.PID, p.Log)
		if p.Metrics != "" {
			fmt.Fprintf(w, "  %-8s metrics http://%s/metrics\n", "", p.Metrics)
		}
	}
	if dc.Dashboard != "" {
		fmt.Fprintf(w, "\ndashboard %s\n", dc.Dashboard)
	}
	if s := dc.S3; s != nil {
		fmt.Fprintf(w, "\n  s3  %s  access key %s secret %s  (also in %s)\n", s.Endpoint, s.AccessKey, s.SecretKey, filepath.Join(dc.Dir, "s3.json"))
		if s.CAFile != "" {
			fmt.Fprintf(w, "      its certificate's CA: %s\n", s.CAFile)
		}
	}
	fmt.Fprintf(w, "\n  pool %q: %d copies (min %d), %d pgs, one copy per %s\n", pinfo.Name, pinfo.Size, pinfo.MinSize, pinfo.PGNum, pinfo.FailureDomain)
	fmt.Fprintf(w, "  config: %s (process list: %s)\n\n", dc.Conf, filepath.Join(dc.Dir, "dev.json"))
	fmt.Fprintf(w, "Try it from another terminal:\n")
	fmt.Fprintf(w, "  export CAIRN_CONF=%s\n", dc.Conf)
	fmt.Fprintf(w, "  cairn status\n  cairn osd tree\n")
	fmt.Fprintf(w, "  echo hello | cairn obj put default greeting && cairn obj get default greeting\n")
	if dc.NBDAddr != "" {
		fmt.Fprintf(w, "  cairn volume create default/vm1 --size 10G && qemu-img info nbd://%s/default/vm1\n", dc.NBDAddr)
	}
	if s := dc.S3; s != nil {
		ca := ""
		if s.CAFile != "" {
			ca = "AWS_CA_BUNDLE=" + s.CAFile + " "
		}
		fmt.Fprintf(w, "  %sAWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url %s s3 mb s3://photos\n", ca, s.AccessKey, s.SecretKey, s.Endpoint)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "A process that exits is restarted; cairn dev restart osd.0 --dir %s restarts one now.\n", o.Dir)
	fmt.Fprintf(w, "Ctrl-C stops the cluster; cairn dev --dir %s starts it again with its data.\n", o.Dir)
	<-ctx.Done()
	fmt.Fprintf(w, "stopping %d processes...\n", len(info.Processes))
	return nil
}

func devRestartCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "restart NAME...",
		Short: "restart processes of a running cairn dev cluster: osd.3 (or 3), mon.a, nbd",
		Long: `Asks the cairn dev running on --dir to stop the named processes (SIGTERM,
then SIGKILL after 15 s) and start them again with the same arguments, one
after the other. A process that has exited is started at once. The new pids
are in DIR/dev.json, and stopping cairn dev stops them too.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				res, err := devcluster.RequestRestart(cmd.Context(), dir, name)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restarted %s: pid %d (was %d)\n", res.Name, res.PID, res.OldPID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "cairn-dev", "directory of the running cairn dev cluster")
	return cmd
}
