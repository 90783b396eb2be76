package baseline

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// row is one measurement as WriteText shows it.
type row struct {
	name string // the JSON key
	what string
	m    Measure
}

func (r *Result) rows() []row {
	qd := strconv.Itoa(QueueDepth)
	return []row{
		{"sync_write_4k_qd1", "disk: 4 KiB pwrite + fdatasync, 1 in flight", r.Disk.SyncWrite4KQD1},
		{"sync_write_4k_qd3", "disk: 4 KiB pwrite + fdatasync, " + strconv.Itoa(SharedCopies) + " in flight", r.Disk.SyncWrite4KQD3},
		{"sync_write_4k_qd32", "disk: 4 KiB pwrite + fdatasync, " + qd + " in flight", r.Disk.SyncWrite4KQD32},
		{"rand_read_4k_qd1", "disk: 4 KiB random read, 1 in flight", r.Disk.RandRead4KQD1},
		{"rand_read_4k_qd32", "disk: 4 KiB random read, " + qd + " in flight", r.Disk.RandRead4KQD32},
		{"seq_write_1m", "disk: 1 MiB sequential writes + fdatasync", r.Disk.SeqWrite1M},
		{"seq_read_1m", "disk: 1 MiB sequential reads", r.Disk.SeqRead1M},
		{"rtt_4k", "net: loopback TCP, 4 KiB request, 16 B reply", r.Net.RTT4K},
		{"stream", "net: loopback TCP stream, 1 MiB writes", r.Net.StreamMBps},
		{"rtt_4k_local", "net: local socket, 4 KiB request, 16 B reply", r.Net.RTT4KLocal},
		{"stream_local", "net: local socket stream, 1 MiB writes", r.Net.StreamLocal},
		{"write_4k_qd1", fmt.Sprintf("replicated: 4 KiB writes to %d copies, 1 in flight", SharedCopies), r.Replicated.Write4KQD1},
		{"write_4m", fmt.Sprintf("replicated: %d MiB writes to %d copies, %d in flight",
			ReplicatedWriteSize>>20, SharedCopies, ReplicatedInFlight), r.Replicated.Write4M},
		{"write_4m_ec", fmt.Sprintf("erasure-coded: %d MiB writes, %s, %d in flight",
			ReplicatedWriteSize>>20, ECProfile(), ReplicatedInFlight), r.Erasure.Write4M},
		{"s3_put_hashes", fmt.Sprintf("cpu: MD5 + SHA-256 of %d MiB S3 PUT bodies, 1 core", S3HashBody>>20), r.CPU.S3PutHashes},
	}
}

