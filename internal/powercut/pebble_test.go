package powercut

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func batchKeys(round, w, i int) (set, del []string) {
	set = []string{fmt.Sprintf("r%d/w%d/%06d/a", round, w, i), fmt.Sprintf("r%d/w%d/%06d/b", round, w, i)}
	if i >= 10 && i%2 == 0 {
		del = []string{fmt.Sprintf("r%d/w%d/%06d/a", round, w, i-10), fmt.Sprintf("r%d/w%d/%06d/b", round, w, i-10)}
	}
	return set, del
}

func batchValue(round, w, i int) string {
	return fmt.Sprintf("r%d/w%d/%d=%x", round, w, i, make([]byte, 100+i%3000))
}

// TestPebbleChild is the writer process of TestPebbleSurvivesCuts: a
// process, as a database's is, that the power cut kills (pebble panics on
// the dead disk, as it may).
func TestPebbleChild(t *testing.T) {
	dir := os.Getenv("POWERCUT_PEBBLE_CHILD")
	if dir == "" {
		t.Skip("run by TestPebbleSurvivesCuts")
	}
	var round int
	fmt.Sscan(os.Getenv("POWERCUT_PEBBLE_ROUND"), &round)
	db, err := pebble.Open(dir, &pebble.Options{MemTableSize: 256 << 10, Logger: quietLogger{}})
	if err != nil {
		fmt.Printf("open: %v\n", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		mu.Unlock()
	}
	for w := 0; w < 3; w++ {
		go func() {
			for i := 0; ; i++ {
				set, del := batchKeys(round, w, i)
				b := db.NewBatch()
				for _, k := range set {
					b.Set([]byte(k), []byte(batchValue(round, w, i)), nil)
				}
				for _, k := range del {
					b.Delete([]byte(k), nil)
				}
				say("try %d %d", w, i)
				if err := b.Commit(pebble.Sync); err != nil {
					select {} // the power is cut; wait for the end
				}
				say("ack %d %d", w, i)
			}
		}()
	}
	select {}
}

// A pebble database (a client nobody here wrote) committing with Sync on
// the mount survives power cuts with every acknowledged batch, and nothing
// it deleted comes back. Each batch sets two new keys and deletes the keys
// of a batch acknowledged earlier; a batch that was not acknowledged may or
// may not have landed. The writer is a child process that the cut kills.
func TestPebbleSurvivesCuts(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))
	f := mount(t)
	acked := map[string]string{} // key -> value ("" deleted)
	batches := 0
	for round := 0; round < 8; round++ {
		db, err := pebble.Open(at(f, "db"), &pebble.Options{Logger: quietLogger{}})
		if err != nil {
			t.Fatalf("round %d: open after the cut: %v", round, err)
		}
		var bad []string
		for k, v := range acked {
			got, closer, err := db.Get([]byte(k))
			switch {
			case v == "" && !errors.Is(err, pebble.ErrNotFound):
				bad = append(bad, fmt.Sprintf("deleted key %s resurrected (%v)", k, err))
			case v != "" && err != nil:
				bad = append(bad, fmt.Sprintf("acknowledged key %s lost: %v", k, err))
			case v != "" && string(got) != v:
				bad = append(bad, fmt.Sprintf("key %s = %.20q, want %.20q", k, got, v))
			}
			if err == nil {
				closer.Close()
			}
		}
		must(t, db.Close())
		if len(bad) > 0 {
			slices.Sort(bad)
			t.Fatalf("round %d: %d of %d acknowledged keys wrong:\n%s", round, len(bad), len(acked), strings.Join(bad, "\n"))
		}

		cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleChild$")
		cmd.Env = append(os.Environ(), "POWERCUT_PEBBLE_CHILD="+at(f, "db"), fmt.Sprint("POWERCUT_PEBBLE_ROUND=", round))
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		lines := make(chan []string, 1)
		go func() {
			var ls []string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				ls = append(ls, sc.Text())
			}
			lines <- ls
		}()
		time.Sleep(time.Duration(100+r.Intn(300)) * time.Millisecond)
		if round%2 == 1 {
			rep, err := f.CutHarsh(r.Int63())
			must(t, err)
			t.Logf("round %d: harsh cut: %+v", round, rep)
		} else {
			must(t, f.Cut())
		}
		cmd.Process.Kill()
		cmd.Wait()
		// Every line was written before the cut: after it no commit
		// succeeds.
		n := 0
		for _, l := range <-lines {
			var w, i int
			if _, err := fmt.Sscanf(l, "try %d %d", &w, &i); err == nil {
				// Until acknowledged, its deletes may land.
				_, del := batchKeys(round, w, i)
				for _, k := range del {
					if acked[k] != "" {
						acked[k] = "?"
					}
				}
			} else if _, err := fmt.Sscanf(l, "ack %d %d", &w, &i); err == nil {
				set, del := batchKeys(round, w, i)
				for _, k := range set {
					acked[k] = batchValue(round, w, i)
				}
				for _, k := range del {
					acked[k] = ""
				}
				n++
			} else if !strings.HasPrefix(l, "=== RUN") {
				t.Logf("child: %s", l)
			}
		}
		batches += n
		t.Logf("round %d: %d batches acknowledged", round, n)
		// Keys that may be deleted are checked for nothing, then
		// dropped.
		for k, v := range acked {
			if v == "?" {
				delete(acked, k)
			}
		}
		must(t, f.Remount())
	}
	st := f.Stats()
	t.Logf("%d batches acknowledged over 8 cuts; %+v", batches, st)
	if batches == 0 || st.Fsyncs == 0 || st.DirSyncs == 0 || st.ForcedWritebacks != 0 {
		t.Fatalf("pebble did not exercise the filesystem as expected: %+v", st)
	}
}
