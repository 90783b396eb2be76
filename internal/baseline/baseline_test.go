package baseline

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

const (
	testSize     = 16 << 20
	testDuration = 150 * time.Millisecond
)

// runSmall runs the whole baseline with small sizes, once per test binary run
// per variant, and checks that the temporary files are gone afterwards. With
// copies it also measures replicated writes, through copies of this test
// binary (TestMain).
func runSmall(t *testing.T, dir string, force, copies bool) *Result {
	t.Helper()
	var steps []string
	o := Options{
		Dir:           dir,
		FileSize:      testSize,
		Duration:      testDuration,
		Progress:      func(s string) { steps = append(steps, s) },
		forceBuffered: force,
	}
	want := 13 // prepare, 7 disk, 4 net (TCP and local socket), 1 cpu
	if copies {
		o.CopyCommand = copyHelper(t)
		want += 2 // replicated, erasure-coded
	}
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(steps) != want {
		t.Errorf("Progress called %d times, want %d: %q", len(steps), want, steps)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".cairn-baseline-*"))
	if len(left) != 0 {
		t.Errorf("test file left behind: %v", left)
	}
	return r
}

func checkMeasures(t *testing.T, r *Result) {
	t.Helper()
	dur := r.Duration.Seconds()
	for _, x := range r.rows() {
		m := x.m
		if strings.HasPrefix(x.name, "write_") && m.Ops == 0 {
			continue // not measured
		}
		if m.IOPS <= 0 || m.MBps <= 0 || m.P50us <= 0 || m.P99us <= 0 || m.AvgUs <= 0 || m.Ops <= 0 || m.Seconds <= 0 {
			t.Errorf("%s: not every figure positive: %+v", x.name, m)
			continue
		}
		if m.P50us > m.P99us {
			t.Errorf("%s: p50 %.1f µs > p99 %.1f µs", x.name, m.P50us, m.P99us)
		}
		// The rates are computed over the measurement's wall time.
		if got := m.IOPS * m.Seconds; math.Abs(got-float64(m.Ops)) > 0.01*float64(m.Ops)+1 {
			t.Errorf("%s: IOPS %.1f × %.3f s = %.1f, want ops %d", x.name, m.IOPS, m.Seconds, got, m.Ops)
		}
		// A measurement runs for about Duration: a sequential write pass may
		// end sooner (end of file), the final sync or a slow last op later.
		if m.Seconds > 10*dur {
			t.Errorf("%s: ran %.3f s, Duration %v", x.name, m.Seconds, r.Duration)
		}
		if x.name != "seq_write_1m" && !strings.HasPrefix(x.name, "stream") && m.Seconds < 0.9*dur {
			t.Errorf("%s: ran only %.3f s, Duration %v", x.name, m.Seconds, r.Duration)
		}
		// With one op in flight, ops × average latency cannot exceed the time.
		one := !strings.HasSuffix(x.name, "_qd32") && !strings.HasSuffix(x.name, "_qd3") && !strings.HasPrefix(x.name, "write_4m")
		if one && float64(m.Ops)*m.AvgUs/1e6 > m.Seconds*1.01 {
			t.Errorf("%s: %d ops × %.1f µs > %.3f s", x.name, m.Ops, m.AvgUs, m.Seconds)
		}
	}
	d := r.Disk
	if want := 4096 * d.SyncWrite4KQD1.IOPS / 1e6; math.Abs(d.SyncWrite4KQD1.MBps-want) > 1e-9*want+1e-12 {
		t.Errorf("sync_write_4k_qd1: MB/s %v, want 4 KiB × IOPS = %v", d.SyncWrite4KQD1.MBps, want)
	}
	if d.SeqWrite1M.Ops > r.FileSize>>20 {
		t.Errorf("seq_write_1m: %d ops over a %d MiB file: more than one pass", d.SeqWrite1M.Ops, r.FileSize>>20)
	}
	// The bounds take the round trip of the local socket, the path
	// between daemons of one host.
	rtt := r.Net.RTT4KLocal.P50us
	if want := 2*rtt + d.SyncWrite4KQD1.P50us; r.Bound.ReplicatedWriteUs != want {
		t.Errorf("replicated write bound %v, want 2 × %v + %v", r.Bound.ReplicatedWriteUs, rtt, d.SyncWrite4KQD1.P50us)
	}
	if want := 2*rtt + d.SyncWrite4KQD3.P50us; r.Bound.SharedDiskWriteUs != want {
		t.Errorf("shared-disk write bound %v, want 2 × %v + %v", r.Bound.SharedDiskWriteUs, rtt, d.SyncWrite4KQD3.P50us)
	}
	if want := rtt + d.RandRead4KQD1.P50us; r.Bound.ReadUs != want {
		t.Errorf("read bound %v, want %v + %v", r.Bound.ReadUs, rtt, d.RandRead4KQD1.P50us)
	}
	if r.Bound.Note == "" {
		t.Error("bound note empty")
	}
	if r.Bound.MeasuredWriteUs != r.Replicated.Write4KQD1.P50us {
		t.Errorf("measured write bound %v, want write_4k_qd1's p50 %v", r.Bound.MeasuredWriteUs, r.Replicated.Write4KQD1.P50us)
	}
	if r.Bound.WriteCPUPerGiB != r.Replicated.Write4M.CPUPerGiB {
		t.Errorf("write CPU floor %v, want write_4m's %v", r.Bound.WriteCPUPerGiB, r.Replicated.Write4M.CPUPerGiB)
	}
	// One goroutine hashes, so the process's CPU over the measurement is
	// at most about its wall time: much more means it was counted wrongly.
	h := r.CPU.S3PutHashes
	wallPerGiB := h.Seconds / (float64(h.Ops) * S3HashBody / (1 << 30))
	if h.CPUPerGiB <= 0 || h.CPUPerGiB > 1.5*wallPerGiB {
		t.Errorf("s3_put_hashes: %.3f CPU s/GiB against %.3f s/GiB of wall time on one goroutine", h.CPUPerGiB, wallPerGiB)
	}
	if r.Bound.ECWriteCPUPerGiB != r.Erasure.Write4M.CPUPerGiB {
		t.Errorf("erasure-coded write CPU floor %v, want write_4m_ec's %v", r.Bound.ECWriteCPUPerGiB, r.Erasure.Write4M.CPUPerGiB)
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	before := runtime.NumGoroutine()
	r := runSmall(t, dir, false, true)
	// Every goroutine Run started (workers, echo server) has ended.
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 100 {
			t.Errorf("%d goroutines after Run, %d before", runtime.NumGoroutine(), before)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkMeasures(t, r)
	if r.Dir != dir || r.FileSize != testSize || r.Duration != testDuration || r.Version != formatV {
		t.Errorf("header: dir %q size %d duration %v version %d", r.Dir, r.FileSize, r.Duration, r.Version)
	}
	for _, m := range []Measure{r.Net.StreamMBps, r.Net.StreamLocal} {
		if m.CPUPerGiB <= 0 || !strings.Contains(m.Note, "CPU s per GiB") {
			t.Errorf("stream: CPU per GiB %v, note %q: what a hop costs is not measured", m.CPUPerGiB, m.Note)
		}
	}
	if !strings.Contains(r.Disk.SyncWrite4KQD32.Note, "own 1/32") {
		t.Errorf("sync_write_4k_qd32 note does not say how the file is shared: %q", r.Disk.SyncWrite4KQD32.Note)
	}

	// Save / Load round trip.
	path := filepath.Join(t.TempDir(), "baseline.json")
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(r.Time) {
		t.Errorf("time %v after round trip, want %v", got.Time, r.Time)
	}
	got.Time = r.Time // drop the monotonic reading / location difference
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, r)
	}
	raw, _ := os.ReadFile(path)
	for _, key := range []string{`"sync_write_4k_qd1"`, `"p50_us"`, `"mb_s"`, `"iops"`, `"replicated_write_us"`, `"read_us"`, `"rtt_4k"`, `"stream"`, `"rtt_4k_local"`, `"stream_local"`, `"write_4k_qd1"`, `"write_4m"`, `"cpu_s_per_gib"`, `"replicated_write_measured_us"`, `"replicated_write_cpu_s_per_gib"`, `"erasure"`, `"ec_write_cpu_s_per_gib"`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("saved JSON lacks %s", key)
		}
	}

	// WriteText names every measurement and both bounds.
	var buf bytes.Buffer
	r.WriteText(&buf)
	text := buf.String()
	for _, x := range r.rows() {
		if !strings.Contains(text, x.name) {
			t.Errorf("WriteText lacks %s", x.name)
		}
	}
	for _, s := range []string{"replicated write", "read ", "p50 µs", "p99 µs", "IOPS", "MB/s", "same, measured", "CPU floor", " s/GiB", "2+1 erasure code"} {
		if !strings.Contains(text, s) {
			t.Errorf("WriteText lacks %q", s)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("\n%s", text)
	}
}

