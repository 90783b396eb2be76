package baseline

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// copyHelperEnv makes this test binary run as a copy of the replicated-write
// measurement (ServeCopy) instead of running the tests.
const copyHelperEnv = "CAIRN_BASELINE_TEST_COPY"

func TestMain(m *testing.M) {
	if os.Getenv(copyHelperEnv) != "" {
		os.Exit(serveCopyHelper(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// serveCopyHelper is what `cairn baseline-copy` does, for the copies the
// tests start.
func serveCopyHelper(args []string) int {
	fs := flag.NewFlagSet("copy", flag.ContinueOnError)
	var o CopyOptions
	fs.StringVar(&o.File, "file", "", "")
	fs.Func("peer", "", func(s string) error { o.Peers = append(o.Peers, s); return nil })
	fs.IntVar(&o.DataShards, "data-shards", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := ServeCopy(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// copyHelper is a CopyCommand that runs copies of this test binary.
func copyHelper(t *testing.T) []string {
	t.Setenv(copyHelperEnv, "1")
	return []string{os.Args[0]}
}

// startInProcess runs ServeCopy on a goroutine until the test ends and
// returns its address.
func startInProcess(t *testing.T, o CopyOptions) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeCopy(ctx, o, pw)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeCopy: %v", err)
		}
		if _, err := os.Stat(o.File); !os.IsNotExist(err) {
			t.Errorf("copy file %s left behind (%v)", o.File, err)
		}
	})
	line := make([]byte, 256)
	n, err := pr.Read(line)
	go io.Copy(io.Discard, pr)
	f := strings.Fields(string(line[:n]))
	if err != nil || len(f) != 3 || f[0] != "listening" || (f[2] != "direct" && f[2] != "buffered") {
		t.Fatalf("ServeCopy said %q (%v), want \"listening ADDR direct|buffered\"", line[:n], err)
	}
	return f[1]
}

// sendRaw writes one frame whose header carries sum and returns the reply's
// id and status.
func sendRaw(t *testing.T, c net.Conn, id uint64, body []byte, sum uint32) (uint64, byte) {
	t.Helper()
	var h [replHeader]byte
	binary.BigEndian.PutUint64(h[0:], id)
	binary.BigEndian.PutUint32(h[8:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[12:], sum)
	if _, err := c.Write(append(h[:], body...)); err != nil {
		t.Fatal(err)
	}
	var r [replReply]byte
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, r[:]); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	return binary.BigEndian.Uint64(r[:]), r[8]
}

// A copy checks the crc32c of every write, forwards a good one to its peer
// before writing it, and answers only once the peer has it on disk; a bad
// one is answered as such and written nowhere.
func TestCopyChecksAndForwards(t *testing.T) {
	dir := t.TempDir()
	peerFile, primaryFile := filepath.Join(dir, "peer"), filepath.Join(dir, "primary")
	peer := startInProcess(t, CopyOptions{File: peerFile})
	primary := startInProcess(t, CopyOptions{File: primaryFile, Peers: []string{peer}})

	c, err := net.Dial(network(primary), primary)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{modeWrite})
	body := make([]byte, 64<<10)
	fillRandom(body, newTestRand())
	sum := crc32.Checksum(body, castagnoli)

	if id, st := sendRaw(t, c, 7, body, sum^1); id != 7 || st != replBadSum {
		t.Fatalf("corrupted write: reply id %d status %d, want 7 and %d (bad checksum)", id, st, replBadSum)
	}
	if id, st := sendRaw(t, c, 8, body, sum); id != 8 || st != replOK {
		t.Fatalf("good write: reply id %d status %d, want 8 and %d", id, st, replOK)
	}
	// The bad write took no slot: the good one is in slot 0 of both files.
	for _, f := range []string{primaryFile, peerFile} {
		got := make([]byte, len(body))
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fh.ReadAt(got, 0)
		fh.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: slot 0 does not hold the write (%v)", filepath.Base(f), err)
		}
	}

	// A frame no client of ours sends ends the connection.
	var h [replHeader]byte
	binary.BigEndian.PutUint32(h[8:], ReplicatedWriteSize+blockSize)
	c.Write(h[:])
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("oversized frame: read %d bytes, want the connection closed", n)
	}
}

