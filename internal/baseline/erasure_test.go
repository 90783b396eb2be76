package baseline

import (
	"bytes"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/reedsolomon"
)

// An erasure-coding primary sends each peer its shard of every write and
// keeps the first: the shards on the three files are the Reed-Solomon
// shards of the write, zero-padded where it does not divide evenly, and
// they rebuild it.
func TestErasureCopiesHoldShards(t *testing.T) {
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "p0"), filepath.Join(dir, "p1"), filepath.Join(dir, "p2")}
	p1 := startInProcess(t, CopyOptions{File: files[1]})
	p2 := startInProcess(t, CopyOptions{File: files[2]})
	primary := startInProcess(t, CopyOptions{File: files[0], Peers: []string{p1, p2}, DataShards: 2})
	c, err := net.Dial(network(primary), primary)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{modeWrite})

	for i, size := range []int{64 << 10, 12 << 10} { // halves whole; halves of 6 KiB, padded to 8 KiB
		body := make([]byte, size)
		fillRandom(body, newTestRand())
		if id, st := sendRaw(t, c, uint64(i+1), body, crc32.Checksum(body, castagnoli)); id != uint64(i+1) || st != replOK {
			t.Fatalf("%d B write: reply id %d status %d", size, id, st)
		}
		want := encodeForTest(t, body, 2, 1)
		shards := make([][]byte, 3)
		for p, f := range files {
			shards[p] = readAt(t, f, int64(i)*ReplicatedWriteSize, len(want[p]))
			if !bytes.Equal(shards[p], want[p]) {
				t.Errorf("%d B write: position %d does not hold shard %d", size, p, p)
			}
		}
		shards[0] = nil // lose the primary's shard: the others rebuild it
		enc, _ := reedsolomon.New(2, 1)
		if err := enc.Reconstruct(shards); err != nil || !bytes.Equal(append(shards[0], shards[1]...)[:size], body) {
			t.Errorf("%d B write: shards 1 and 2 do not rebuild it (%v)", size, err)
		}
	}
}

// A coding primary needs peers for its parity.
func TestErasureCopyNeedsPeers(t *testing.T) {
	err := ServeCopy(t.Context(), CopyOptions{File: filepath.Join(t.TempDir(), "f"), DataShards: 2}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--peer") {
		t.Errorf("err %v, want one naming the missing peers", err)
	}
}

func encodeForTest(t *testing.T, body []byte, k, m int) [][]byte {
	t.Helper()
	e, err := newShardEncoder(k, m)
	if err != nil {
		t.Fatal(err)
	}
	shards, release, err := e.encode(body)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(shards))
	for i, s := range shards {
		out[i] = bytes.Clone(s)
	}
	release()
	return out
}

func readAt(t *testing.T, name string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}
