package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/client"
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

func benchObject(run string, i int64) string { return fmt.Sprintf("%s_obj_%d", run, i) }
func benchMeta(run string) string            { return run + "_meta" }

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
		return benchCleanup(ctx, g, p, o.runName, o.threads)
	}
	size, err := parseSize(o.size)
	if err != nil {
		return err
	}
	var count int64
	if mode != "write" {
		meta, err := p.OmapGet(ctx, benchMeta(o.runName), "count", "size")
		if errors.Is(err, client.ErrNotFound) || len(meta) < 2 {
			return fmt.Errorf("bench %s: no objects from a write run named %q in pool %q: run `cairn bench %s write --no-cleanup` first", mode, o.runName, poolName, poolName)
		}
		if err != nil {
			return err
		}
		count, _ = strconv.ParseInt(string(meta["count"]), 10, 64)
		size, _ = strconv.ParseInt(string(meta["size"]), 10, 64)
		if count == 0 {
			return fmt.Errorf("bench %s: the write run %q left no objects", mode, o.runName)
		}
	}
	progress := os.Stderr
	if !g.json {
		progress = os.Stdout
	}
	fmt.Fprintf(progress, "%s %s: %s objects, %d in flight, for %s (run %q)\n", mode, poolName, humanBytes(size), o.threads, o.duration, o.runName)
	fmt.Fprintln(progress, bench.ProgressHeader())

	before := c.OSDStatuses(ctx)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	var (
		next      atomic.Int64 // next object index
		inFlight  atomic.Int64
		secOps    atomic.Int64
		secBytes  atomic.Int64
		lastLatNs atomic.Int64
		errCount  atomic.Int64
		firstErr  atomic.Value
		hists     = make([]*bench.Histogram, o.threads)
		wg        sync.WaitGroup
	)
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	// One deadline for every operation of the run, about what each would
	// get from the client on its own: a timer per operation cost the
	// benchmark client, which shares the machine with the cluster it
	// measures, 14-15 µs of CPU per 4 KiB read against 11-14 without.
	opCtx, opCancel := context.WithTimeout(ctx, o.duration+c.OpTimeout)
	defer opCancel()
	start := time.Now()
	for w := 0; w < o.threads; w++ {
		h := bench.NewHistogram()
		hists[w] = h
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for runCtx.Err() == nil {
				var i int64
				switch mode {
				case "write":
					i = next.Add(1) - 1
				case "seq":
					i = next.Add(1) - 1
					if i >= count {
						return // every object read once, as rados bench seq does
					}
				case "rand":
					i = r.Int64N(count)
				}
				inFlight.Add(1)
				load.Begin()
				t0 := time.Now()
				var err error
				// Operations started before the deadline finish (with
				// opCtx, not runCtx), so every object index handed out
				// exists.
				if mode == "write" {
					err = p.Put(opCtx, benchObject(o.runName, i), data)
				} else {
					// Into a recycled buffer: the benchmark shares the
					// machine with the cluster it measures.
					got, objSize, release, rerr := p.ReadAtPooled(opCtx, benchObject(o.runName, i), 0, uint64(size))
					if err = rerr; err == nil && (int64(len(got)) != size || objSize != uint64(size)) {
						err = fmt.Errorf("%s is %d bytes, want %d", benchObject(o.runName, i), objSize, size)
					}
					release()
				}
				lat := time.Since(t0)
				load.End()
				inFlight.Add(-1)
				if err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				h.Record(lat)
				secOps.Add(1)
				secBytes.Add(size)
				lastLatNs.Store(int64(lat))
			}
		}(w)
	}
	// One sample per second, printed as it happens.
	var samples []bench.Sample
	var totOps, totBytes int64
	var latSum time.Duration
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	record := func(sec int) {
		ops, bytes := secOps.Swap(0), secBytes.Swap(0)
		last := time.Duration(lastLatNs.Load())
		totOps += ops
		totBytes += bytes
		latSum += time.Duration(ops) * last
		s := bench.Sample{Second: sec, Ops: ops, Bytes: bytes, InFlight: int(inFlight.Load()), LastLatency: last}
		samples = append(samples, s)
		var avg time.Duration
		if totOps > 0 {
			avg = latSum / time.Duration(totOps)
		}
		fmt.Fprintln(progress, bench.ProgressLine(s, time.Since(start), totOps, totBytes, avg, size))
	}
	for sec := 1; ; sec++ {
		select {
		case <-tick.C:
			record(sec)
			continue
		case <-done:
		}
		if elapsed := time.Since(start); elapsed > time.Duration(sec-1)*time.Second+100*time.Millisecond {
			record(sec) // the last partial second
		}
		break
	}
	elapsed := time.Since(start)
	total := bench.NewHistogram()
	for _, h := range hists {
		total.Merge(h)
	}
	sum := bench.Summarize(mode, poolName, size, o.threads, elapsed, samples, total, errCount.Load())
	sum.CPU = cpuDelta(before, c.OSDStatuses(ctx), sum.Bytes, sum.Ops)
	if b := loadBaseline(g, o); b != nil {
		sum.Efficiency = efficiency(b, mode, sum, poolCopies(c, poolName))
	}
	if mode == "write" {
		n := next.Load() // every index handed out was attempted
		if o.noCleanup {
			if err := p.OmapSet(ctx, benchMeta(o.runName), map[string][]byte{
				"count": []byte(strconv.FormatInt(n, 10)), "size": []byte(strconv.FormatInt(size, 10)),
			}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(progress, "cleaning up %d objects...\n", n)
			if err := deleteBenchObjects(ctx, p, o.runName, n, o.threads); err != nil {
				return err
			}
		}
	}
	if o.plot != "" {
		f, err := os.Create(o.plot)
		if err != nil {
			return err
		}
		title := fmt.Sprintf("cairn bench %s %s, %s objects, %d in flight", poolName, mode, humanBytes(size), o.threads)
		if err := bench.PlotSVG(f, title, samples, total); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if g.json {
		if err := g.printJSON(sum); err != nil {
			return err
		}
	} else {
		sum.WriteText(g.out)
		if o.plot != "" {
			fmt.Fprintf(g.out, "chart: %s\n", o.plot)
		}
	}
	if e, _ := firstErr.Load().(error); e != nil {
		return fmt.Errorf("bench: %d operations failed; first: %w", errCount.Load(), e)
	}
	return nil
}

// cpuDelta charges the CPU the OSDs used between two status snapshots.
func cpuDelta(before, after []client.OSDStatus, bytes, ops int64) *bench.CPUStat {
	prev := map[int]client.OSDStatus{}
	for _, s := range before {
		prev[s.ID] = s
	}
	var secs float64
	for _, s := range after {
		b, ok := prev[s.ID]
		if !ok || s.Err != "" || b.Err != "" || !s.Up || !b.Up || s.CPUSeconds < b.CPUSeconds {
			continue // restarted or unreachable: its CPU cannot be charged
		}
		secs += s.CPUSeconds - b.CPUSeconds
	}
	st := &bench.CPUStat{ClusterSeconds: secs}
	if bytes > 0 {
		st.SecondsPerGiB = secs / (float64(bytes) / (1 << 30))
	}
	if ops > 0 {
		st.SecondsPer1000Ops = secs / float64(ops) * 1000
	}
	return st
}

func benchCleanup(ctx context.Context, g *globals, p *client.Pool, run string, threads int) error {
	meta, err := p.OmapGet(ctx, benchMeta(run), "count")
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("bench cleanup: no objects from a run named %q in pool %q", run, p.Name())
	}
	if err != nil {
		return err
	}
	n, _ := strconv.ParseInt(string(meta["count"]), 10, 64)
	if err := deleteBenchObjects(ctx, p, run, n, threads); err != nil {
		return err
	}
	if err := p.Delete(ctx, benchMeta(run)); err != nil && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	if g.json {
		return g.printJSON(map[string]any{"removed": n, "run_name": run})
	}
	fmt.Fprintf(g.out, "removed %d objects of run %q\n", n, run)
	return nil
}