// A copy that cannot start says why, in the error Run returns.
func TestCopyStartFailure(t *testing.T) {
	dir := t.TempDir()
	r := &Result{}
	err := runReplicated(context.Background(), Options{
		Duration:    testDuration,
		CopyCommand: []string{"sh", "-c", "echo 'no space for the ring' >&2; exit 1", "copy"},
	}, dir, r)
	if err == nil || !strings.Contains(err.Error(), "no space for the ring") {
		t.Fatalf("err %v, want the copy's own message", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}

	// In a whole baseline the disk and network figures are kept, and the
	// report says why the replicated writes are missing.
	var steps []string
	res, err := Run(context.Background(), Options{
		Dir: dir, FileSize: testSize, Duration: testDuration,
		CopyCommand: []string{"sh", "-c", "echo 'no space for the ring' >&2; exit 1", "copy"},
		Progress:    func(s string) { steps = append(steps, s) },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Disk.SyncWrite4KQD1.Ops == 0 || res.Net.RTT4K.Ops == 0 || res.Bound.ReplicatedWriteUs <= 0 {
		t.Errorf("disk and network figures lost: %+v", res)
	}
	if n := res.Replicated.Write4M.Note; !strings.Contains(n, "not measured: ") || !strings.Contains(n, "no space for the ring") {
		t.Errorf("write_4m note %q does not say why it is missing", n)
	}
	if n := res.Erasure.Write4M.Note; !strings.Contains(n, "not measured: ") || !strings.Contains(n, "no space for the ring") {
		t.Errorf("write_4m_ec note %q does not say why it is missing", n)
	}
	if res.Bound.WriteCPUPerGiB != 0 || res.Bound.MeasuredWriteUs != 0 || res.Bound.ECWriteCPUPerGiB != 0 {
		t.Errorf("bounds from a measurement that did not run: %+v", res.Bound)
	}
	if last := steps[len(steps)-1]; !strings.Contains(last, "no space for the ring") {
		t.Errorf("last progress step %q does not report the failure", last)
	}
	var buf bytes.Buffer
	res.WriteText(&buf)
	if !strings.Contains(buf.String(), "write_4m: not measured") {
		t.Errorf("report does not say why write_4m is missing:\n%s", buf.String())
	}
}

// Cancelling the measurement stops it and every copy, and removes their
// files. The cancel comes once the copies are up and writing (their files
// exist and the first write run has begun), not while they start.
func TestReplicatedCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			if files, _ := filepath.Glob(filepath.Join(dir, ".cairn-baseline-copy0-*")); len(files) > 0 {
				time.Sleep(time.Second)
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	err := runReplicated(ctx, Options{Duration: time.Minute, CopyCommand: copyHelper(t)}, dir, &Result{})
	if err == nil || ctx.Err() == nil {
		t.Fatalf("err %v, want the cancellation", err)
	}
	if d := time.Since(start); d > 40*time.Second {
		t.Errorf("took %v to stop after the cancel", d)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// FuzzCopyFrames feeds a copy arbitrary bytes as a write stream: it must
// not panic, must answer only frames it read whole, each with the id it
// carried and a status that says whether its checksum held, and must
// stop at the first frame no client of ours sends.
func FuzzCopyFrames(f *testing.F) {
	frame := func(id uint64, body []byte, sum uint32) []byte {
		var h [replHeader]byte
		binary.BigEndian.PutUint64(h[0:], id)
		binary.BigEndian.PutUint32(h[8:], uint32(len(body)))
		binary.BigEndian.PutUint32(h[12:], sum)
		return append(h[:], body...)
	}
	body := make([]byte, blockSize)
	body[7] = 1
	good := frame(1, body, crc32.Checksum(body, castagnoli))
	f.Add(good)
	f.Add(frame(2, body, 0))
	f.Add(append(append([]byte{}, good...), frame(3, nil, 0)...))
	f.Add(append(append([]byte{}, good...), frame(4, body, 5)...))
	f.Add(good[:100])
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		ring, err := os.CreateTemp(dir, "ring")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { ring.Close(); os.Remove(ring.Name()) }()
		s := &copyServer{f: ring, bufs: make(chan []byte, 1)}
		s.o.Begin, s.o.End = func() {}, func() {}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			s.serveWrites(server)
			server.Close()
			close(done)
		}()
		go func() {
			client.Write(data)
			// Reading the replies is what ends the stream: closing the
			// write side of a pipe closes both.
		}()
		// What a correct copy answers: one reply per whole, well-formed
		// frame up to the first malformed one, in any order (a bad
		// checksum is answered at once, a write once it is synced).
		var want [][replReply]byte
		for rest := data; len(rest) >= replHeader; {
			n := int(binary.BigEndian.Uint32(rest[8:]))
			if n <= 0 || n > ReplicatedWriteSize || n%blockSize != 0 || len(rest) < replHeader+n {
				break
			}
			var r [replReply]byte
			copy(r[:8], rest[:8])
			if crc32.Checksum(rest[replHeader:replHeader+n], castagnoli) != binary.BigEndian.Uint32(rest[12:]) {
				r[8] = replBadSum
			}
			want = append(want, r)
			rest = rest[replHeader+n:]
		}
		var got [][replReply]byte
		for range want {
			var r [replReply]byte
			client.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.ReadFull(client, r[:]); err != nil {
				t.Fatalf("reply %d of %d: %v", len(got)+1, len(want), err)
			}
			got = append(got, r)
		}
		byBytes := func(a, b [replReply]byte) int { return bytes.Compare(a[:], b[:]) }
		slices.SortFunc(got, byBytes)
		slices.SortFunc(want, byBytes)
		if !slices.Equal(got, want) {
			t.Fatalf("replies %x, want %x", got, want)
		}
		client.Close()
		<-done
	})
}
