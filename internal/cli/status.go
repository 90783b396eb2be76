package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairn-storage/cairn/internal/health"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/report"
	"github.com/spf13/cobra"
)

// humanBytes prints a byte count in binary units ("1.5 GiB").
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func statusCmd(g *globals) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show the cluster's health in plain words (--watch: live, with progress bars)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ms, cfg, err := g.meta(ctx)
			if err != nil {
				return err
			}
			defer ms.Close()
			for {
				st, err := loadStatus(cmd, ms)
				if err != nil {
					return err
				}
				st.Etcd = cfg.EtcdEndpoints
				if g.json {
					if err := g.printJSON(st); err != nil || !watch {
						return err
					}
				} else {
					if watch {
						fmt.Fprint(g.out, "\033[H\033[2J") // clear the terminal
					}
					printStatus(g.out, st)
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh every second until interrupted")
	return cmd
}

func loadStatus(cmd *cobra.Command, ms *meta.Store) (health.Status, error) {
	ctx := cmd.Context()
	m, _, err := ms.Map(ctx)
	if err != nil {
		return health.Status{}, err
	}
	stats, err := ms.Stats(ctx)
	if err != nil {
		return health.Status{}, err
	}
	reports, err := ms.Reports(ctx)
	if err != nil {
		return health.Status{}, err
	}
	gws, err := ms.Gateways(ctx)
	if err != nil {
		return health.Status{}, err
	}
	st := health.Compute(m, stats, reports, time.Now())
	if st.Checks == nil {
		st.Checks = []health.Check{}
	}
	st.Gateways = gws
	return st, nil
}

func printStatus(w io.Writer, st health.Status) {
	fmt.Fprintf(w, "cluster %s (map epoch %d)\n", st.FSID, st.Epoch)
	fmt.Fprintf(w, "  health: %s\n", st.Health)
	for _, c := range st.Checks {
		fmt.Fprintf(w, "    [%s] %s\n", strings.TrimPrefix(c.Severity, "HEALTH_"), c.Summary)
		for _, d := range c.Detail {
			fmt.Fprintf(w, "        %s\n", d)
		}
	}
	fmt.Fprintf(w, "  etcd:   %s\n", strings.Join(st.Etcd, ", "))
	fmt.Fprintf(w, "  osds:   %d total, %d up, %d in\n", st.OSDs, st.OSDsUp, st.OSDsIn)
	fmt.Fprintf(w, "  pools:  %d pools, %d pgs, %d active+clean\n", st.Pools, st.PGs, st.PGsOK)
	printRedundancy(w, st.Redundancy)
	if len(st.PGStates) > 0 {
		keys := make([]string, 0, len(st.PGStates))
		for k := range st.PGStates {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d %s", st.PGStates[k], k)
		}
		fmt.Fprintf(w, "  pgs:    %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "  usage:  %s used of %s\n", humanBytes(st.Used), humanBytes(st.Total))
	// Only when it takes time to drain: on fast data disks it is a few
	// megabytes synced within a second, not worth a line.
	if st.DrainSeconds >= 1 {
		fmt.Fprintf(w, "  unsynced: %s of small writes in commit logs, not yet on data disks (longest drain: %s, %.1f s)\n",
			humanBytes(st.Unsynced), st.DrainOSD, st.DrainSeconds)
	}
	if st.WritebackArea > 0 || st.WritebackDirty > 0 {
		longest := ""
		if st.DestageSeconds > 0 {
			longest = fmt.Sprintf("; longest to destage: %s, %s", st.DestageOSD, seconds(st.DestageSeconds))
		}
		fmt.Fprintf(w, "  writeback: %s in write-back areas of %s, not yet on data disks%s (cairn osd df: each OSD's, and its destage rate)\n",
			humanBytes(st.WritebackDirty), humanBytes(st.WritebackArea), longest)
	}
	if fc := st.FlashCache; fc.Size > 0 {
		fmt.Fprintf(w, "  flash cache: %s held of %s%s (cairn osd df: each OSD's)\n", humanBytes(fc.Used), humanBytes(fc.Size), hitShare(fc.Hits, fc.Misses))
	}
	printGateways(w, st.Gateways)
	if len(st.Work) > 0 {
		fmt.Fprintf(w, "  work:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, wk := range st.Work {
			total := wk.ObjectsDone + wk.ObjectsLeft
			eta := ""
			if wk.ETASeconds > 0 {
				eta = "ETA " + (time.Duration(wk.ETASeconds) * time.Second).String()
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%d/%d objects\t%s\t%.1f MB/s\t%s\n", wk.OSD, wk.Kind, bar(int(wk.ObjectsDone), int(total), 20),
				wk.ObjectsDone, total, humanBytes(wk.BytesDone), wk.MBps, eta)
		}
		tw.Flush()
	}
}

// printRedundancy shows each pool's protection: what it survives by
// design, what it can lose now, and the user data that still fits.
func printRedundancy(w io.Writer, pools []health.PoolRedundancy) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range pools {
		avail := "-"
		if p.MaxAvail > 0 {
			avail = humanBytes(p.MaxAvail) + " free"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\tnow: %s\t%s\n", p.Name, p.Kind, p.Design(), p.Now(), avail)
	}
	tw.Flush()
}

// printGateways lists the running gateways, one a line.
func printGateways(w io.Writer, gws []report.Gateway) {
	if len(gws) == 0 {
		return
	}
	fmt.Fprintf(w, "  gateways:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range gws {
		up := time.Since(g.Started).Truncate(time.Second)
		fmt.Fprintf(tw, "    %s\t%s\tpool %s\ton %s\tpid %d\tup %s\n", g.Kind, g.Endpoint, g.Pool, g.Host, g.PID, up)
	}
	tw.Flush()
}

func osdTreeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tree",
		Short: "show hosts and OSDs in their failure-domain tree",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			m, _, err := ms.Map(cmd.Context())
			if err != nil {
				return err
			}
			rows := health.Tree(m)
			if g.json {
				return g.printJSON(rows)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCLASS\tWEIGHT\tTYPE NAME\tSTATUS\tIN\tADDR\tFLASH")
			for _, r := range rows {
				id, in := "", ""
				if r.ID != nil {
					id = fmt.Sprint(*r.ID)
				}
				if r.In != nil {
					in = "in"
					if !*r.In {
						in = "out"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%.3f\t%s%s %s\t%s\t%s\t%s\t%s\n", id, r.Class, r.Weight, strings.Repeat("  ", r.Depth), r.Type, r.Name, r.Status, in, r.Addr, r.Flash)
			}
			return tw.Flush()
		},
	}
}

// hitShare is "; N% of lookups hit" for a cache, or nothing before its
// first lookup.
func hitShare(hits, misses int64) string {
	if hits+misses == 0 {
		return ""
	}
	return fmt.Sprintf("; %.0f%% of lookups hit", 100*float64(hits)/float64(hits+misses))
}
