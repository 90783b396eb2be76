package objstore

import (
	"fmt"
	"math/rand"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func openDisk(b *testing.B) *Store {
	b.Helper()
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkApplyNew4K measures creating 4 KiB objects: one commit-log
// write each, shared between concurrent callers (batches/group).
func BenchmarkApplyNew4K(b *testing.B) {
	data := pattern(1, 4096)
	b.Run("serial", func(b *testing.B) {
		s := openDisk(b)
		b.SetBytes(4096)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			var tx Txn
			tx.Put("1.0", fmt.Sprint(i), data)
			if err := s.Apply(&tx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concurrent16", func(b *testing.B) {
		s := openDisk(b)
		var n atomic.Int64
		b.SetBytes(4096)
		b.SetParallelism(max(1, 16/runtimeProcs()))
		groups := s.log.groups.Load()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var tx Txn
				tx.Put("1.0", fmt.Sprint(n.Add(1)), data)
				if err := s.Apply(&tx); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/float64(s.log.groups.Load()-groups), "batches/group")
	})
}

// BenchmarkOverwrite4K measures random 4 KiB overwrites of a 32 MiB
// VM-disk-like object: deferred writes through the journal.
func BenchmarkOverwrite4K(b *testing.B) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("goroutines%d", par), func(b *testing.B) {
			s := openDisk(b)
			const size = 32 << 20
			for i := 0; i < par; i++ {
				var tx Txn
				tx.Put("1.0", fmt.Sprintf("vm%d", i), pattern(i, size/par))
				if err := s.Apply(&tx); err != nil {
					b.Fatal(err)
				}
			}
			data := pattern(2, 4096)
			var g atomic.Int64
			b.SetBytes(4096)
			b.SetParallelism(max(1, par/runtimeProcs()))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := int(g.Add(1)-1) % par
				r := rand.New(rand.NewSource(int64(id)))
				name := fmt.Sprintf("vm%d", id)
				for pb.Next() {
					var tx Txn
					tx.Write("1.0", name, uint64(r.Intn(size/par/4096))*4096, data)
					if err := s.Apply(&tx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPut4M measures writing whole 4 MiB objects (S3-style): data goes
// straight to a fresh file, never through the journal.
func BenchmarkPut4M(b *testing.B) {
	s := openDisk(b)
	data := pattern(3, 4<<20)
	b.SetBytes(4 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var tx Txn
		tx.Put("1.0", fmt.Sprint(i%64), data)
		if err := s.Apply(&tx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	s := openDisk(b)
	var tx Txn
	tx.Put("1.0", "small", pattern(1, 4096))
	tx.Put("1.0", "big", pattern(2, 16<<20))
	if err := s.Apply(&tx); err != nil {
		b.Fatal(err)
	}
	b.Run("4K-inline", func(b *testing.B) {
		b.SetBytes(4096)
		for i := 0; i < b.N; i++ {
			if _, err := s.Read("1.0", "small", 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("4K-from-file", func(b *testing.B) {
		b.SetBytes(4096)
		r := rand.New(rand.NewSource(1))
		for i := 0; i < b.N; i++ {
			if _, err := s.Read("1.0", "big", uint64(r.Intn(4096))*4096, 4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("4M", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for i := 0; i < b.N; i++ {
			if _, err := s.Read("1.0", "big", uint64(i%4)<<22, 4<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRandomRead4K reads 4 KiB objects at random from 16,384 of them
// (64 MiB, all in the default caches), as random object reads and small
// S3 GETs do: each read finds the object's record, which holds its data.
func BenchmarkRandomRead4K(b *testing.B) {
	s := openDisk(b)
	const objects = 16 << 10
	for i := 0; i < objects; i += 256 {
		var tx Txn
		for j := i; j < i+256; j++ {
			tx.Put("1.0", fmt.Sprint("obj-", j), pattern(j, 4096))
		}
		if err := s.Apply(&tx); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(4096)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewSource(rand.Int63()))
		for pb.Next() {
			if _, err := s.Read("1.0", fmt.Sprint("obj-", r.Intn(objects)), 0, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// runtimeProcs is GOMAXPROCS; RunParallel starts parallelism*GOMAXPROCS goroutines.
func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkReplicaTxn4K applies transactions shaped like an OSD's replicated
// 4 KiB object write: the object's data and version xattr plus a PG-log
// entry in the omap of the PG's metadata object, 8 at a time over 64
// placement groups. cpu-us/op is the process's CPU time (user and system)
// per transaction: on a shared machine it varies less than the time.
func BenchmarkReplicaTxn4K(b *testing.B) {
	benchReplicaTxn(b, func(i int64) string { return fmt.Sprint("obj-", i%4096) })
}

// BenchmarkCreateTxn4K is BenchmarkReplicaTxn4K with a new object every
// time, as rados-bench-style writes and S3 puts of new keys are: the
// lookup of a record that does not exist is the object filter's to answer.
func BenchmarkCreateTxn4K(b *testing.B) {
	benchReplicaTxn(b, func(i int64) string { return fmt.Sprint("new-", i) })
}

// BenchmarkReplicaOverwrite4K applies what a replica applies for a 4 KiB
// write into a VM volume: a random block of one of 64 existing 1 MiB
// objects (deferred through the journal) and the object's version, 16 at a
// time. Run it for tens of thousands of ops, so the
// commit log turns over its segments and the index flushes.
func BenchmarkReplicaOverwrite4K(b *testing.B) {
	s := openDisk(b)
	const objects, size = 64, 1 << 20
	coll := func(o int) string { return fmt.Sprintf("1.%x", o%16) }
	for o := range objects {
		var tx Txn
		tx.Put(coll(o), fmt.Sprint("rbd_data.", o), pattern(o, size))
		if err := s.Apply(&tx); err != nil {
			b.Fatal(err)
		}
	}
	data := pattern(3, 4096)
	runTxns(b, 16, func(r *rand.Rand, i int64) error {
		o := r.Intn(objects)
		c, name := coll(o), fmt.Sprint("rbd_data.", o)
		var tx Txn
		tx.Write(c, name, uint64(r.Intn(size/4096))*4096, data)
		setVersion(&tx, c, name, i)
		return s.Apply(&tx)
	})
}

// benchReplicaTxn applies what a replica applies for a 4 KiB object write:
// the data and the object's version, in 64 PGs.
func benchReplicaTxn(b *testing.B, object func(i int64) string) {
	s := openDisk(b)
	data := pattern(3, 4096)
	runTxns(b, 8, func(_ *rand.Rand, i int64) error {
		coll := fmt.Sprintf("1.%x", i%64)
		name := object(i)
		var tx Txn
		tx.Put(coll, name, data)
		setVersion(&tx, coll, name, i)
		return s.Apply(&tx)
	})
}

// runTxns runs op b.N times from par goroutines in all, as op number i
// (from 1) with a random source of its goroutine's, and reports the CPU
// time per op. Each op writes 4 KiB.
func runTxns(b *testing.B, par int, op func(r *rand.Rand, i int64) error) {
	var n, seeds atomic.Int64
	b.SetBytes(4096)
	b.SetParallelism(max(1, par/runtimeProcs()))
	defer reportCPU(b)()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewSource(seeds.Add(1)))
		for pb.Next() {
			if err := op(r, n.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// setVersion adds what an OSD adds to every client write: the object's
// version (write i).
func setVersion(tx *Txn, coll, name string, i int64) {
	tx.SetXattr(coll, name, "\x00v", key16(uint64(i)))
}

// key16 is a 16-byte value that changes with i, like an object's version.
func key16(i uint64) []byte {
	var v [16]byte
	for j := range 8 {
		v[8+j] = byte(i >> (56 - 8*j))
	}
	return v[:]
}

// reportCPU returns a function that reports the CPU time the process spent
// per op since reportCPU was called, as cpu-us/op.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-us/op")
	}
}

// BenchmarkDeleteSmall measures what a transaction's delete of a small
// object with one xattr and no omap costs before the commit (the lookup
// and the scans for its keys), as an EC shard write's delete of its last
// undo record does.
func BenchmarkDeleteSmall(b *testing.B) {
	s := openDisk(b)
	for i := range 64 {
		apply(b, s, func(x *Txn) {
			x.Put("1.0", fmt.Sprint(i), pattern(i, 4096))
			x.SetXattr("1.0", fmt.Sprint(i), "u", []byte("undo"))
		})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := &applyCtx{s: s, batch: s.db.NewBatch(), objs: map[string]*objState{}}
		st, err := a.state("1.0", fmt.Sprint(i%64))
		if err != nil {
			b.Fatal(err)
		}
		a.delete(st)
		a.batch.Close()
	}
}
