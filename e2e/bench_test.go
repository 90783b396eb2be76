package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// BenchmarkCluster writes and reads 4 KiB and 4 MiB objects with 16 in
// flight against a dev cluster (3 hosts × 2 OSDs, size 3), reporting IOPS,
// MB/s and p50/p99 latency. Run: make bench.
func BenchmarkCluster(b *testing.B) {
	// A longer lease than the failure tests use: the benchmark saturates the
	// one shared disk that etcd also syncs to.
	c := startCluster(b, clusterOpts{leaseTTL: 10 * time.Second})
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.Pool("default")
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{4 << 10, 4 << 20} {
		data := payload("bench", 0, size)
		var written atomic.Int64
		b.Run(fmt.Sprintf("write-%s-qd16", human(size)), func(b *testing.B) {
			run(b, size, func(i int) error {
				err := p.Put(ctx, fmt.Sprintf("bench-%d-%d", size, i), data)
				if err == nil {
					for {
						w := written.Load()
						if int64(i) < w || written.CompareAndSwap(w, int64(i)+1) {
							break
						}
					}
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("read-%s-qd16", human(size)), func(b *testing.B) {
			n := int(written.Load())
			if n == 0 {
				b.Skip("nothing written")
			}
			run(b, size, func(i int) error {
				got, err := p.Get(ctx, fmt.Sprintf("bench-%d-%d", size, i%n))
				if err == nil && len(got) != size {
					return fmt.Errorf("read %d bytes, want %d", len(got), size)
				}
				return err
			})
		})
	}
	b.Run("write-4KiB-qd1", func(b *testing.B) {
		data := payload("bench", 0, 4<<10)
		runQD(b, 1, 4<<10, func(i int) error { return p.Put(ctx, fmt.Sprintf("qd1-%d", i), data) })
	})
}

func run(b *testing.B, size int, op func(i int) error) { runQD(b, 16, size, op) }

// runQD runs b.N ops with qd in flight and reports latency percentiles.
func runQD(b *testing.B, qd, size int, op func(i int) error) {
	b.SetBytes(int64(size))
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < qd; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := op(i); err != nil {
					failed.Store(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func human(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
