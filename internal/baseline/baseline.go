package baseline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for Options.
const (
	DefaultFileSize = 256 << 20
	DefaultDuration = 3 * time.Second

	// QueueDepth is the number of operations in flight in the *_qd32 measurements.
	QueueDepth = 32
	// SharedCopies is the number of synced writes in flight in
	// sync_write_4k_qd3: one per copy of a replicated write (a pool's
	// default size) when every OSD of a cluster is on this one disk, as in
	// `cairn dev`.
	SharedCopies = 3

	minFileSize = 1 << 20
	maxSamples  = 2_000_000 // latencies kept per measurement (reservoir beyond)
	blockSize   = 4096
	chunkSize   = 1 << 20
	formatV     = 1
)

// Options configure Run.
type Options struct {
	// Dir is where the disk tests write: a temporary file inside it, removed
	// afterwards. It must exist, be writable and have FileSize bytes free.
	Dir string
	// FileSize is the size of the test file, rounded down to a whole MiB;
	// DefaultFileSize when zero, at least 1 MiB.
	FileSize int64
	// Duration is how long each measurement runs; DefaultDuration when zero.
	Duration time.Duration
	// CopyCommand, if not empty, is the command line that starts one copy
	// of the replicated-write measurement (a process that runs ServeCopy
	// with --file FILE and a --peer ADDR for each other copy); without it
	// that measurement is left out.
	CopyCommand []string
	// Progress, if not nil, is called before each step, e.g.
	// "disk: sync 4 KiB writes, 1 in flight".
	Progress func(step string)

	// forceBuffered makes the read measurements take the buffered fallback
	// even where O_DIRECT works (tests).
	forceBuffered bool
}

// Measure is the outcome of one measurement.
type Measure struct {
	IOPS    float64 `json:"iops,omitempty"`
	MBps    float64 `json:"mb_s,omitempty"` // 10^6 bytes per second
	P50us   float64 `json:"p50_us,omitempty"`
	P99us   float64 `json:"p99_us,omitempty"`
	AvgUs   float64 `json:"avg_us,omitempty"`
	Ops     int64   `json:"ops,omitempty"`
	Seconds float64 `json:"seconds,omitempty"` // wall time the rates are computed over
	// CPUPerGiB is the CPU seconds the servers spent per GiB the client
	// moved (replicated and erasure-coded writes), or the loopback
	// stream's sender and receiver per GiB sent.
	CPUPerGiB float64 `json:"cpu_s_per_gib,omitempty"`
	Note      string  `json:"note,omitempty"`
}

