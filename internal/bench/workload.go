package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// metaObject is the object that remembers a kept write run: its object
// count and size, as its data ("count N size S"), which every pool takes,
// erasure-coded ones too.
func metaObject(run string) string { return run + "_meta" }

// maxRunRecord bounds the read of a run's record.
const maxRunRecord = 256

func saveRun(ctx context.Context, p *client.Pool, run string, count, size int64) error {
	return p.Put(ctx, metaObject(run), fmt.Appendf(nil, "count %d size %d\n", count, size))
}

// loadRun reads what saveRun kept; client.ErrNotFound if nothing.
func loadRun(ctx context.Context, p *client.Pool, run string) (count, size int64, err error) {
	b, _, err := p.ReadAt(ctx, metaObject(run), 0, maxRunRecord)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(string(b), "count %d size %d", &count, &size); err != nil || count < 0 || size < 0 {
		return 0, 0, fmt.Errorf("bench: object %q of pool %q is not the record of a write run this cairn bench kept (%q): run `cairn bench %s write --no-cleanup --run-name %s` again",
			metaObject(run), p.Name(), b, p.Name(), run)
	}
	return count, size, nil
}

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
		var err error
		w.count, w.o.ObjectSize, err = loadRun(ctx, p, o.RunName)
		if errors.Is(err, client.ErrNotFound) {
			return nil, fmt.Errorf("bench %s: no objects from a write run named %q in pool %q: run `cairn bench %s write --no-cleanup` first", o.Mode, o.RunName, p.Name(), p.Name())
		}
		if err != nil {
			return nil, err
		}
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
	before := c.OSDStatuses(ctx)
	r := &run{w: w, data: make([]byte, o.ObjectSize)}
	for i := range r.data {
		r.data[i] = byte(i*7 + 1)
	}
	var cancel, opCancel context.CancelFunc
	r.runCtx, cancel = context.WithTimeout(ctx, o.Duration)
	defer cancel()
	// One deadline for every operation of the run, about what each would
	// get from the client on its own: a timer per operation costs the
	// benchmark client, which shares the machine with the cluster it
	// measures, CPU on every operation.
	r.opCtx, opCancel = context.WithTimeout(ctx, o.Duration+c.OpTimeout)
	defer opCancel()
	r.start = time.Now()
	hists := make([]*Histogram, o.Threads)
	var wg sync.WaitGroup
	for t := 0; t < o.Threads; t++ {
		hists[t] = NewHistogram()
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			r.thread(t, hists[t])
		}(t)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	samples := r.sample(done)
	elapsed := time.Since(r.start)
	total := NewHistogram()
	for _, h := range hists {
		total.Merge(h)
	}
	sum := Summarize(o.Mode, p.Name(), o.ObjectSize, o.Threads, elapsed, samples, total, r.errCount.Load())
	sum.CPU = CPUDelta(before, c.OSDStatuses(ctx), sum.Bytes, sum.Ops)
	if o.Baseline != nil {
		copies, ec := poolProtection(c, p.Name())
		sum.Efficiency = EfficiencyOf(o.Baseline, o.Mode, sum, copies, ec)
	}
	if o.Mode == "write" {
		// Every index handed out was attempted.
		if err := w.afterWrite(ctx, r.next.Load()); err != nil {
			return nil, err
		}
	}
	res := &Result{Summary: sum, Samples: samples, Latency: total}
	if e, _ := r.firstErr.Load().(error); e != nil {
		res.Failed = fmt.Errorf("bench: %d operations failed; first: %w", r.errCount.Load(), e)
	}
	return res, nil
}

// run is what one Run's threads and its sampler share.
type run struct {
	w      *Workload
	data   []byte          // what a write run writes to every object
	runCtx context.Context // ends when the run's duration is up
	opCtx  context.Context // every operation's deadline
	start  time.Time

	next      atomic.Int64 // next object index
	inFlight  atomic.Int64
	secOps    atomic.Int64 // this second's operations and bytes
	secBytes  atomic.Int64
	lastLatNs atomic.Int64
	errCount  atomic.Int64
	firstErr  atomic.Value
}

