package objstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/powercut"
)

// The power-cut test runs the store on the real write path (O_DIRECT data
// writes into preallocated extents, pwritev2 with RWF_DSYNC, hole punching,
// the commit log's O_DIRECT|O_DSYNC writes, fdatasync, directory syncs;
// syncfs never, as on any FUSE filesystem) on internal/powercut's filesystem, cuts the power at random
// moments and checks that the store reopened from what survived holds
// every acknowledged transaction exactly, and nothing else but perhaps the
// one in flight of each writer. The store runs in a child process that the
// cut kills, as an OSD would be; its writers apply concurrently (their
// commits share log writes), each to objects of its own, so their
// transactions commute and each has its own oracle.

const pcWriters = 3

var pcColls = []string{"1.0", "1.0\x00", "2.f"}

func pcNames(g int) []string {
	return []string{fmt.Sprint("a", g), fmt.Sprint("a\x00", g), fmt.Sprint("b", g), fmt.Sprint("rbd_data.", g)}
}

// pcTxn is transaction i of writer g of the workload of seed: the ops of
// model_test's oracle.
func pcTxn(seed int64, g, i int) ([]op, *Txn) {
	r := rand.New(rand.NewSource(seed*1_000_003 + int64(g)<<40 + int64(i)))
	var tx Txn
	var ops []op
	for n := 1 + r.Intn(4); n > 0; n-- {
		o := randOp(r, pcColls, pcNames(g))
		tx.add(o)
		ops = append(ops, o)
	}
	return ops, &tx
}

func TestPowerCutChild(t *testing.T) {
	dir := os.Getenv("OBJSTORE_POWERCUT_DIR")
	if dir == "" {
		t.Skip("run by TestPowerCut")
	}
	seed, _ := strconv.ParseInt(os.Getenv("OBJSTORE_POWERCUT_SEED"), 10, 64)
	var start [pcWriters]int
	for g, v := range strings.Split(os.Getenv("OBJSTORE_POWERCUT_START"), ",") {
		start[g], _ = strconv.Atoi(v)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		mu.Unlock()
	}
	s, err := Open(Options{Dir: dir, ReserveBytes: -1, DataCacheBytes: -1})
	if err != nil {
		say("open: %v", err)
		os.Exit(1)
	}
	for g := range pcWriters {
		go func() {
			for i := start[g]; ; i++ {
				_, tx := pcTxn(seed, g, i)
				say("try %d %d", g, i)
				if err := s.Apply(tx); err != nil {
					say("apply %d %d: %v", g, i, err)
					select {} // the power is cut: wait to be killed
				}
				say("ack %d %d", g, i)
			}
		}()
	}
	select {}
}

