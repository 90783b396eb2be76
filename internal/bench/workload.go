package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/baseline"
)

// Options of one workload run of `cairn bench`, the rados bench of cairn.
type Options struct {
	Mode       string // write, seq or rand
	ObjectSize int64  // write: the size of each object; seq and rand read what the write run wrote
	Threads    int    // operations in flight
	Duration   time.Duration
	RunName    string // name prefix of the run's objects
	NoCleanup  bool   // write: keep the objects (and their count) for seq and rand
	// Baseline, when not nil, is the hardware bound the run's efficiency
	// is reported against.
	Baseline *baseline.Result
	// Progress receives a line per second of the run, and the cleanup's.
	Progress io.Writer
	// Begin and End, when set, are called around every operation (the
	// process's runtime policy counts its load with them).
	Begin, End func()
}

// Object is the name of object i of a run.
func Object(run string, i int64) string { return fmt.Sprintf("%s_obj_%d", run, i) }

// metaObject is the object whose omap remembers a kept write run: its
// object count and size.
func metaObject(run string) string { return run + "_meta" }

// Workload is a run ready to start: a write run, or a read run over the
// objects a write run kept.
type Workload struct {
	c     *client.Client
	p     *client.Pool
	o     Options
	count int64 // seq, rand: the objects the write run left
}

// NewWorkload prepares a run of o.Mode on pool p of c. A read run (seq,
// rand) finds the objects the write run named o.RunName kept, and their
// size, which replaces o.ObjectSize.
func NewWorkload(ctx context.Context, c *client.Client, p *client.Pool, o Options) (*Workload, error) {
	w := &Workload{c: c, p: p, o: o}
	if o.Mode != "write" {
		meta, err := p.OmapGet(ctx, metaObject(o.RunName), "count", "size")
		if errors.Is(err, client.ErrNotFound) || len(meta) < 2 {
			return nil, fmt.Errorf("bench %s: no objects from a write run named %q in pool %q: run `cairn bench %s write --no-cleanup` first", o.Mode, o.RunName, p.Name(), p.Name())
		}
		if err != nil {
			return nil, err
		}
		w.count, _ = strconv.ParseInt(string(meta["count"]), 10, 64)
		w.o.ObjectSize, _ = strconv.ParseInt(string(meta["size"]), 10, 64)
		if w.count == 0 {
			return nil, fmt.Errorf("bench %s: the write run %q left no objects", o.Mode, o.RunName)
		}
	}
	if w.o.Progress == nil {
		w.o.Progress = io.Discard
	}
	if w.o.Begin == nil || w.o.End == nil {
		w.o.Begin, w.o.End = func() {}, func() {}
	}
	return w, nil
}

// ObjectSize is the size of the run's objects.
func (w *Workload) ObjectSize() int64 { return w.o.ObjectSize }

// Result is a finished run: its summary and what a chart of it needs.
type Result struct {
	Summary Summary
	Samples []Sample
	Latency *Histogram // every operation's
	// Failed, when not nil, says how many operations failed and the first
	// error; the summary counts only those that succeeded.
	Failed error
}