// thread runs operations one after another until the run's duration is up
// (or a seq run has read every object), recording their latencies in h.
func (r *run) thread(t int, h *Histogram) {
	o := &r.w.o
	rnd := rand.New(rand.NewPCG(uint64(t), uint64(r.start.UnixNano())))
	for r.runCtx.Err() == nil {
		i, ok := r.pick(rnd)
		if !ok {
			return // every object read once, as rados bench seq does
		}
		r.inFlight.Add(1)
		o.Begin()
		t0 := time.Now()
		err := r.op(i)
		lat := time.Since(t0)
		o.End()
		r.inFlight.Add(-1)
		if err != nil {
			r.errCount.Add(1)
			r.firstErr.CompareAndSwap(nil, err)
			continue
		}
		h.Record(lat)
		r.secOps.Add(1)
		r.secBytes.Add(o.ObjectSize)
		r.lastLatNs.Store(int64(lat))
	}
}

// pick returns the index of the next object to work on: the next one for
// write and seq, any of the written ones for rand. ok is false once a seq
// run has handed out every object.
func (r *run) pick(rnd *rand.Rand) (i int64, ok bool) {
	switch r.w.o.Mode {
	case "write":
		return r.next.Add(1) - 1, true
	case "seq":
		i = r.next.Add(1) - 1
		return i, i < r.w.count
	case "rand":
		return rnd.Int64N(r.w.count), true
	}
	return 0, true
}

// op writes or reads object i. Operations started before the deadline
// finish (with opCtx, not runCtx), so every object index handed out
// exists.
func (r *run) op(i int64) error {
	o, p, size := &r.w.o, r.w.p, r.w.o.ObjectSize
	if o.Mode == "write" {
		return p.Put(r.opCtx, Object(o.RunName, i), r.data)
	}
	// Into a recycled buffer: the benchmark shares the machine with the
	// cluster it measures.
	got, objSize, release, err := p.ReadAtPooled(r.opCtx, Object(o.RunName, i), 0, uint64(size))
	if err == nil && (int64(len(got)) != size || objSize != uint64(size)) {
		err = fmt.Errorf("%s is %d bytes, want %d", Object(o.RunName, i), objSize, size)
	}
	release()
	return err
}

// sample takes one sample per second, printing each as it happens, until
// done closes, and then one of the last partial second.
func (r *run) sample(done <-chan struct{}) []Sample {
	size, progress := r.w.o.ObjectSize, r.w.o.Progress
	var samples []Sample
	var totOps, totBytes int64
	var latSum time.Duration
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	record := func(sec int) {
		ops, bytes := r.secOps.Swap(0), r.secBytes.Swap(0)
		last := time.Duration(r.lastLatNs.Load())
		totOps += ops
		totBytes += bytes
		latSum += time.Duration(ops) * last
		s := Sample{Second: sec, Ops: ops, Bytes: bytes, InFlight: int(r.inFlight.Load()), LastLatency: last}
		samples = append(samples, s)
		var avg time.Duration
		if totOps > 0 {
			avg = latSum / time.Duration(totOps)
		}
		fmt.Fprintln(progress, ProgressLine(s, time.Since(r.start), totOps, totBytes, avg, size))
	}
	for sec := 1; ; sec++ {
		select {
		case <-tick.C:
			record(sec)
			continue
		case <-done:
		}
		if elapsed := time.Since(r.start); elapsed > time.Duration(sec-1)*time.Second+100*time.Millisecond {
			record(sec) // the last partial second
		}
		return samples
	}
}

// afterWrite ends a write run that wrote n objects: with NoCleanup it
// records their count and size for seq and rand runs, else it removes
// them.
func (w *Workload) afterWrite(ctx context.Context, n int64) error {
	o := w.o
	if o.NoCleanup {
		return saveRun(ctx, w.p, o.RunName, n, o.ObjectSize)
	}
	fmt.Fprintf(o.Progress, "cleaning up %d objects...\n", n)
	return deleteObjects(ctx, w.p, o.RunName, n, o.Threads)
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
	n, _, err := loadRun(ctx, p, run)
	if errors.Is(err, client.ErrNotFound) {
		return 0, fmt.Errorf("bench cleanup: no objects from a run named %q in pool %q", run, p.Name())
	}
	if err != nil {
		return 0, err
	}
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

// poolProtection is the number of copies the pool keeps (0 if unknown) and
// its erasure code ("" for a replicated pool).
func poolProtection(c *client.Client, pool string) (copies int, ec string) {
	for _, p := range c.Pools() {
		if p.Name == pool {
			return p.Size, p.EC
		}
	}
	return 0, ""
}