// TestBufferedFallback takes the path used where O_DIRECT is refused.
func TestBufferedFallback(t *testing.T) {
	r := runSmall(t, t.TempDir(), true, false)
	checkMeasures(t, r)
	for _, m := range []Measure{r.Disk.RandRead4KQD1, r.Disk.RandRead4KQD32, r.Disk.SeqRead1M} {
		if !strings.Contains(m.Note, "O_DIRECT") || !strings.Contains(m.Note, "buffered") {
			t.Errorf("read note does not say O_DIRECT was not used: %q", m.Note)
		}
	}
	if !strings.Contains(r.Bound.Note, "O_DIRECT") {
		t.Errorf("bound note does not mention the buffered reads: %q", r.Bound.Note)
	}
}

// TestTmpfs: a directory on tmpfs works (with or without O_DIRECT, as the
// kernel allows) and every disk figure says it is memory.
func TestTmpfs(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "cairn-baseline-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := runSmall(t, dir, false, false)
	checkMeasures(t, r)
	for i, m := range r.diskMeasures() {
		if !strings.Contains(m.Note, "tmpfs") {
			t.Errorf("disk measure %d: note does not say tmpfs: %q", i, m.Note)
		}
	}
	if !strings.Contains(r.Bound.Note, "tmpfs") {
		t.Errorf("bound note does not say tmpfs: %q", r.Bound.Note)
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "nope")
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"missing", Options{Dir: missing}, "baseline: " + missing + ": no such directory"},
		{"not a dir", Options{Dir: file}, "baseline: " + file + " is not a directory"},
		{"no space", Options{Dir: tmp, FileSize: 1 << 60}, "baseline: not enough free space in " + tmp + ": need 1099511627776 MiB, "},
		{"tiny", Options{Dir: tmp, FileSize: 4096}, "at least 1 MiB"},
		{"no dir", Options{}, "no directory"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(tmp, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name string
			o    Options
			want string
		}{"read-only", Options{Dir: ro}, "baseline: " + ro + " is not writable: permission denied"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Run(ctx, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error containing %q", err, c.want)
			}
			if r != nil {
				t.Errorf("result %+v with a setup error", r)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, ".cairn-baseline-*")); len(left) != 0 {
		t.Errorf("test file left behind: %v", left)
	}

	if _, err := Load(missing); err == nil {
		t.Error("Load of a missing file: no error")
	}
	bad := filepath.Join(tmp, "bad.json")
	os.WriteFile(bad, []byte(`{"version": 99}`), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Load of a future version: %v", err)
	}
}