// Run runs the workload for its duration (a seq run also stops once it
// read every object), printing a progress line per second, and returns
// its result with the CPU the OSDs spent on it. A write run then removes
// its objects, or with NoCleanup records them for seq and rand. An error
// means the run could not finish; failed operations are Result.Failed.
func (w *Workload) Run(ctx context.Context) (*Result, error) {
	c, p, o := w.c, w.p, w.o
	mode, size, count, progress := o.Mode, o.ObjectSize, w.count, o.Progress
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
		hists     = make([]*Histogram, o.Threads)
		wg        sync.WaitGroup
	)
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	// One deadline for every operation of the run, about what each would
	// get from the client on its own: a timer per operation costs the
	// benchmark client, which shares the machine with the cluster it
	// measures, CPU on every operation.
	opCtx, opCancel := context.WithTimeout(ctx, o.Duration+c.OpTimeout)
	defer opCancel()
	start := time.Now()
	for t := 0; t < o.Threads; t++ {
		h := NewHistogram()
		hists[t] = h
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(t), uint64(start.UnixNano())))
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
				o.Begin()
				t0 := time.Now()
				var err error
				// Operations started before the deadline finish (with
				// opCtx, not runCtx), so every object index handed out
				// exists.
				if mode == "write" {
					err = p.Put(opCtx, Object(o.RunName, i), data)
				} else {
					// Into a recycled buffer: the benchmark shares the
					// machine with the cluster it measures.
					got, objSize, release, rerr := p.ReadAtPooled(opCtx, Object(o.RunName, i), 0, uint64(size))
					if err = rerr; err == nil && (int64(len(got)) != size || objSize != uint64(size)) {
						err = fmt.Errorf("%s is %d bytes, want %d", Object(o.RunName, i), objSize, size)
					}
					release()
				}
				lat := time.Since(t0)
				o.End()
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
		}(t)
	}
	// One sample per second, printed as it happens.
	var samples []Sample
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
		s := Sample{Second: sec, Ops: ops, Bytes: bytes, InFlight: int(inFlight.Load()), LastLatency: last}
		samples = append(samples, s)
		var avg time.Duration
		if totOps > 0 {
			avg = latSum / time.Duration(totOps)
		}
		fmt.Fprintln(progress, ProgressLine(s, time.Since(start), totOps, totBytes, avg, size))
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
	total := NewHistogram()
	for _, h := range hists {
		total.Merge(h)
	}
	sum := Summarize(mode, p.Name(), size, o.Threads, elapsed, samples, total, errCount.Load())
	sum.CPU = CPUDelta(before, c.OSDStatuses(ctx), sum.Bytes, sum.Ops)
	if o.Baseline != nil {
		sum.Efficiency = EfficiencyOf(o.Baseline, mode, sum, poolCopies(c, p.Name()))
	}
	if mode == "write" {
		n := next.Load() // every index handed out was attempted
		if o.NoCleanup {
			if err := p.OmapSet(ctx, metaObject(o.RunName), map[string][]byte{
				"count": []byte(strconv.FormatInt(n, 10)), "size": []byte(strconv.FormatInt(size, 10)),
			}); err != nil {
				return nil, err
			}
		} else {
			fmt.Fprintf(progress, "cleaning up %d objects...\n", n)
			if err := deleteObjects(ctx, p, o.RunName, n, o.Threads); err != nil {
				return nil, err
			}
		}
	}
	res := &Result{Summary: sum, Samples: samples, Latency: total}
	if e, _ := firstErr.Load().(error); e != nil {
		res.Failed = fmt.Errorf("bench: %d operations failed; first: %w", errCount.Load(), e)
	}
	return res, nil
}

// CPUDelta charges the CPU the OSDs used between two status snapshots.
func CPUDelta(before, after []client.OSDStatus, bytes, ops int64) *CPUStat {
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
	st := &CPUStat{ClusterSeconds: secs}
	if bytes > 0 {
		st.SecondsPerGiB = secs / (float64(bytes) / (1 << 30))
	}
	if ops > 0 {
		st.SecondsPer1000Ops = secs / float64(ops) * 1000
	}
	return st
}

// Cleanup removes the objects a write run named run kept, and its record
// of them, and returns how many it removed (objects a failed write never
// created count too).
func Cleanup(ctx context.Context, p *client.Pool, run string, threads int) (int64, error) {
	meta, err := p.OmapGet(ctx, metaObject(run), "count")
	if errors.Is(err, client.ErrNotFound) {
		return 0, fmt.Errorf("bench cleanup: no objects from a run named %q in pool %q", run, p.Name())
	}
	if err != nil {
		return 0, err
	}
	n, _ := strconv.ParseInt(string(meta["count"]), 10, 64)
	if err := deleteObjects(ctx, p, run, n, threads); err != nil {
		return 0, err
	}
	if err := p.Delete(ctx, metaObject(run)); err != nil && !errors.Is(err, client.ErrNotFound) {
		return 0, err
	}
	return n, nil
}

// deleteObjects removes objects 0..n-1 of a run, tolerating ones that
// a failed write never created.
func deleteObjects(ctx context.Context, p *client.Pool, run string, n int64, threads int) error {
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
				if err := p.Delete(ctx, Object(run, i)); err != nil && !errors.Is(err, client.ErrNotFound) {
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

// poolCopies is the number of copies the pool keeps, 0 if unknown.
func poolCopies(c *client.Client, pool string) int {
	for _, p := range c.Pools() {
		if p.Name == pool {
			return p.Size
		}
	}
	return 0
}