// Result is what Run measured. Save and Load keep it as JSON.
type Result struct {
	Version  int           `json:"version"`
	Time     time.Time     `json:"time"`
	Dir      string        `json:"dir"`
	FileSize int64         `json:"file_size"`
	Duration time.Duration `json:"duration_ns"` // per measurement

	Disk struct {
		SyncWrite4KQD1  Measure `json:"sync_write_4k_qd1"`
		SyncWrite4KQD3  Measure `json:"sync_write_4k_qd3"`
		SyncWrite4KQD32 Measure `json:"sync_write_4k_qd32"`
		RandRead4KQD1   Measure `json:"rand_read_4k_qd1"`
		RandRead4KQD32  Measure `json:"rand_read_4k_qd32"`
		SeqWrite1M      Measure `json:"seq_write_1m"`
		SeqRead1M       Measure `json:"seq_read_1m"`
	} `json:"disk"`
	Net struct {
		RTT4K      Measure `json:"rtt_4k"`
		StreamMBps Measure `json:"stream"`
		// The same over a Unix socket, the path between the daemons
		// of one host (zero in files saved before it was measured).
		RTT4KLocal  Measure `json:"rtt_4k_local"`
		StreamLocal Measure `json:"stream_local"`
	} `json:"net"`
	Replicated struct {
		// Write4KQD1 is replicated 4 KiB writes one at a time, through
		// processes that do only what the write needs (replicated.go).
		Write4KQD1 Measure `json:"write_4k_qd1"`
		// Write4M is the CPU floor of replicated writes.
		Write4M Measure `json:"write_4m"`
	} `json:"replicated"`
	Erasure struct {
		// Write4M is the CPU floor of writes to a pool of erasure code
		// ECProfile (erasure.go).
		Write4M Measure `json:"write_4m"`
	} `json:"erasure"`
	CPU struct {
		// S3PutHashes is MD5 and SHA-256 over PUT bodies on one core
		// (hashes.go): what any S3 server spends per GiB before storing.
		S3PutHashes Measure `json:"s3_put_hashes"`
	} `json:"cpu"`
	Bound struct {
		// ReplicatedWriteUs: two round trips (BoundRTT) and one
		// synced write (Disk.SyncWrite4KQD1), medians.
		ReplicatedWriteUs float64 `json:"replicated_write_us"`
		// SharedDiskWriteUs: the same with the synced writes of
		// Disk.SyncWrite4KQD3, when all its copies' OSDs share this disk.
		SharedDiskWriteUs float64 `json:"replicated_write_shared_disk_us,omitempty"`
		// ReadUs: one round trip (BoundRTT) and one random read
		// (Disk.RandRead4KQD1), medians.
		ReadUs float64 `json:"read_us"`
		// MeasuredWriteUs is the median of Replicated.Write4KQD1: the
		// bound's work done by processes on this machine, their wake-ups
		// included.
		MeasuredWriteUs float64 `json:"replicated_write_measured_us,omitempty"`
		// WriteCPUPerGiB is Replicated.Write4M's CPU per GiB: the least
		// CPU a cluster of SharedCopies copies spends per GiB written here.
		WriteCPUPerGiB float64 `json:"replicated_write_cpu_s_per_gib,omitempty"`
		// ECWriteCPUPerGiB is Erasure.Write4M's CPU per GiB: the same for
		// a pool of erasure code ECProfile.
		ECWriteCPUPerGiB float64 `json:"ec_write_cpu_s_per_gib,omitempty"`
		Note             string  `json:"note"`
	} `json:"bound"`
}

// Run measures the disk under o.Dir, the TCP loopback and local sockets, then computes the
// bounds. If ctx ends during the run, Run stops the current measurement,
// cleans up and returns what it measured so far together with an error.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.FileSize == 0 {
		o.FileSize = DefaultFileSize
	}
	o.FileSize &^= chunkSize - 1
	if o.FileSize < minFileSize {
		return nil, fmt.Errorf("baseline: file size must be at least 1 MiB")
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.Duration < 0 {
		return nil, fmt.Errorf("baseline: negative duration %v", o.Duration)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Dir == "" {
		return nil, errors.New("baseline: no directory given")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("baseline: %s: %v", o.Dir, err)
	}
	f, memory, err := openTestFile(dir, o.FileSize)
	if err != nil {
		return nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()

	r := &Result{Version: formatV, Time: time.Now().UTC(), Dir: dir, FileSize: o.FileSize, Duration: o.Duration}
	err = runDisk(ctx, o, f, r)
	if memory != "" {
		for _, m := range r.diskMeasures() {
			m.Note = joinNote(m.Note, dir+" is on "+memory+": memory, not a disk")
		}
	}
	if err == nil {
		err = runNet(ctx, o, r)
	}
	if err == nil {
		err = runHashes(ctx, o, r)
	}
	if err == nil && len(o.CopyCommand) > 0 {
		runCopies(ctx, o, dir, memory, r)
	}
	r.computeBound()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return r, fmt.Errorf("baseline: interrupted: %w", ctx.Err())
		}
		return r, err
	}
	return r, nil
}

// runCopies measures writes through copy processes, replicated and
// erasure-coded. They are an add-on to the disk and network figures: if
// the copies cannot run here, it says so and keeps the rest.
func runCopies(ctx context.Context, o Options, dir, memory string, r *Result) {
	o.Progress(fmt.Sprintf("replicated: 4 KiB writes, 1 in flight, then %d MiB writes, %d in flight, to %d copies (processes) on local sockets",
		ReplicatedWriteSize>>20, ReplicatedInFlight, SharedCopies))
	if err := runReplicated(ctx, o, dir, r); err != nil && ctx.Err() == nil {
		r.Replicated.Write4KQD1, r.Replicated.Write4M = Measure{}, Measure{}
		r.Replicated.Write4M.Note = "not measured: " + err.Error()
		o.Progress("replicated: not measured: " + err.Error())
	}
	if ctx.Err() == nil {
		o.Progress(fmt.Sprintf("erasure-coded: %d MiB writes, %d in flight, coded %s over %d positions (processes) on local sockets",
			ReplicatedWriteSize>>20, ReplicatedInFlight, ECProfile(), ECDataShards+ECParityShards))
		if err := runErasure(ctx, o, dir, r); err != nil && ctx.Err() == nil {
			r.Erasure.Write4M = Measure{Note: "not measured: " + err.Error()}
			o.Progress("erasure-coded: not measured: " + err.Error())
		}
	}
	if memory != "" {
		for _, m := range []*Measure{&r.Replicated.Write4KQD1, &r.Replicated.Write4M, &r.Erasure.Write4M} {
			m.Note = joinNote(m.Note, dir+" is on "+memory+": memory, not a disk")
		}
	}
}

