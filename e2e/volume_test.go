package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/volume"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestVolumeExportImport: a volume written in scattered places is exported
// (file and pipe), imported as new volumes that read back identical, and a
// damaged or cut stream is refused without leaving a volume behind.
func TestVolumeExportImport(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	if out, err := c.cli(nil, "volume", "create", "default/src", "--size", "64M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := c.pool("default")
	src, err := volume.Open(ctx, p, "src")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	want := make([]byte, 64<<20)
	for i := 0; i < 40; i++ {
		off := r.Uint64N(64<<20 - 300<<10)
		data := payload(fmt.Sprint(i), 0, 1+r.IntN(300<<10))
		if err := src.WriteAt(ctx, data, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], data)
	}
	check := func(name string) {
		t.Helper()
		v, err := volume.OpenSnap(ctx, p, name, "")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, v.Size)
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("volume %s differs from what was written", name)
		}
	}
	check("src")
	file := filepath.Join(t.TempDir(), "src.cvol")
	if out, err := c.cli(nil, "volume", "export", "default/src", file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.cli(nil, "volume", "import", file, "default/copy"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	check("copy")
	fi, _ := os.Stat(file)
	t.Logf("a 64 MiB volume with scattered writes exports to %d bytes", fi.Size())
	if fi.Size() > 10<<20 {
		t.Errorf("the stream (%d bytes) should hold only the written parts", fi.Size())
	}
	// Through a pipe.
	pipe := exec.Command("bash", "-c", fmt.Sprintf("%[1]s --conf %[2]s volume export default/src - | %[1]s --conf %[2]s volume import - default/piped", cairnBin, c.conf))
	if out, err := pipe.CombinedOutput(); err != nil {
		t.Fatalf("export | import: %v\n%s", err, out)
	}
	check("piped")

	// A damaged stream is refused and nothing is left behind.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, damage := range []func([]byte) []byte{
		func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		func(b []byte) []byte { return b[:len(b)-100] },
	} {
		bad := filepath.Join(t.TempDir(), "bad.cvol")
		os.WriteFile(bad, damage(append([]byte(nil), b...)), 0o644)
		name := fmt.Sprintf("default/bad%d", i)
		out, err := c.cli(nil, "volume", "import", bad, name)
		if err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("import of a damaged stream: want an error saying so, got %v\n%s", err, out)
		}
		if _, err := c.cli(nil, "volume", "info", name); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("a refused import left %s behind: %v", name, err)
		}
	}
	out, err := c.cli(nil, "volume", "ls", "default")
	if err != nil || strings.Contains(string(out), "bad") || !strings.Contains(string(out), "piped") {
		t.Fatalf("volume ls after the imports: %v\n%s", err, out)
	}
}

