package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRecovery measures self-healing on a dev cluster (3 hosts × 2
// OSDs, size 3) holding 1 GiB of client data: an OSD is SIGKILLed, marked
// out after the down-out interval and its PGs backfilled, while a client
// keeps writing 4 KiB objects with 16 in flight. It reports the time from
// the kill to HEALTH_OK, the backfill throughput, and the client's write
// IOPS during the backfill as a share of its IOPS before the failure.
// Run: make bench-heal.
func BenchmarkRecovery(b *testing.B) {
	if b.N > 1 {
		b.Skip("one run is the measurement: use -benchtime 1x")
	}
	const lease, downOut = 5 * time.Second, 5 * time.Second
	c := startCluster(b, clusterOpts{leaseTTL: lease, downOut: downOut})
	ctx := context.Background()
	p := c.pool("default")
	obj := payload("fill", 0, 4<<20)
	names := make([]string, 256) // 1 GiB
	for i := range names {
		names[i] = fmt.Sprintf("fill-%03d", i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, n := range names {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := p.Put(ctx, n, obj); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	c.waitHealthy(60*time.Second, "after the fill")

	// The client load: 4 KiB overwrites, 16 in flight, counted per op.
	var ops atomic.Int64
	stop := make(chan struct{})
	small := payload("small", 0, 4<<10)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				if err := p.Put(wctx, fmt.Sprintf("iops-%02d-%03d", w, i%64), small); err == nil {
					ops.Add(1)
				}
				cancel()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(2 * time.Second) // warm up
	o0, t0 := ops.Load(), time.Now()
	time.Sleep(8 * time.Second)
	before := float64(ops.Load()-o0) / time.Since(t0).Seconds()

	// Client IOPS per second from the kill on, for the log.
	var timeline []int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	tlDone := make(chan struct{})
	var tlMu sync.Mutex
	go func() {
		last := ops.Load()
		for {
			select {
			case <-tlDone:
				return
			case <-tick.C:
				n := ops.Load()
				tlMu.Lock()
				timeline = append(timeline, n-last)
				tlMu.Unlock()
				last = n
			}
		}
	}()
	killed := time.Now()
	c.kill("osd.3")
	var outAt time.Time
	var opsOut int64
	maxBytes := map[string]float64{}
	for {
		out, err := c.cli(nil, "status", "--json")
		if err != nil {
			b.Fatal(err)
		}
		var st struct {
			Health string `json:"health"`
			OSDsIn int    `json:"osds_in"`
			Work   []struct {
				OSD       string  `json:"osd"`
				Kind      string  `json:"kind"`
				BytesDone float64 `json:"bytes_done"`
			} `json:"work"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			b.Fatal(err)
		}
		if outAt.IsZero() && st.OSDsIn == 5 {
			outAt, opsOut = time.Now(), ops.Load()
		}
		for _, w := range st.Work {
			if w.Kind == "recovery" {
				maxBytes[w.OSD] = max(maxBytes[w.OSD], w.BytesDone)
			}
		}
		if !outAt.IsZero() && st.Health == "HEALTH_OK" {
			break
		}
		if time.Since(killed) > 10*time.Minute {
			b.Fatalf("not HEALTH_OK 10 minutes after the kill: %s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	healthy := time.Now()
	close(tlDone)
	tlMu.Lock()
	b.Logf("client 4 KiB write IOPS per second from the kill (out at %.0f s, HEALTH_OK at %.0f s): %v",
		outAt.Sub(killed).Seconds(), healthy.Sub(killed).Seconds(), timeline)
	tlMu.Unlock()
	during := float64(ops.Load()-opsOut) / healthy.Sub(outAt).Seconds()
	var moved float64
	for _, v := range maxBytes {
		moved += v
	}
	backfill := healthy.Sub(outAt).Seconds()
	b.ReportMetric(healthy.Sub(killed).Seconds(), "s-kill-to-HEALTH_OK")
	b.ReportMetric(backfill, "s-backfill")
	b.ReportMetric(moved/1e6/backfill, "backfill-MB/s")
	b.ReportMetric(before, "iops-before")
	b.ReportMetric(during, "iops-during-backfill")
	b.ReportMetric(during/before, "iops-ratio")
	b.Logf("kill→out %.1f s (lease %s + down-out %s), backfill %.1f s moving %.0f MB; 4 KiB write IOPS %.0f before, %.0f during (%.0f%%)",
		outAt.Sub(killed).Seconds(), lease, downOut, backfill, moved/1e6, before, during, 100*during/before)
}
