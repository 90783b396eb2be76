package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fioVerifyAt runs fio's nbd engine against uri: 4 KiB random writes at
// depth 16 over size bytes, each block checked with crc32c (verifyOnly:
// only the check, of what an earlier run with the same job wrote, which
// fio still counts as written). during runs once fio has run for a
// second.
func fioVerifyAt(t *testing.T, uri string, size int64, verifyOnly bool, during func()) (iops float64) {
	t.Helper()
	return fioVerifySeed(t, uri, size, 7, verifyOnly, during)
}

// fioVerifySeed is fioVerifyAt with the job's random seed, which decides
// its data: a block another seed wrote fails the check.
func fioVerifySeed(t *testing.T, uri string, size int64, seed int, verifyOnly bool, during func()) (iops float64) {
	t.Helper()
	args := []string{"--name=ecverify", "--ioengine=nbd", "--uri=" + uri,
		"--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=" + strconv.FormatInt(size, 10), "--randseed=" + strconv.Itoa(seed),
		"--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0", "--output-format=json"}
	if verifyOnly {
		args = append(args, "--verify_only=1")
	}
	fio := exec.Command("fio", args...)
	var out bytes.Buffer
	fio.Stdout, fio.Stderr = &out, &out
	if err := fio.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fio.Wait() }()
	if during != nil {
		time.Sleep(time.Second)
		during()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fio: %v\n%s", err, out.String())
		}
	case <-time.After(5 * time.Minute): // a guard: fio on a loaded machine
		fio.Process.Kill()
		t.Fatalf("fio did not finish:\n%s", out.String())
	}
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				IOPS  float64 `json:"iops"`
				Bytes int64   `json:"io_bytes"`
			} `json:"write"`
			Read struct {
				Bytes int64 `json:"io_bytes"`
			} `json:"read"`
		} `json:"jobs"`
	}
	js := out.String()
	if i := strings.Index(js, "{"); i > 0 {
		js = js[i:]
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio output: %v\n%s", err, out.String())
	}
	j := res.Jobs[0]
	if j.Error != 0 || j.Write.Bytes != size || j.Read.Bytes != size {
		t.Fatalf("fio: error %d, wrote %d of %d bytes, verified %d of %d", j.Error, j.Write.Bytes, size, j.Read.Bytes, size)
	}
	return j.Write.IOPS
}

// TestECVolumeNBD: a volume on a 2+1 pool (min_size 2), made with cairn
// volume create (objects of 256 KiB: a small write to an erasure-coded
// object still copies each position's whole old shard to roll back), served by the NBD gateway: nbdinfo sees its size; fio
// writes it with 4 KiB random writes and checks every block (crc32c)
// while one OSD is SIGKILLed a second in, so writes go on with two
// positions and reads rebuild what the killed one held; once the OSD is
// back and its shards rebuilt, a second fio run checks every block again
// and qemu-img reads the volume through. A snapshot taken then still
// reads the same after qemu-io writes the volume.
func TestECVolumeNBD(t *testing.T) {
	t.Parallel()
	needTools(t, "fio", "nbdinfo", "qemu-img", "qemu-io")
	// The killed OSD stays in (no remapping): its positions are holes
	// until it returns, and then rebuilt on it.
	c := startCluster(t, clusterOpts{downOut: 10 * time.Minute})
	c.createECPool(t, "ecvol", "2+1", "--min-size", "2")
	if out, err := c.cli(nil, "volume", "create", "ecvol/disk", "--size", "64M", "--object-size", "256K"); err != nil {
		t.Fatalf("volume create on an erasure-coded pool: %v\n%s", err, out)
	}
	uri := c.nbdURI("ecvol/disk")
	if info := runTool(t, "nbdinfo", "--json", uri); !strings.Contains(info, `"export-size": 67108864`) {
		t.Fatalf("nbdinfo of a 64 MiB volume on an erasure-coded pool:\n%s", info)
	}
	const size = 16 << 20
	victim := "osd.3"
	iops := fioVerifyAt(t, uri, size, false, func() { c.kill(victim) })
	t.Logf("fio 4 KiB randwrite QD16 on a 2+1 volume, %s killed after 1 s: %.0f IOPS, all %d MiB verified", victim, iops, size>>20)

	c.restart(victim)
	c.waitHealthy(40*time.Second, "with "+victim+" back")
	fioVerifyAt(t, uri, size, true, nil)
	raw := t.TempDir() + "/disk.raw"
	runTool(t, "qemu-img", "convert", "-f", "raw", "-O", "raw", uri, raw)

	if out, err := c.cli(nil, "volume", "snap", "create", "ecvol/disk@s1"); err != nil {
		t.Fatalf("snapshot of a volume on an erasure-coded pool: %v\n%s", err, out)
	}
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x5a 1000 70000", "-c", "read -P 0x5a 1000 70000", uri)
	if out := runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", raw, c.nbdURI("ecvol/disk@s1")); !strings.Contains(out, "identical") {
		t.Fatalf("the snapshot taken before qemu-io wrote must read as the volume did:\n%s", out)
	}
	if out, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "raw", raw, uri).CombinedOutput(); err == nil || !strings.Contains(string(out), "mismatch") {
		t.Fatalf("qemu-io's write did not reach the volume: %v\n%s", err, out)
	}
}