// TestVolumeResizeAndRemove: growing keeps the data, shrinking drops what
// lies past the new end (it reads as zeros after growing again), and rm
// deletes every data object.
func TestVolumeResizeAndRemove(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	if out, err := c.cli(nil, "volume", "create", "default/r", "--size", "8M", "--object-size", "1M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p := c.pool("default")
	v, err := volume.Open(ctx, p, "r")
	if err != nil {
		t.Fatal(err)
	}
	all := payload("r", 0, 8<<20)
	if err := v.WriteAt(ctx, all, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.WriteAt(ctx, []byte("x"), 8<<20); err == nil {
		t.Fatal("a write past the end succeeded")
	}
	v.Close() // a shrink is refused while a writer has the volume open
	for _, step := range []struct {
		size string
		want []byte
	}{
		{"16M", append(append([]byte(nil), all...), make([]byte, 8<<20)...)},
		{"2560K", all[:2560<<10]}, // mid-object: the tail of object 2 goes
		{"8M", append(append([]byte(nil), all[:2560<<10]...), make([]byte, 8<<20-2560<<10)...)},
	} {
		if out, err := c.cli(nil, "volume", "resize", "default/r", "--size", step.size); err != nil {
			t.Fatalf("resize to %s: %v\n%s", step.size, err, out)
		}
		v, err := volume.OpenSnap(ctx, p, "r", "")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, v.Size)
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, step.want) {
			t.Fatalf("after resizing to %s the volume does not read back as expected", step.size)
		}
	}
	if _, err := c.cli(nil, "volume", "resize", "default/r", "--size", "0"); err == nil {
		t.Fatal("resize to 0 was accepted")
	}
	if out, err := c.cli(nil, "volume", "rm", "default/r"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var left []string
	if err := p.List(ctx, func(name string) error {
		if strings.HasPrefix(name, "vol.") || name == "volume.r" {
			left = append(left, name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("volume rm left %d objects behind: %v", len(left), left)
	}
	if _, err := c.cli(nil, "volume", "info", "default/r"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("info after rm: %v", err)
	}
}

// TestConcurrentWritesToOneObject: writes racing to the same data objects
// queue behind each other and go out merged (adjacent ones) or in order
// (with gaps between them); every one lands where it was written, and
// later, non-racing, overwrites win.
func TestConcurrentWritesToOneObject(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	if out, err := c.cli(nil, "volume", "create", "default/q", "--size", "8M", "--object-size", "4M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v, err := volume.Open(ctx, c.pool("default"), "q")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	want := make([]byte, 8<<20)
	const chunk = 32 << 10
	var writes []uint64
	for off := uint64(0); off < 4<<20; off += chunk {
		writes = append(writes, off) // object 0: every chunk, adjacent
	}
	for off := uint64(4 << 20); off < 8<<20; off += 3 * chunk {
		writes = append(writes, off) // object 1: gaps between them
	}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, len(writes))
		for i, off := range writes {
			data := payload(fmt.Sprintf("q%d-%d", round, i), round, chunk)
			copy(want[off:], data)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := v.WriteAt(ctx, data, off); err != nil {
					errs <- fmt.Errorf("write at %d: %w", off, err)
				}
			}()
		}
		wg.Wait()
		mustHold(t, ctx, v, want, errs, fmt.Sprintf("round %d", round))
	}
}

// mustHold fails the test with the first error in errs (closing it), or if
// v does not read back as want, naming the first byte that differs.
func mustHold(t *testing.T, ctx context.Context, v *volume.Volume, want []byte, errs chan error, what string) {
	t.Helper()
	close(errs)
	for err := range errs {
		t.Fatalf("%s: %v", what, err)
	}
	got := make([]byte, len(want))
	if err := v.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: the volume differs from what was written first at byte %d", what, i)
			}
		}
	}
}

// TestWritesRideOutALostSnapGroupRegistration: when a volume's writer
// loses its snapshot-group lease (revoked in etcd here), it pauses writes
// while it registers again; writes in that window wait and succeed rather
// than fail, and land.
func TestWritesRideOutALostSnapGroupRegistration(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	ctx := context.Background()
	if out, err := c.cli(nil, "volume", "create", "default/lease", "--size", "16M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	v, err := volume.Open(ctx, c.pool("default"), "lease")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	ec := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second}
	if auth := meta.AuthFor(cfg); auth != nil {
		ec.Username, ec.Password = auth.User, auth.Password
	}
	etcd, err := clientv3.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	const writerKeys = "/cairn/snapwriter/"
	leases := func() map[int64]bool {
		resp, err := etcd.Get(ctx, writerKeys, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		m := map[int64]bool{}
		for _, kv := range resp.Kvs {
			m[kv.Lease] = true
		}
		return m
	}
	old := leases()
	if len(old) == 0 {
		t.Fatal("the open volume has no snapshot-group registration in etcd")
	}

	// Four writers keep writing while the lease goes and comes back.
	want := make([]byte, 16<<20)
	var mu sync.Mutex
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				off := uint64(w)*4<<20 + uint64(i%1024)*4096
				data := payload("lease", w*100000+i, 4096)
				if err := v.WriteAt(ctx, data, off); err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
				mu.Lock()
				copy(want[off:], data)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	for id := range old {
		if _, err := etcd.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		now := leases()
		back := len(now) > 0
		for id := range now {
			back = back && !old[id]
		}
		if back {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not register again under a new lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	mustHold(t, ctx, v, want, errs, "after the lease was revoked")
}
