package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is one phase's outcome; its JSON is what bench/s3-vs-minio.sh
// collects.
type result struct {
	Label   string  `json:"label"`
	Op      string  `json:"op"`
	Size    int64   `json:"size"`
	Clients int     `json:"clients"`
	Ops     int64   `json:"ops"`     // successful requests
	Objects int64   `json:"objects"` // objects written, read or deleted
	Errors  int64   `json:"errors"`  // failed requests (not retried)
	Seconds float64 `json:"seconds"` // from the first request to the last answer
	// Capped says a put phase stopped at -max-objects before its duration.
	Capped      bool    `json:"capped"`
	ObjectsPerS float64 `json:"objects_per_s"`
	MiBPerS     float64 `json:"mib_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	// ServerCPU is the utime+stime the -pids spent during the phase,
	// ClientCPU this process's own (the load generator shares the CPUs).
	ServerCPU       float64 `json:"server_cpu_s"`
	FrontCPU        float64 `json:"front_cpu_s,omitempty"` // of ServerCPU, the -front-pids' share
	ClientCPU       float64 `json:"client_cpu_s"`
	CPUPerGiB       float64 `json:"server_cpu_s_per_gib"`
	CPUPer1000Ops   float64 `json:"server_cpu_s_per_1000_ops"`
	ServerCores     float64 `json:"server_cores"`
	ClientCPUPerGiB float64 `json:"client_cpu_s_per_gib"`
	FirstError      string  `json:"first_error,omitempty"`
}

// summarize turns the latencies of a phase's successful requests into its
// rates and percentiles.
func summarize(o options, lats []time.Duration, elapsed time.Duration) result {
	r := result{Label: o.label, Op: o.op, Size: o.size, Clients: o.clients, Ops: int64(len(lats))}
	r.Seconds = elapsed.Seconds()
	r.Objects = r.Ops
	if o.op == "delete" {
		r.Objects = o.objects
	}
	r.Capped = o.op == "put" && r.Ops >= o.maxObjects
	if r.Seconds > 0 {
		r.ObjectsPerS = float64(r.Objects) / r.Seconds
		if o.op != "delete" && o.op != "list" {
			r.MiBPerS = r.ObjectsPerS * float64(o.size) / (1 << 20)
		}
	}
	slices.Sort(lats)
	r.P50Ms = ms(percentile(lats, 50))
	r.P99Ms = ms(percentile(lats, 99))
	if len(lats) > 0 {
		r.MaxMs = ms(lats[len(lats)-1])
	}
	return r
}

// perCPU derives the CPU cost per GiB moved and per 1,000 objects.
func (r *result) perCPU() {
	if r.Seconds > 0 {
		r.ServerCores = r.ServerCPU / r.Seconds
	}
	if r.Objects > 0 {
		r.CPUPer1000Ops = r.ServerCPU / float64(r.Objects) * 1000
	}
	if gib := float64(r.Objects*r.Size) / (1 << 30); r.Op != "delete" && gib > 0 {
		r.CPUPerGiB = r.ServerCPU / gib
		r.ClientCPUPerGiB = r.ClientCPU / gib
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank percentile p (0 < p <= 100) of sorted:
// the smallest value that at least p% of the values do not exceed. It is
// always one of the measured values, never an interpolation.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

const tableHeader = "| target | op | size | objects | objects/s | MiB/s | p50 ms | p99 ms | errors | server CPU s | s/GiB | s/1000 ops | client CPU s |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|"

func (r result) row() string {
	return fmt.Sprintf("| %s | %s | %s | %d | %.1f | %.1f | %.2f | %.2f | %d | %.2f | %.3f | %.3f | %.2f |",
		r.Label, r.Op, sizeName(r.Size), r.Objects, r.ObjectsPerS, r.MiBPerS, r.P50Ms, r.P99Ms, r.Errors,
		r.ServerCPU, r.CPUPerGiB, r.CPUPer1000Ops, r.ClientCPU)
}

func sizeName(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// serverCPU sums utime+stime of the pids from /proc/PID/stat, in seconds.
// A pid that is gone is an error: its time would silently drop out.
func serverCPU(pids []int, clkTck int64) (float64, error) {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("server process %d: %w", pid, err)
		}
		t, err := statTicks(string(b))
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return float64(ticks) / float64(clkTck), nil
}

// statTicks reads utime and stime (fields 14 and 15) of a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so
// fields are counted from its last ')'.
func statTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name")
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields", len(f)+2)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q stime %q", f[11], f[12])
	}
	return u + s, nil
}

// selfCPU is this process's user+system CPU time so far, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
