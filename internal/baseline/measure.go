package baseline

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// errDone, returned by an op, ends the measurement early without an error
// (a sequential pass reached the end of the file).
var errDone = errors.New("done")

// seed is the fixed PRNG seed: two runs issue the same offsets.
const seed = 0x6361_6972_6e00_0001 // "cairn"

// worker is one goroutine's state during a measurement.
type worker struct {
	id      int
	rng     *rand.Rand
	samples []time.Duration // reservoir of at most limit latencies
	limit   int
	ops     int64
	sum     time.Duration
}

func (w *worker) record(d time.Duration) {
	w.ops++
	w.sum += d
	if len(w.samples) < w.limit {
		w.samples = append(w.samples, d)
	} else if i := w.rng.Int64N(w.ops); i < int64(w.limit) {
		w.samples[i] = d
	}
}

// run is one measurement: workers goroutines call op in a loop for d, until
// ctx ends, op fails, or op returns errDone. Each call is timed. finish, if
// not nil, runs after every worker stopped and inside the timed region (the
// final fdatasync of a sequential write). Every op moves bytesPerOp bytes.
func run(ctx context.Context, d time.Duration, workers int, bytesPerOp int64,
	op func(w *worker) error, finish func() error) (Measure, error) {
	var (
		stop     atomic.Bool
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = &worker{
			id:    i,
			rng:   rand.New(rand.NewPCG(seed, uint64(i))),
			limit: maxSamples / workers,
		}
	}
	start := time.Now()
	deadline := start.Add(d)
	for _, w := range ws {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				err := op(w)
				if err != nil {
					if !errors.Is(err, errDone) {
						errOnce.Do(func() { firstErr = err })
					}
					stop.Store(true)
					return
				}
				w.record(time.Since(t0))
			}
		})
	}
	wg.Wait()
	if firstErr == nil && finish != nil {
		firstErr = finish()
	}
	elapsed := time.Since(start)
	if firstErr != nil {
		return Measure{}, firstErr
	}

	var m Measure
	var sum time.Duration
	var all []time.Duration
	for _, w := range ws {
		m.Ops += w.ops
		sum += w.sum
		all = append(all, w.samples...)
	}
	m.Seconds = elapsed.Seconds()
	if m.Ops == 0 || m.Seconds <= 0 {
		return m, nil
	}
	slices.Sort(all)
	m.IOPS = float64(m.Ops) / m.Seconds
	m.MBps = float64(m.Ops) * float64(bytesPerOp) / 1e6 / m.Seconds
	m.AvgUs = us(sum / time.Duration(m.Ops))
	m.P50us = us(percentile(all, 0.50))
	m.P99us = us(percentile(all, 0.99))
	return m, nil
}

// percentile is the nearest-rank percentile of sorted samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// alignedBuf returns n bytes starting at a blockSize-aligned address, as
// O_DIRECT requires. The Go heap does not move objects.
func alignedBuf(n int) []byte {
	b := make([]byte, n+blockSize)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (blockSize - 1))
	if off != 0 {
		off = blockSize - off
	}
	return b[off : off+n : off+n]
}