// openTestFile checks dir and creates the (empty) test file in it. memory
// names the filesystem if it keeps files in memory (tmpfs, ramfs).
func openTestFile(dir string, size int64) (f *os.File, memory string, err error) {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("baseline: %s: no such directory", dir)
	case err != nil:
		return nil, "", fmt.Errorf("baseline: %s: %v", dir, err)
	case !st.IsDir():
		return nil, "", fmt.Errorf("baseline: %s is not a directory", dir)
	}
	f, err = os.CreateTemp(dir, ".cairn-baseline-*.tmp")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "", fmt.Errorf("baseline: %s is not writable: %v", dir, err)
	}
	var sfs unix.Statfs_t
	if err = unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, "", fmt.Errorf("baseline: statfs %s: %v", dir, err)
	}
	if free := int64(sfs.Bavail) * int64(sfs.Bsize); free < size {
		f.Close()
		os.Remove(f.Name())
		return nil, "", fmt.Errorf("baseline: not enough free space in %s: need %s, %s free", dir, mib(size), mib(free))
	}
	switch uint32(sfs.Type) {
	case unix.TMPFS_MAGIC:
		memory = "tmpfs"
	case unix.RAMFS_MAGIC:
		memory = "ramfs"
	}
	return f, memory, nil
}

// BoundRTT is the round trip the bounds take: over a local socket, which
// the daemons of one host use, or loopback TCP in files saved before it
// was measured.
func (r *Result) BoundRTT() (string, float64) {
	if l := r.Net.RTT4KLocal.P50us; l > 0 {
		return "rtt_4k_local", l
	}
	return "rtt_4k", r.Net.RTT4K.P50us
}

func (r *Result) computeBound() {
	_, rtt := r.BoundRTT()
	w, rd := r.Disk.SyncWrite4KQD1.P50us, r.Disk.RandRead4KQD1.P50us
	if rtt > 0 && w > 0 {
		r.Bound.ReplicatedWriteUs = 2*rtt + w
	}
	if w3 := r.Disk.SyncWrite4KQD3.P50us; rtt > 0 && w3 > 0 {
		r.Bound.SharedDiskWriteUs = 2*rtt + w3
	}
	if rtt > 0 && rd > 0 {
		r.Bound.ReadUs = rtt + rd
	}
	r.Bound.MeasuredWriteUs = r.Replicated.Write4KQD1.P50us
	r.Bound.WriteCPUPerGiB = r.Replicated.Write4M.CPUPerGiB
	r.Bound.ECWriteCPUPerGiB = r.Erasure.Write4M.CPUPerGiB
	r.Bound.Note = "floors for one operation at a time: the round trip over a local socket stands in for the network, " +
		"so a real network between hosts only adds to them"
	if n := r.Disk.SyncWrite4KQD1.Note; n != "" {
		r.Bound.Note += "; sync writes: " + n
	}
	if n := r.Disk.RandRead4KQD1.Note; n != "" {
		r.Bound.Note += "; reads: " + n
	}
}

func (r *Result) diskMeasures() []*Measure {
	d := &r.Disk
	return []*Measure{&d.SyncWrite4KQD1, &d.SyncWrite4KQD3, &d.SyncWrite4KQD32, &d.RandRead4KQD1, &d.RandRead4KQD32, &d.SeqWrite1M, &d.SeqRead1M}
}

// mib formats a byte count for messages: "256 MiB", "12 MiB", "512 KiB".
func mib(n int64) string {
	switch {
	case n >= 1<<20 || n == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d B", n)
	}
}