func TestPowerCut(t *testing.T) {
	cuts := 20
	if testing.Short() {
		cuts = 6
	}
	if n, err := strconv.Atoi(os.Getenv("CUTS")); err == nil {
		cuts = n
	}
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv("OBJSTORE_POWERCUT_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (rerun with OBJSTORE_POWERCUT_SEED=%d; the cut moments are timing, the harsh cuts' seeds follow from it)", seed, seed)
	r := rand.New(rand.NewSource(seed))
	f := powercut.ForTest(t, filepath.Join(t.TempDir(), "disk"), powercut.Options{})
	var m [pcWriters]oracle
	var done [pcWriters]int // each writer's transactions in the store
	for g := range m {
		m[g] = oracle{}
	}
	var acked, landed int
	for c := 0; c < cuts; c++ {
		dir := filepath.Join(f.Dir(), "osd")
		cmd := exec.Command(os.Args[0], "-test.run=^TestPowerCutChild$")
		cmd.Env = append(os.Environ(), "OBJSTORE_POWERCUT_DIR="+dir,
			fmt.Sprint("OBJSTORE_POWERCUT_SEED=", seed),
			fmt.Sprintf("OBJSTORE_POWERCUT_START=%d,%d,%d", done[0], done[1], done[2]))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lastAck, lastTry [pcWriters]int
		for g := range done {
			lastAck[g], lastTry[g] = done[g]-1, done[g]-1
		}
		var log []string
		readDone, started := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(readDone)
			sc := bufio.NewScanner(stdout)
			first := true
			for sc.Scan() {
				l := sc.Text()
				var g, i int
				switch {
				case strings.HasPrefix(l, "ack "):
					fmt.Sscanf(l, "ack %d %d", &g, &i)
					if first {
						close(started)
						first = false
					}
					lastAck[g] = i
				case strings.HasPrefix(l, "try "):
					fmt.Sscanf(l, "try %d %d", &g, &i)
					lastTry[g] = i
				case !strings.HasPrefix(l, "=== RUN"):
					log = append(log, l)
				}
			}
		}()
		// Cut at a random moment once the store has opened and
		// applies (opening it on FUSE takes a while).
		select {
		case <-started:
		case <-readDone:
		case <-time.After(30 * time.Second):
		}
		time.Sleep(time.Duration(r.Intn(500)) * time.Millisecond)
		harsh := c%2 == 1
		if harsh {
			if _, err := f.CutHarsh(r.Int63()); err != nil {
				t.Fatal(err)
			}
		} else if err := f.Cut(); err != nil {
			t.Fatal(err)
		}
		cmd.Process.Kill()
		<-readDone // every line came before the cut: no Apply succeeds after it
		cmd.Wait()
		if err := f.Remount(); err != nil {
			t.Fatal(err)
		}
		s, err := Open(Options{Dir: filepath.Join(f.Dir(), "osd"), ReserveBytes: -1, DataCacheBytes: -1})
		if err != nil {
			t.Fatalf("cut %d (harsh %v): the store does not open after the cut: %v", c, harsh, err)
		}
		for g := range pcWriters {
			for i := done[g]; i <= lastAck[g]; i++ {
				ops, _ := pcTxn(seed, g, i)
				for j := range ops {
					m[g].apply(&ops[j])
				}
			}
			acked += lastAck[g] + 1 - done[g]
			diff := diffStore(s, m[g], pcNames(g))
			done[g] = lastAck[g] + 1
			if diff != "" && lastTry[g] > lastAck[g] {
				// The transaction in flight may have landed, whole.
				m2 := m[g].clone()
				ops, _ := pcTxn(seed, g, lastTry[g])
				for j := range ops {
					m2.apply(&ops[j])
				}
				if diff2 := diffStore(s, m2, pcNames(g)); diff2 == "" {
					m[g], diff, done[g] = m2, "", lastTry[g]+1
					landed++
				} else {
					diff += "\n(nor is it the state after the transaction in flight: " + diff2 + ")"
				}
			}
			if diff != "" {
				s.Close()
				t.Fatalf("cut %d (harsh %v), writer %d, after %d acknowledged transactions (its last %d, in flight %d): %s\nchild: %s",
					c, harsh, g, acked, lastAck[g], lastTry[g], diff, strings.Join(log, "\n"))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cut %d (harsh %v): acknowledged up to %v, in flight %v", c, harsh, lastAck, lastTry)
	}
	st := f.Stats()
	t.Logf("%d power cuts: %d acknowledged transactions checked, 0 lost, 0 torn, 0 resurrected (%d unacknowledged ones landed); %+v",
		cuts, acked, landed, st)
	if st.DirectOpens == 0 || st.DirectWrites == 0 || st.Punches == 0 || st.ForcedWritebacks != 0 {
		t.Errorf("the store's real write path was not exercised: %+v", st)
	}
}

func (m oracle) clone() oracle {
	c := oracle{}
	for coll, objs := range m {
		c[coll] = map[string]*mobj{}
		for name, o := range objs {
			n := &mobj{data: append([]byte(nil), o.data...), xattrs: map[string]string{}, omap: map[string]string{}}
			for k, v := range o.xattrs {
				n.xattrs[k] = v
			}
			for k, v := range o.omap {
				n.omap[k] = v
			}
			c[coll][name] = n
		}
	}
	return c
}

// diffStore says how the store differs from the oracle, "" if it does not.
func diffStore(s *Store, m oracle, names []string) string {
	for _, c := range pcColls {
		for _, n := range names {
			ob := m.obj(c, n, false)
			got, err := s.Read(c, n, 0, 0)
			if ob == nil {
				if !errors.Is(err, ErrNotFound) {
					return fmt.Sprintf("%q/%q: deleted or never acknowledged, but reads %d bytes (%v): resurrected", c, n, len(got), err)
				}
				continue
			}
			if err != nil {
				return fmt.Sprintf("%q/%q: %v (lost)", c, n, err)
			}
			if !bytes.Equal(got, ob.data) {
				first := -1
				for i := range min(len(got), len(ob.data)) {
					if got[i] != ob.data[i] {
						first = i
						break
					}
				}
				return fmt.Sprintf("%q/%q: %d bytes, want %d; first difference at %d (torn or lost)", c, n, len(got), len(ob.data), first)
			}
			xa, err := s.Xattrs(c, n)
			if err != nil || len(xa) != len(ob.xattrs) {
				return fmt.Sprintf("%q/%q: xattrs %d, want %d (%v)", c, n, len(xa), len(ob.xattrs), err)
			}
			for k, v := range ob.xattrs {
				if string(xa[k]) != v {
					return fmt.Sprintf("%q/%q: xattr %q differs", c, n, k)
				}
			}
			kvs, _, err := s.OmapList(c, n, nil, nil, 0)
			if err != nil || len(kvs) != len(ob.omap) {
				return fmt.Sprintf("%q/%q: omap %d entries, want %d (%v)", c, n, len(kvs), len(ob.omap), err)
			}
			for _, kv := range kvs {
				if v, ok := ob.omap[string(kv.Key)]; !ok || v != string(kv.Value) {
					return fmt.Sprintf("%q/%q: omap entry %q differs", c, n, kv.Key)
				}
			}
		}
	}
	return ""
}

// A journal record names the physical offset it rewrites, and on a real
// filesystem slot B lies 4 TiB past slot A, beyond MaxObjectSize: such a
// record must decode, or a store that crashed with a small overwrite of a
// copied-on-write block pending does not open (the power-cut test found
// it: "journal record 19: bad journal record extent").
func TestJournalRecordInSlotB(t *testing.T) {
	for _, off := range []uint64{8192, slotBaseMem + 8192, slotBaseReal, slotBaseReal + MaxObjectSize - blockSize} {
		b := (&jrec{fileID: 3, off: off, data: make([]byte, blockSize)}).encode()
		if j, err := decodeJrec(b); err != nil || j.off != off {
			t.Errorf("journal record at %#x: %v", off, err)
		}
	}
	for _, off := range []uint64{MaxObjectSize + slotBaseMem, slotBaseReal + MaxObjectSize, slotBaseReal - blockSize} {
		b := (&jrec{fileID: 3, off: off, data: make([]byte, blockSize)}).encode()
		if _, err := decodeJrec(b); err == nil {
			t.Errorf("journal record at %#x accepted", off)
		}
	}
}

// On a FUSE filesystem syncfs makes nothing durable (the kernel sends its
// server nothing), so a checkpoint of deferred writes to many files must
// sync each file there: what the power-cut filesystem's backing directory
// holds right after the checkpoint (what a cut would leave) must open as a
// store that holds every overwrite.
func TestCheckpointOnFUSESyncsEachFile(t *testing.T) {
	defer func(d time.Duration) { checkpointInterval = d }(checkpointInterval)
	checkpointInterval = time.Hour // only the test's checkpoint runs
	f := powercut.ForTest(t, filepath.Join(t.TempDir(), "disk"), powercut.Options{})
	dir := filepath.Join(f.Dir(), "osd")
	s, err := Open(Options{Dir: dir, ReserveBytes: -1, DataCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string][]byte{}
	for i := range syncfsMinFiles + 2 {
		name := fmt.Sprintf("vol.%d", i)
		want[name] = pattern(i, 256<<10)
		apply(t, s, func(tx *Txn) { tx.Put("1.0", name, want[name]) })
	}
	for name := range want {
		patch := pattern(len(name)*7+int(name[len(name)-1]), 4096)
		apply(t, s, func(tx *Txn) { tx.Write("1.0", name, 8192, patch) })
		copy(want[name][8192:], patch)
		if !s.hasPending(fileIDOf(t, s, name)) {
			t.Fatalf("a 4 KiB overwrite of %s was not deferred", name)
		}
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := s.fsSyncs.Load(); n != 0 {
		t.Errorf("%d checkpoints relied on syncfs on a FUSE filesystem", n)
	}
	// The durable state, as a cut now would leave it.
	after := filepath.Join(t.TempDir(), "after")
	if out, err := exec.Command("cp", "-a", "--sparse=always", f.Backing(), after).CombinedOutput(); err != nil {
		t.Fatalf("copy the durable state: %v: %s", err, out)
	}
	s2 := openReal(t, filepath.Join(after, "osd"))
	defer s2.Close()
	for name, w := range want {
		if got := mustRead(t, s2, "1.0", name, 0, 0); !bytes.Equal(got, w) {
			t.Errorf("%s: the checkpointed overwrite is not durable", name)
		}
	}
}
