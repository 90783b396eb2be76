package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needTools skips a test whose real clients are not installed, unless
// CAIRN_REQUIRE_TOOLS is set (as .ci/run does, after installing them).
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CAIRN_REQUIRE_TOOLS") != "" {
				t.Fatalf("%s is not installed (apt-get install libnbd-bin qemu-utils fio)", tool)
			}
			t.Skipf("%s is not installed (apt-get install libnbd-bin qemu-utils fio)", tool)
		}
	}
}

func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *cluster) nbdURI(export string) string {
	return fmt.Sprintf("nbd://127.0.0.1:%d/%s", c.nbdPort, export)
}

// TestNBDWithRealClients serves volumes to nbdinfo, nbdcopy, qemu-img and
// qemu-io, none of them written here.
func TestNBDWithRealClients(t *testing.T) {
	t.Parallel()
	needTools(t, "nbdinfo", "nbdcopy", "qemu-img", "qemu-io")
	c := startCluster(t, clusterOpts{})
	const size = 256 << 20
	for _, v := range []string{"img", "conv"} {
		if out, err := c.cli(nil, "volume", "create", "default/"+v, "--size", "256M"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	uri := c.nbdURI("default/img")

	var info struct {
		Exports []struct {
			Name      string `json:"export-name"`
			Size      int64  `json:"export-size"`
			MultiConn bool   `json:"can_multi_conn"`
			Flush     bool   `json:"can_flush"`
			FUA       bool   `json:"can_fua"`
			Trim      bool   `json:"can_trim"`
			Zero      bool   `json:"can_zero"`
			ReadOnly  bool   `json:"is_read_only"`
			MaxBlock  int64  `json:"block_size_maximum"`
		} `json:"exports"`
	}
	if err := json.Unmarshal([]byte(runTool(t, "nbdinfo", "--json", uri)), &info); err != nil {
		t.Fatal(err)
	}
	e := info.Exports[0]
	if e.Size != size || !e.MultiConn || !e.Flush || !e.FUA || !e.Trim || !e.Zero || e.ReadOnly || e.MaxBlock != 32<<20 {
		t.Fatalf("nbdinfo: %+v", e)
	}
	if list := runTool(t, "nbdinfo", "--list", c.nbdURI("")); !strings.Contains(list, "default/img") || !strings.Contains(list, "default/conv") {
		t.Fatalf("nbdinfo --list does not name both volumes:\n%s", list)
	}
	if out, err := exec.Command("nbdinfo", c.nbdURI("default/nope")).CombinedOutput(); err == nil || !strings.Contains(string(out), "nope") {
		t.Fatalf("unknown export: want an error naming it, got %v\n%s", err, out)
	}

	// A random image in and out with nbdcopy.
	dir := t.TempDir()
	src, back := filepath.Join(dir, "src.raw"), filepath.Join(dir, "back.raw")
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	runTool(t, "nbdcopy", src, uri)
	in := time.Since(t0)
	t0 = time.Now()
	runTool(t, "nbdcopy", uri, back)
	out := time.Since(t0)
	got, err := os.ReadFile(back)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("nbdcopy out differs from what nbdcopy wrote in (%v)", err)
	}
	t.Logf("nbdcopy 256 MiB in %.2f s (%.0f MB/s), out %.2f s (%.0f MB/s)", in.Seconds(), size/in.Seconds()/1e6, out.Seconds(), size/out.Seconds()/1e6)

	// qemu-img convert onto the other volume, and compare.
	conv := c.nbdURI("default/conv")
	runTool(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, conv)
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, conv)

	// qemu-io: unaligned writes and reads, and the very last byte.
	io := runTool(t, "qemu-io", "-f", "raw",
		"-c", "write -P 0xab 1000 3333", "-c", "read -P 0xab 1000 3333",
		"-c", "write -P 0xcd 4194000 5000", "-c", "read -P 0xcd 4194000 5000", // across an object boundary
		"-c", fmt.Sprintf("write -P 0xef %d 1", size-1), "-c", fmt.Sprintf("read -P 0xef %d 1", size-1),
		conv)
	if strings.Contains(io, "fail") || strings.Count(io, "wrote ") != 3 || strings.Count(io, "read ") != 3 {
		t.Fatalf("qemu-io:\n%s", io)
	}
	// Block status: the allocation map comes from which objects exist.
	// A fresh volume is one hole; a write in its 2nd object makes that
	// object's written part data.
	if out, err := c.cli(nil, "volume", "create", "default/sparse", "--size", "64M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	sparse := c.nbdURI("default/sparse")
	runTool(t, "qemu-io", "-f", "raw", "-c", "write -P 0x11 4194304 1048576", sparse)
	m := runTool(t, "nbdinfo", "--map", sparse)
	if !strings.Contains(m, "4194304     1048576    0  data") || !strings.Contains(m, "0     4194304    3  hole,zero") {
		t.Fatalf("nbdinfo --map of a volume with 1 MiB written at 4 MiB:\n%s", m)
	}

	// Past the end: a clean error, and the server goes on serving.
	if out, _ := exec.Command("qemu-io", "-f", "raw", "-c", fmt.Sprintf("write %d 2", size-1), conv).CombinedOutput(); !strings.Contains(string(out), "failed") {
		t.Fatalf("write past the end did not fail:\n%s", out)
	}
	runTool(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri)
}

// TestNBDFioVerifyWhileOSDKilled runs fio's nbd engine, 4 KiB random writes
// at depth 16 with crc32c verification, and SIGKILLs an OSD in the middle.
func TestNBDFioVerifyWhileOSDKilled(t *testing.T) {
	t.Parallel()
	needTools(t, "fio")
	c := startCluster(t, clusterOpts{})
	fioVerify(t, c, "osd.2 killed after 1 s", func() { c.kill("osd.2") })
}

// TestNBDFioVerifyWritebackFull is the same with each OSD's write-back area
// far smaller than what fio writes, so that areas fill and writers are
// held back, and the SIGKILLed OSD is started again while fio runs.
func TestNBDFioVerifyWritebackFull(t *testing.T) {
	t.Parallel()
	needTools(t, "fio")
	c := startCluster(t, clusterOpts{writeback: "8M"})
	fioVerify(t, c, "8 MiB write-back areas, osd.2 killed after 1 s and restarted", func() {
		c.kill("osd.2")
		time.Sleep(2 * time.Second)
		c.restart("osd.2")
	})
}

// fioVerify writes 48 MiB of a new volume with fio's nbd engine (4 KiB
// random writes at depth 16, crc32c in every block), runs fault a second
// in, and wants every block written and verified.
func fioVerify(t *testing.T, c *cluster, what string, fault func()) {
	t.Helper()
	if out, err := c.cli(nil, "volume", "create", "default/fio", "--size", "1G"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	iops := fioVerifyAt(t, c.nbdURI("default/fio"), 48<<20, false, fault)
	t.Logf("fio 4 KiB randwrite QD16, %s: %.0f IOPS, all 48 MiB verified", what, iops)
}