// TestCancel: a context that ends mid-run stops it promptly, cleans up, and
// returns the partial result with an error.
func TestCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var steps int
	start := time.Now()
	r, err := Run(ctx, Options{
		Dir:      dir,
		FileSize: 4 << 20,
		Duration: time.Minute,
		Progress: func(string) {
			steps++
			if steps == 2 { // during sync_write_4k_qd1
				time.AfterFunc(50*time.Millisecond, cancel)
			}
		},
	})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("Run after cancel: %v, want interrupted", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
	if r == nil || r.Disk.SyncWrite4KQD1.Ops == 0 {
		t.Errorf("partial result missing: %+v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".cairn-baseline-*")); len(left) != 0 {
		t.Errorf("test file left behind: %v", left)
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i))
	}
	if p := percentile(s, 0.5); p != 50 {
		t.Errorf("p50 of 1..100 = %v", p)
	}
	if p := percentile(s, 0.99); p != 99 {
		t.Errorf("p99 of 1..100 = %v", p)
	}
	if p := percentile(s[:1], 0.99); p != 1 {
		t.Errorf("p99 of one = %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of none = %v", p)
	}
	// The reservoir keeps at most limit samples but counts every op.
	w := &worker{rng: newTestRand(), limit: 10}
	for i := range 1000 {
		w.record(time.Duration(i))
	}
	if len(w.samples) != 10 || w.ops != 1000 {
		t.Errorf("reservoir: %d samples, %d ops", len(w.samples), w.ops)
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// TestFull runs the baseline with the defaults (256 MiB, 3 s per measurement)
// in $CAIRN_BASELINE_DIR and prints the table; skipped when unset.
//
//	CAIRN_BASELINE_DIR=/var/tmp go test -run TestFull -v ./internal/baseline
func TestFull(t *testing.T) {
	dir := os.Getenv("CAIRN_BASELINE_DIR")
	if dir == "" {
		t.Skip("CAIRN_BASELINE_DIR not set")
	}
	r, err := Run(context.Background(), Options{Dir: dir, Progress: func(s string) { t.Log(s) }})
	if err != nil {
		t.Fatal(err)
	}
	checkMeasures(t, r)
	var buf bytes.Buffer
	r.WriteText(&buf)
	t.Logf("\n%s", buf.String())
}

// A baseline saved before local sockets were measured keeps its bounds on
// the TCP round trip it has.
func TestBoundRTTOfOlderFiles(t *testing.T) {
	var r Result
	r.Net.RTT4K.P50us, r.Disk.SyncWrite4KQD1.P50us = 30, 100
	r.computeBound()
	if name, rtt := r.BoundRTT(); name != "rtt_4k" || rtt != 30 || r.Bound.ReplicatedWriteUs != 160 {
		t.Errorf("without rtt_4k_local: %s %v, bound %v", name, rtt, r.Bound.ReplicatedWriteUs)
	}
	r.Net.RTT4KLocal.P50us = 12
	r.computeBound()
	if name, _ := r.BoundRTT(); name != "rtt_4k_local" || r.Bound.ReplicatedWriteUs != 124 {
		t.Errorf("with rtt_4k_local: %s, bound %v", name, r.Bound.ReplicatedWriteUs)
	}
}
