package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

// dataObjects returns the indexes of the data objects of volume id that
// exist in p.
func dataObjects(t *testing.T, p *client.Pool, id string) []uint64 {
	t.Helper()
	var out []uint64
	prefix := "vol." + id + "."
	err := p.List(context.Background(), func(name string) error {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			i, err := strconv.ParseUint(rest, 16, 64)
			if err != nil {
				return fmt.Errorf("data object %q: %v", name, err)
			}
			out = append(out, i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// qemuIO is an interactive qemu-io connected to an NBD export: it keeps
// one connection open while the test writes through it, command by command.
type qemuIO struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startQemuIO(t *testing.T, uri string) *qemuIO {
	t.Helper()
	cmd := exec.Command("qemu-io", "-f", "raw", uri)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	q := &qemuIO{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(q.quit)
	fmt.Fprintln(in, "length")
	if line := q.answer(t, "iB"); !strings.Contains(line, "GiB") {
		t.Fatalf("qemu-io did not connect: %q", line)
	}
	return q
}

// answer returns the next output line that holds one of the words.
func (q *qemuIO) answer(t *testing.T, words ...string) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		defer close(got)
		for q.out.Scan() {
			for _, w := range words {
				if strings.Contains(q.out.Text(), w) {
					got <- q.out.Text()
					return
				}
			}
		}
	}()
	select {
	case l, ok := <-got:
		if !ok {
			t.Fatal("qemu-io ended")
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("qemu-io did not answer within 60 s")
	}
	return ""
}

// write writes 4 KiB of 0xab at off and returns "ok" or qemu-io's error.
func (q *qemuIO) write(t *testing.T, off uint64) string {
	t.Helper()
	fmt.Fprintf(q.in, "write -P 0xab %d 4096\n", off)
	if l := q.answer(t, "wrote ", "failed"); !strings.Contains(l, "failed") {
		return "ok"
	} else {
		return l
	}
}

func (q *qemuIO) quit() {
	if q.in == nil {
		return
	}
	fmt.Fprintln(q.in, "quit")
	q.in.Close()
	q.in = nil
	done := make(chan struct{})
	go func() { q.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		q.cmd.Process.Kill()
		<-done
	}
}

// TestVolumeShrinkUnderConnectedClient: a shrink is refused while an NBD
// client has the volume open (unless forced); a forced shrink makes the
// client's IO past the new end fail at once; nothing written past the end
// survives, even from writers racing the shrink; rm is refused while the
// volume is open and then leaves nothing behind.
func TestVolumeShrinkUnderConnectedClient(t *testing.T) {
	t.Parallel()
	needTools(t, "qemu-io")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	p := c.pool("default")
	if out, err := c.cli(nil, "volume", "create", "default/disk", "--size", "1G"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	info, err := volume.Stat(ctx, p, "disk")
	if err != nil {
		t.Fatal(err)
	}
	sh := startQemuIO(t, c.nbdURI("default/disk"))
	if r := sh.write(t, 901<<20); r != "ok" {
		t.Fatalf("write at 901 MiB before the shrink: %s", r)
	}

	out, err := c.cli(nil, "volume", "resize", "default/disk", "--size", "512M")
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "open") {
		t.Errorf("shrink under a connected client: want a refusal that names --force, got %v\n%s", err, out)
	}
	if out, err := c.cli(nil, "volume", "resize", "default/disk", "--size", "512M", "--force"); err != nil {
		t.Fatalf("forced shrink: %v\n%s", err, out)
	}
	if r := sh.write(t, 901<<20); r == "ok" {
		t.Errorf("the client's write at 901 MiB after the shrink to 512 MiB was acknowledged")
	}
	if r := sh.write(t, 100<<20); r != "ok" {
		t.Errorf("write at 100 MiB after the shrink: %s", r)
	}
	if idx := dataObjects(t, p, info.ID); len(idx) != 1 || idx[0] != 25 {
		t.Errorf("after the shrink, the data objects are %v; want only object 25 (the write at 100 MiB)", idx)
	}
	if out, err := c.cli(nil, "volume", "resize", "default/disk", "--size", "1G"); err != nil {
		t.Fatalf("grow back under the client: %v\n%s", err, out)
	}
	v, err := volume.OpenSnap(ctx, p, "disk", "")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if err := v.ReadAt(ctx, got, 901<<20); err != nil || !bytes.Equal(got, make([]byte, 4096)) {
		t.Errorf("after growing back, 901 MiB does not read as zeros (%v): data past a shrink survived", err)
	}

	out, err = c.cli(nil, "volume", "rm", "default/disk")
	if err == nil || !strings.Contains(err.Error(), "open") {
		t.Errorf("rm under a connected client: want a refusal, got %v\n%s", err, out)
	}
	sh.quit()
	if out, err := c.cli(nil, "volume", "rm", "default/disk"); err != nil {
		t.Fatalf("rm: %v\n%s", err, out)
	}
	if idx := dataObjects(t, p, info.ID); len(idx) > 0 {
		t.Errorf("rm left data objects %v behind", idx)
	}

	// Writers racing a forced shrink: once it returns, no write past the
	// new end succeeds, and no object past the end is left.
	if out, err := c.cli(nil, "volume", "create", "default/race", "--size", "64M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rv, err := volume.Open(ctx, p, "race")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	var shrunk, stop atomic.Bool
	var late atomic.Int64 // writes past the end acknowledged after the shrink returned
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); !stop.Load(); i++ {
				after := shrunk.Load()
				off := 32<<20 + (uint64(w)*8+i%8)<<20 + i%256*4096
				if rv.WriteAt(ctx, payload("race", int(i), 4096), off) == nil && after {
					late.Add(1)
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if out, err := c.cli(nil, "volume", "resize", "default/race", "--size", "32M", "--force"); err != nil {
		t.Fatalf("forced shrink with racing writers: %v\n%s", err, out)
	}
	shrunk.Store(true)
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if n := late.Load(); n > 0 {
		t.Errorf("%d writes past the new end were acknowledged after the shrink returned", n)
	}
	var past []uint64
	for _, i := range dataObjects(t, p, rv.ID) {
		if i >= 32 {
			past = append(past, i)
		}
	}
	if len(past) > 0 {
		t.Errorf("objects past the new end survived the shrink: %v", past)
	}
}

// TestVolumeLimitsAndNames: removal takes time by what exists, not by the
// nominal size; sizes have a maximum the error names; the volumes'
// objects cannot be removed or overwritten with `obj`; an export name with
// an empty snapshot is refused like on the command line; a pool cannot be
// called ".."; progress bars end their line before an error and end at
// 100% on success.
func TestVolumeLimitsAndNames(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	p := c.pool("default")

	for _, size := range []string{"1E", "8E", "2P"} {
		out, err := c.cli(nil, "volume", "create", "default/huge", "--size", size)
		if err == nil || !strings.Contains(err.Error(), "1 PiB") {
			t.Errorf("volume create --size %s: want an error naming the maximum (1 PiB), got %v\n%s", size, err, out)
		}
	}
	if out, err := c.cli(nil, "volume", "create", "default/big", "--size", "1P"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	big, err := volume.Open(ctx, p, "big")
	if err != nil {
		t.Fatal(err)
	}
	if err := big.WriteAt(ctx, []byte("last"), big.Size-4); err != nil {
		t.Fatal(err)
	}
	big.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if out, err := exec.CommandContext(rctx, cairnBin, "--conf", c.conf, "volume", "rm", "default/big").CombinedOutput(); err != nil {
		t.Errorf("rm of a 1 PiB volume holding 4 bytes: %v after %v\n%s", err, time.Since(t0).Round(time.Millisecond), out)
	} else if idx := dataObjects(t, p, big.ID); len(idx) > 0 {
		t.Errorf("rm left data objects %v", idx)
	}
	t.Logf("rm of a 1 PiB volume holding 4 bytes took %v", time.Since(t0).Round(time.Millisecond))

	// The volumes' own objects are not the obj command's to change.
	if out, err := c.cli(nil, "volume", "create", "default/keep", "--size", "8M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	keep, err := volume.Stat(ctx, p, "keep")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"obj", "rm", "default", "volumes"},
		{"obj", "rm", "default", "volume.keep"},
		{"obj", "put", "default", "volumes", "-"},
		{"obj", "put", "default", "vol." + keep.ID + ".0000000000000000", "-"},
	} {
		out, err := c.cli([]byte("x"), args...)
		if err == nil || !strings.Contains(err.Error(), "volume") {
			t.Errorf("cairn %s: want a refusal naming the volumes, got %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := c.cli([]byte("x"), "obj", "put", "default", "volumes.txt", "-"); err != nil {
		t.Errorf("an ordinary object named volumes.txt: %v\n%s", err, out)
	}
	if out, err := c.cli(nil, "volume", "ls", "default"); err != nil || !strings.Contains(string(out), "keep") {
		t.Errorf("volume ls after the refused obj commands: %v\n%s", err, out)
	}

	// POOL/NAME@ has an empty snapshot name, over NBD as on the CLI.
	if _, err := exec.LookPath("nbdinfo"); err == nil {
		if out, err := exec.Command("nbdinfo", c.nbdURI("default/keep@")).CombinedOutput(); err == nil {
			t.Errorf("nbdinfo default/keep@ (empty snapshot name) was served:\n%s", out)
		}
	}
	if out, err := c.cli(nil, "volume", "export", "default/keep@", "-"); err == nil {
		t.Errorf("volume export default/keep@ was accepted:\n%.200s", out)
	}

	for _, name := range []string{"..", ".", "-x"} {
		if out, err := c.cli(nil, "pool", "create", "--pg-num", "8", "--", name); err == nil {
			t.Errorf("pool create %q was accepted:\n%s", name, out)
		}
	}

	// Progress bars: an import's error starts its own line; an
	// import-diff ends at 100%.
	dir := t.TempDir()
	v, err := volume.Open(ctx, p, "keep")
	if err != nil {
		t.Fatal(err)
	}
	// Two runs of data: two records, so a stream cut in the second has
	// applied the first (and drawn the bar) when it fails.
	if err := v.WriteAt(ctx, payload("keep", 0, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteAt(ctx, payload("keep", 2, 64<<10), 4<<20); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full.cvol")
	if out, err := c.cli(nil, "volume", "export", "default/keep", full); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.cvol")
	os.WriteFile(cut, b[:len(b)-100], 0o644)
	stderr := cliStderr(t, c, true, "volume", "import", cut, "default/cut")
	if !strings.Contains(stderr, "import default/cut [") {
		t.Errorf("the failed import drew no progress bar:\n%q", stderr)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "cairn:") && !strings.HasPrefix(line, "cairn:") {
			t.Errorf("the import's error is printed on its progress bar's line: %q", line)
		}
	}
	if out, err := c.cli(nil, "volume", "snap", "create", "default/keep@a"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.cli(nil, "volume", "import", full, "default/copy"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.cli(nil, "volume", "snap", "create", "default/copy@a"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := v.WriteAt(ctx, payload("keep", 1, 4096), 0); err != nil {
		t.Fatal(err)
	}
	v.Close()
	diff := filepath.Join(dir, "diff.cvol")
	if out, err := c.cli(nil, "volume", "export-diff", "--from-snap", "a", "default/keep", diff); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	stderr = cliStderr(t, c, false, "volume", "import-diff", diff, "default/copy")
	bars := strings.Split(strings.TrimSpace(stderr), "\r")
	if last := bars[len(bars)-1]; !strings.Contains(last, "8.0 MiB / 8.0 MiB") {
		t.Errorf("import-diff's progress bar does not end at 100%%: %q", last)
	}
}

// cliStderr runs the CLI and returns its standard error; fail says whether
// the command is to fail.
func cliStderr(t *testing.T, c *cluster, fail bool, args ...string) string {
	t.Helper()
	cmd := exec.Command(cairnBin, append([]string{"--conf", c.conf}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if (err != nil) != fail {
		t.Fatalf("cairn %s: %v (want failure: %v)\n%s", strings.Join(args, " "), err, fail, stderr.String())
	}
	return stderr.String()
}
