package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/internal/baseline"
	"github.com/cairn-storage/cairn/internal/bench"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/runtimepolicy"
	"github.com/spf13/cobra"
)

type benchOptions struct {
	size         string
	threads      int
	duration     time.Duration
	noCleanup    bool
	runName      string
	plot         string
	baselineDir  string
	baselineFile string
	baselineEach time.Duration // -d given with --baseline: per measurement
}

func benchCmd(g *globals) *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench POOL write|seq|rand|cleanup | bench --baseline DIR",
		Short: "measure the cluster (like rados bench) or the raw hardware (--baseline)",
		Long: `cairn bench POOL write   writes objects of -b bytes with -t in flight for -d;
                          --no-cleanup leaves them for seq and rand
cairn bench POOL seq     reads them back in order
cairn bench POOL rand    reads them at random
cairn bench POOL cleanup removes them
cairn bench --baseline DIR measures what the disk under DIR and the loopback
                          network allow, and saves it so later runs print their
                          efficiency against that bound (-d: per measurement,
                          3s if not given).

A progress line is printed every second (to stderr with --json), then a summary:
bandwidth, IOPS, latency percentiles, and the CPU time the OSDs spent.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.baselineDir != "" {
				if len(args) != 0 {
					return fmt.Errorf("bench --baseline takes no other arguments")
				}
				if cmd.Flags().Changed("duration") {
					if o.duration <= 0 {
						return fmt.Errorf("bench --baseline: -d %v: want a positive duration per measurement", o.duration)
					}
					o.baselineEach = o.duration
				}
				return runBaseline(cmd.Context(), g, o)
			}
			if len(args) != 2 {
				return fmt.Errorf("usage: cairn bench POOL write|seq|rand|cleanup (or cairn bench --baseline DIR)")
			}
			return runBench(cmd.Context(), g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.size, "block-size", "b", "4M", "object size: 4096, 4K, 4KiB, 4M, 4MiB")
	f.IntVarP(&o.threads, "concurrent-ios", "t", 16, "operations in flight")
	f.DurationVarP(&o.duration, "duration", "d", 30*time.Second, "how long to run")
	f.BoolVar(&o.noCleanup, "no-cleanup", false, "write: keep the objects for seq and rand")
	f.StringVar(&o.runName, "run-name", "cairn_bench", "name prefix of the benchmark's objects")
	f.StringVar(&o.plot, "plot", "", "also draw throughput over time and the latency distribution to this SVG file")
	f.StringVar(&o.baselineDir, "baseline", "", "measure the hardware bound of the disk under DIR and the loopback network")
	f.StringVar(&o.baselineFile, "baseline-file", "", "saved baseline to compare with (default: baseline.json beside cairn.conf)")
	return cmd
}

// parseSize accepts an object size: 4096, 4K, 4KiB, 4k, 4M, 4MiB, 1G.
func parseSize(s string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, err
	}
	if n > 1<<30 {
		return 0, fmt.Errorf("size %q: at most 1 GiB per object", s)
	}
	return int64(n), nil
}

// parseBytes accepts a positive size in bytes with an optional binary
// unit: 4096, 4K, 4KiB, 512M, 100G, 2T, 1P, 1E. Sizes up to 8 EiB parse;
// what takes them sets its own maximum.
func parseBytes(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "IB"), "B")
	mult := uint64(1)
	for i, u := range "KMGTPE" {
		if strings.HasSuffix(t, string(u)) {
			mult, t = 1<<(10*(i+1)), strings.TrimSuffix(t, string(u))
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if errors.Is(err, strconv.ErrRange) || err == nil && n > (1<<63)/mult {
		return 0, fmt.Errorf("size %q is too large: sizes go up to 8 EiB", s)
	}
	if err != nil || n == 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, like 4096, 4K, 512M or 100G", s)
	}
	return n * mult, nil
}

func runBench(ctx context.Context, g *globals, o benchOptions, poolName, mode string) error {
	switch mode {
	case "write", "seq", "rand", "cleanup":
	default:
		return fmt.Errorf("bench: unknown mode %q: want write, seq, rand or cleanup", mode)
	}
	if o.threads < 1 || o.threads > 4096 {
		return fmt.Errorf("bench: -t %d: want 1..4096 operations in flight", o.threads)
	}
	// The bench streams requests like a gateway, and shares the machine
	// with the cluster it measures: it takes a gateway's policy, and runs
	// on one processor while one operation is in flight (-t 1).
	load := runtimepolicy.ForGateway(ctx)
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.Pool(poolName)
	if err != nil {
		return err
	}
	if mode == "cleanup" {
		n, err := bench.Cleanup(ctx, p, o.runName, o.threads)
		if err != nil {
			return err
		}
		if g.json {
			return g.printJSON(map[string]any{"removed": n, "run_name": o.runName})
		}
		fmt.Fprintf(g.out, "removed %d objects of run %q\n", n, o.runName)
		return nil
	}
	size, err := parseSize(o.size)
	if err != nil {
		return err
	}
	progress := os.Stderr
	if !g.json {
		progress = os.Stdout
	}
	w, err := bench.NewWorkload(ctx, c, p, bench.Options{Mode: mode, ObjectSize: size, Threads: o.threads, Duration: o.duration,
		RunName: o.runName, NoCleanup: o.noCleanup, Baseline: loadBaseline(g, o), Progress: progress, Begin: load.Begin, End: load.End})
	if err != nil {
		return err
	}
	size = w.ObjectSize()
	fmt.Fprintf(progress, "%s %s: %s objects, %d in flight, for %s (run %q)\n", mode, poolName, humanBytes(size), o.threads, o.duration, o.runName)
	fmt.Fprintln(progress, bench.ProgressHeader())
	res, err := w.Run(ctx)
	if err != nil {
		return err
	}
	if o.plot != "" {
		f, err := os.Create(o.plot)
		if err != nil {
			return err
		}
		title := fmt.Sprintf("cairn bench %s %s, %s objects, %d in flight", poolName, mode, humanBytes(size), o.threads)
		if err := bench.PlotSVG(f, title, res.Samples, res.Latency); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if g.json {
		if err := g.printJSON(res.Summary); err != nil {
			return err
		}
	} else {
		res.Summary.WriteText(g.out)
		if o.plot != "" {
			fmt.Fprintf(g.out, "chart: %s\n", o.plot)
		}
	}
	return res.Failed
}

// baselinePath is where `cairn bench --baseline` saves its result: beside
// cairn.conf when there is one.
func baselinePath(g *globals, o benchOptions) string {
	if o.baselineFile != "" {
		return o.baselineFile
	}
	if p, err := conf.Find(g.conf); err == nil {
		return filepath.Join(filepath.Dir(p), "baseline.json")
	}
	return ""
}

func loadBaseline(g *globals, o benchOptions) *baseline.Result {
	path := baselinePath(g, o)
	if path == "" {
		return nil
	}
	b, err := baseline.Load(path)
	if err != nil {
		return nil
	}
	return b
}

const baselineCopyUse = "baseline-copy"

// baselineCopyCmd is one copy of `cairn bench --baseline`'s replicated-write
// measurement, which starts it; it runs as an OSD runs (the runtime policy
// of a storage daemon, the scheduler trace of a long-running command) and
// exits when its standard input closes, so none outlives the measurement.
func baselineCopyCmd() *cobra.Command {
	var o baseline.CopyOptions
	cmd := &cobra.Command{
		Use:    baselineCopyUse,
		Short:  "one copy of cairn bench --baseline's replicated writes (started by it)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			load := runtimepolicy.ForStorage(ctx)
			o.Begin, o.End = load.Begin, load.End
			go func() {
				io.Copy(io.Discard, os.Stdin)
				cancel()
			}()
			return baseline.ServeCopy(ctx, o, os.Stdout)
		},
	}
	cmd.Flags().StringVar(&o.File, "file", "", "the copy's file (created, and removed at exit)")
	cmd.Flags().StringArrayVar(&o.Peers, "peer", nil, "address of another copy to forward every write to")
	cmd.Flags().IntVar(&o.DataShards, "data-shards", 0, "code each write into this many data shards and parity shards, one shard per copy (this one first, then each --peer), instead of forwarding it whole")
	return longRunning(cmd)
}

func runBaseline(ctx context.Context, g *globals, o benchOptions) error {
	out := os.Stderr
	if !g.json {
		out = os.Stdout
	}
	bo := baseline.Options{Dir: o.baselineDir, Duration: o.baselineEach, Progress: func(step string) { fmt.Fprintln(out, step) }}
	if exe, err := os.Executable(); err == nil {
		bo.CopyCommand = []string{exe, baselineCopyUse}
	} else {
		fmt.Fprintf(out, "not measuring replicated writes: %v\n", err)
	}
	res, err := baseline.Run(ctx, bo)
	if err != nil {
		return err
	}
	path := baselinePath(g, o)
	if path == "" {
		path = filepath.Join(o.baselineDir, "cairn-baseline.json")
	}
	if err := res.Save(path); err != nil {
		return err
	}
	if g.json {
		return g.printJSON(res)
	}
	res.WriteText(g.out)
	fmt.Fprintf(g.out, "saved to %s: cairn bench prints its efficiency against it\n", path)
	return nil
}
