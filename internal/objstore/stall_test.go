package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// syncStall is an errorfs.Injector (the seam of iofaults_test.go) that blocks the syncs of every file under
// dir while armed, as a device that stopped answering does: no error, no
// progress.
type syncStall struct {
	dir     string
	mu      sync.Mutex
	release chan struct{} // nil: not armed; closed to let the syncs go on
	blocked atomic.Int32  // syncs that have waited
}

func (f *syncStall) arm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.release = make(chan struct{})
}

func (f *syncStall) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.release != nil {
		close(f.release)
		f.release = nil
	}
}

func (f *syncStall) MaybeError(op errorfs.Op) error {
	if opName(op.Kind) != "sync" || !strings.HasPrefix(op.Path, f.dir) {
		return nil
	}
	f.mu.Lock()
	ch := f.release
	f.mu.Unlock()
	if ch != nil {
		f.blocked.Add(1)
		<-ch
	}
	return nil
}

func (f *syncStall) String() string { return "stalled " + f.dir }

// TestStalledMetaDeviceFailsStore: the meta device stops answering (its
// syncs block) under concurrent writers. Within the stall timeout the store
// fails, saying which directory and what to do; every writer waiting on the
// log gets the error at once, except the one blocked in the sync itself,
// whose write is not acknowledged when the device answers late; Close does
// not wait for the device; and every write acknowledged before is in what
// the device holds (a crash clone that keeps only synced data), opened
// again with a working device.
func TestStalledMetaDeviceFailsStore(t *testing.T) {
	const timeout = 300 * time.Millisecond
	base := vfs.NewCrashableMem()
	stall := &syncStall{dir: "/nvme"}
	s, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: errorfs.Wrap(base, stall), ReserveBytes: -1, StallTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	obj := func(g, j int) []byte { return pattern(g*100_000+j, 3000+j%5*4096) }
	var acked [writers]atomic.Int64 // last acknowledged write of each writer
	errs := make([]error, writers)
	var ended [writers]atomic.Int64 // unix nanos each writer got its error
	var wg sync.WaitGroup
	for g := range writers {
		acked[g].Store(-1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				var tx Txn
				tx.Put("1.0", fmt.Sprintf("w%d-%d", g, j), obj(g, j))
				if err := s.Apply(&tx); err != nil {
					errs[g] = err
					ended[g].Store(time.Now().UnixNano())
					return
				}
				acked[g].Store(int64(j))
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	armed := time.Now()
	stall.arm()
	defer stall.disarm()

	select {
	case <-s.Failed():
	case <-time.After(timeout + 5*time.Second):
		t.Fatalf("the store has not failed %v after its meta device stopped answering (%d syncs blocked; stall timeout %v)",
			time.Since(armed), stall.blocked.Load(), timeout)
	}
	// (An index flush that began before the stall may fail it sooner than
	// its timeout.)
	t.Logf("failed %v after the stall began: %v", time.Since(armed), s.Err())
	for _, want := range []string{"/nvme/meta", "has not completed for", "check or replace the device", "other copies"} {
		if !strings.Contains(s.Err().Error(), want) {
			t.Errorf("the failure does not say %q: %v", want, s.Err())
		}
	}
	if !errors.Is(s.Err(), errStalled) {
		t.Errorf("the failure is not errStalled: %v", s.Err())
	}

	// Every writer but the one blocked in the sync returns the error now.
	deadline := time.Now().Add(2 * time.Second)
	waiting := writers
	for ; waiting > 1 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		waiting = 0
		for g := range writers {
			if ended[g].Load() == 0 {
				waiting++
			}
		}
	}
	if waiting > 1 {
		t.Fatalf("%d writers still wait 2 s after the store failed: only the one in the blocked sync may", waiting)
	}
	var tx Txn
	tx.Put("1.0", "after", []byte("x"))
	if err := s.Apply(&tx); err == nil || !strings.Contains(err.Error(), "stopped answering") {
		t.Fatalf("a write after the stall: %v", err)
	}

	// What the device holds: only synced data. Every acknowledged write is
	// there.
	snap := make([]int, writers)
	for g := range snap {
		snap[g] = int(acked[g].Load())
	}
	clone := base.CrashClone(vfs.CrashCloneCfg{})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err == nil || !errors.Is(err, errStalled) {
			t.Errorf("Close of a stalled store: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close of a stalled store waits for the device")
	}
	s2, err := Open(Options{Dir: "/osd", MetaDir: "/nvme/meta", FS: clone, ReserveBytes: -1})
	if err != nil {
		t.Fatalf("open what the stalled device holds: %v", err)
	}
	defer s2.Close()
	total := 0
	for g := range writers {
		for j := 0; j <= snap[g]; j++ {
			name := fmt.Sprintf("w%d-%d", g, j)
			if got, err := s2.Read("1.0", name, 0, 0); err != nil || !bytes.Equal(got, obj(g, j)) {
				t.Fatalf("acknowledged write %s lost after the stall (%v)", name, err)
			}
			total++
		}
	}
	if total < writers {
		t.Fatalf("only %d writes acknowledged before the stall: the test did not exercise the store", total)
	}

	// The device answers late: the write that waited on it is not
	// acknowledged, and nothing was after the failure.
	var held [writers]int64
	for g := range held {
		held[g] = acked[g].Load()
	}
	stall.disarm()
	wg.Wait()
	for g, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "stopped answering") {
			t.Errorf("writer %d ended with %v, want the stall", g, err)
		}
	}
	for g := range held {
		if n := acked[g].Load(); n != held[g] {
			t.Errorf("writer %d had write %d acknowledged when the stalled device answered, after the store failed", g, n)
		}
	}
	t.Logf("%d writes acknowledged before the stall, all found; %d syncs blocked", total, stall.blocked.Load())
}