// WriteText writes r as a table for a person: every measurement with its
// figures, the notes, and the two bounds with what each stands for.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "Hardware baseline for %s (test file %s, %v per measurement, %s)\n\n",
		r.Dir, mib(r.FileSize), r.Duration, r.Time.Format("2006-01-02 15:04:05 MST"))
	rows := r.rows()
	nw, ww := len("measurement"), len("what")
	for _, x := range rows {
		nw, ww = max(nw, len(x.name)), max(ww, len(x.what))
	}
	line := func(name, what string, f ...string) {
		fmt.Fprintf(w, "%-*s  %-*s", nw, name, ww, what)
		for _, s := range f {
			fmt.Fprintf(w, "  %9s", s)
		}
		fmt.Fprintln(w)
	}
	line("measurement", "what", "IOPS", "MB/s", "p50 µs", "p99 µs", "avg µs", "ops")
	for _, x := range rows {
		line(x.name, x.what, num(x.m.IOPS, 0), num(x.m.MBps, 1), num(x.m.P50us, 1),
			num(x.m.P99us, 1), num(x.m.AvgUs, 1), num(float64(x.m.Ops), 0))
	}

	notes := false
	for _, x := range rows {
		if x.m.Note == "" {
			continue
		}
		if !notes {
			fmt.Fprintln(w, "\nnotes:")
			notes = true
		}
		fmt.Fprintf(w, "  %s: %s\n", x.name, x.m.Note)
	}

	rtt, _ := r.BoundRTT()
	fmt.Fprintln(w, "\nbounds (the least latency one operation can have here):")
	fmt.Fprintf(w, "  replicated write  %9s µs  = 2 × %s p50 + sync_write_4k_qd1 p50%s\n",
		num(r.Bound.ReplicatedWriteUs, 1), rtt, perSecond(r.Bound.ReplicatedWriteUs))
	fmt.Fprintln(w, "      client→primary, then primary→replicas in parallel, plus one synced commit on every OSD, also in parallel")
	if r.Bound.SharedDiskWriteUs > 0 {
		fmt.Fprintf(w, "  same, one disk    %9s µs  = 2 × %s p50 + sync_write_4k_qd3 p50%s\n",
			num(r.Bound.SharedDiskWriteUs, 1), rtt, perSecond(r.Bound.SharedDiskWriteUs))
		fmt.Fprintf(w, "      when the OSDs of all %d copies share this disk (cairn dev): their commits overlap on it\n", SharedCopies)
	}
	if r.Bound.MeasuredWriteUs > 0 {
		fmt.Fprintf(w, "  same, measured    %9s µs  = write_4k_qd1 p50%s\n",
			num(r.Bound.MeasuredWriteUs, 1), perSecond(r.Bound.MeasuredWriteUs))
		fmt.Fprintf(w, "      that work done by %d processes on this machine, each woken by the one before, their syncs on this disk\n", SharedCopies)
	}
	fmt.Fprintf(w, "  read              %9s µs  = 1 × %s p50 + rand_read_4k_qd1 p50%s\n",
		num(r.Bound.ReadUs, 1), rtt, perSecond(r.Bound.ReadUs))
	fmt.Fprintln(w, "      one round trip to the primary, plus one 4 KiB read from its disk")
	if r.Bound.Note != "" {
		fmt.Fprintf(w, "  note: %s\n", r.Bound.Note)
	}
	if c := r.Bound.WriteCPUPerGiB; c > 0 {
		fmt.Fprintln(w, "\nCPU floor (the least CPU a cluster can spend here per GiB written):")
		fmt.Fprintf(w, "  replicated write  %9s s/GiB  = the copies' CPU in write_4m\n", num(c, 2))
		fmt.Fprintf(w, "      %d processes on local sockets: the primary checks the client's crc32c, sends the bytes to the\n", SharedCopies)
		fmt.Fprintln(w, "      others and writes and syncs its own; they check, write and sync theirs; no index, no metadata")
	}
	if c := r.Bound.ECWriteCPUPerGiB; c > 0 {
		if r.Bound.WriteCPUPerGiB <= 0 {
			fmt.Fprintln(w, "\nCPU floor (the least CPU a cluster can spend here per GiB written):")
		}
		fmt.Fprintf(w, "  %s erasure code  %9s s/GiB  = the positions' CPU in write_4m_ec\n", ECProfile(), num(c, 2))
		fmt.Fprintf(w, "      %d processes: the primary checks the client's crc32c, codes %d data and %d parity shards (Reed-Solomon),\n",
			ECDataShards+ECParityShards, ECDataShards, ECParityShards)
		fmt.Fprintln(w, "      sends each other position its shard and writes and syncs its own; they check, write and sync theirs")
	}
	if m := r.CPU.S3PutHashes; m.CPUPerGiB > 0 {
		fmt.Fprintln(w, "\nS3 (what the protocol asks of every server):")
		fmt.Fprintf(w, "  PUT hashes        %9s s/GiB  = s3_put_hashes: MD5 for the ETag, SHA-256 of the signed payload\n", num(m.CPUPerGiB, 2))
		fmt.Fprintf(w, "      before a byte is stored; one core of a gateway takes in at most %s MB/s of signed PUTs\n", num(m.MBps, 0))
	}
}

func perSecond(us float64) string {
	if us <= 0 {
		return ""
	}
	return fmt.Sprintf("  (at most %.0f/s with 1 in flight)", 1e6/us)
}

func num(v float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// Save writes r to path as indented JSON (through a temporary file and a
// rename, so a reader never sees half a file).
func (r *Result) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("baseline: save: %w", err)
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("baseline: save %s: %w", path, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("baseline: save %s: %w", path, err)
	}
	return nil
}

// Load reads a Result written by Save.
func Load(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("baseline: load: %w", err)
	}
	r := new(Result)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("baseline: load %s: %w", path, err)
	}
	if r.Version < 1 || r.Version > formatV {
		return nil, fmt.Errorf("baseline: load %s: unknown format version %d (this cairn reads %d)", path, r.Version, formatV)
	}
	return r, nil
}