// deleteBenchObjects removes objects 0..n-1 of a run, tolerating ones that
// a failed write never created.
func deleteBenchObjects(ctx context.Context, p *client.Pool, run string, n int64, threads int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				if err := p.Delete(ctx, benchObject(run, i)); err != nil && !errors.Is(err, client.ErrNotFound) {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, _ := first.Load().(error); e != nil {
		return e
	}
	return nil
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

// poolCopies is the number of copies the pool keeps, 0 if unknown.
func poolCopies(c *client.Client, pool string) int {
	for _, p := range c.Pools() {
		if p.Name == pool {
			return p.Size
		}
	}
	return 0
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

// efficiency compares the measured median latency with what the hardware
// allows for one operation of that kind, and the CPU a write run cost with
// the CPU floor of replicated writes, where the run is the floor's kind:
// writes of its size to a pool of as many copies.
func efficiency(b *baseline.Result, mode string, s bench.Summary, copies int) *bench.Efficiency {
	bound := b.Bound.ReplicatedWriteUs
	kind := "replicated write (2 round trips + 1 sync write)"
	if mode != "write" {
		bound, kind = b.Bound.ReadUs, "read (1 round trip + 1 disk read)"
	}
	var e bench.Efficiency
	if bound > 0 && s.Latency.P50 > 0 {
		e.BoundLatencyUs, e.LatencyPercent = bound, 100*bound/s.Latency.P50
		e.Note = fmt.Sprintf("median latency vs the hardware bound for one %s", kind)
		if shared := b.Bound.SharedDiskWriteUs; mode == "write" && shared > 0 {
			e.Note += fmt.Sprintf("; %s%% of the %s µs bound when every copy's OSD is on this one disk, as in cairn dev",
				strconv.FormatFloat(100*shared/s.Latency.P50, 'f', 0, 64), strconv.FormatFloat(shared, 'f', 1, 64))
		}
		if m := b.Bound.MeasuredWriteUs; mode == "write" && m > 0 && s.ObjectSize == 4096 && copies == baseline.SharedCopies {
			e.Note += fmt.Sprintf("; %s%% of the %s µs that %d processes doing only that work took here",
				strconv.FormatFloat(100*m/s.Latency.P50, 'f', 0, 64), strconv.FormatFloat(m, 'f', 1, 64), baseline.SharedCopies)
		}
		if s.Concurrency > 1 {
			e.Note += "; with more than 1 in flight, queueing adds latency: compare -t 1 runs"
		}
	}
	if floor := b.Bound.WriteCPUPerGiB; mode == "write" && floor > 0 && s.CPU != nil && s.CPU.SecondsPerGiB > 0 &&
		s.ObjectSize == baseline.ReplicatedWriteSize && copies == baseline.SharedCopies {
		e.BoundCPUPerGiB, e.CPUPercent = floor, 100*floor/s.CPU.SecondsPerGiB
		if e.Note != "" {
			e.Note += "; "
		}
		e.Note += fmt.Sprintf("CPU vs the floor of %d-copy %d MiB writes: the copies' CPU per GiB when they only move, check, write and sync the bytes",
			baseline.SharedCopies, baseline.ReplicatedWriteSize>>20)
	}
	if e == (bench.Efficiency{}) {
		return nil
	}
	return &e
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
