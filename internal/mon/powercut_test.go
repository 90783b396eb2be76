package mon

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/powercut"
)

// TestPowerCutMonChild runs a mon for TestMonKeepsMapAfterPowerCut: it
// stores a map (or reads the one there) and says so, then waits to be
// killed.
func TestPowerCutMonChild(t *testing.T) {
	dir := os.Getenv("MON_POWERCUT_DIR")
	if dir == "" {
		t.Skip("run by TestMonKeepsMapAfterPowerCut")
	}
	port := os.Getenv("MON_POWERCUT_PORT")
	var p int
	fmt.Sscan(port, &p)
	o := Options{Name: "a", DataDir: dir, Logf: func(string, ...any) {},
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", p), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", p+1)}
	ctx := context.Background()
	ready := make(chan struct{})
	go func() {
		if err := Run(ctx, o, func() { close(ready) }); err != nil {
			fmt.Println("run:", err)
			os.Exit(1)
		}
	}()
	// Only this mon's etcd: another process may listen on the port when
	// this one cannot.
	<-ready
	var st *meta.Store
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if st, err = meta.Connect(ctx, []string{o.ClientURL}, nil); err == nil {
			break
		} else if time.Now().After(deadline) {
			fmt.Println("connect:", err)
			os.Exit(1)
		}
	}
	if fsid := os.Getenv("MON_POWERCUT_FSID"); fsid != "" {
		if _, err := st.Init(ctx, fsid); err != nil {
			fmt.Println("init:", err)
			os.Exit(1)
		}
		fmt.Println("acked")
	} else {
		m, _, err := st.Map(ctx)
		if err != nil {
			fmt.Println("map:", err)
			os.Exit(1)
		}
		fmt.Println("map of", m.FSID)
	}
	select {}
}

// A mon that stored the map keeps it through a power cut, even one soon
// after its data directory was created: etcd syncs the files and
// directories it makes inside, but not the data directory's own name, so
// the mon syncs that (a filesystem that does not write new names with the
// next fsync, as ext4's journal happens to, lost every map), also where
// the data directory is a symbolic link (as in a dev cluster).
func TestMonKeepsMapAfterPowerCut(t *testing.T) {
	for _, link := range []bool{false, true} {
		t.Run(fmt.Sprint("link=", link), func(t *testing.T) { monKeepsMapAfterPowerCut(t, link) })
	}
}

func monKeepsMapAfterPowerCut(t *testing.T, link bool) {
	f := powercut.ForTest(t, filepath.Join(t.TempDir(), "disk"), powercut.Options{})
	port := twoFreePorts(t)
	// The data directory: new, in a durable one; or a link to the root
	// of the mount.
	dataDir := func() string { return filepath.Join(f.Dir(), "var", "mon") }
	if link {
		l := filepath.Join(t.TempDir(), "mon")
		dataDir = func() string {
			os.Remove(l)
			if err := os.Symlink(f.Dir(), l); err != nil {
				t.Fatal(err)
			}
			return l
		}
	} else {
		if err := os.Mkdir(filepath.Join(f.Dir(), "var"), 0o755); err != nil {
			t.Fatal(err)
		}
		syncTestDir(t, f.Dir())
	}
	run := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPowerCutMonChild$")
		cmd.Env = append(os.Environ(), append(env, "MON_POWERCUT_DIR="+dataDir(),
			fmt.Sprint("MON_POWERCUT_PORT=", port))...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var line string
		for sc.Scan() {
			if line = sc.Text(); !strings.HasPrefix(line, "=== RUN") {
				break
			}
		}
		f.Cut()
		cmd.Process.Kill()
		cmd.Wait()
		if err := f.Remount(); err != nil {
			t.Fatal(err)
		}
		return line
	}
	if got := run("MON_POWERCUT_FSID=c1"); got != "acked" {
		t.Fatalf("the mon did not store the map: %s", got)
	}
	if got := run(); got != "map of c1" {
		t.Fatalf("after a power cut the mon answers %q, want the map it stored", got)
	}
}

// twoFreePorts finds a free port p, with p+1 free too, below the kernel's
// ephemeral range: a port from that range, free when checked, can become
// the local end of another process's connection, or another test's
// listener, before the mon listens on it (which made this test read
// another etcd).
func twoFreePorts(t *testing.T) int {
	for try := 0; try < 100; try++ {
		p := 2000 + rand.IntN(7000)
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		a.Close()
		if err == nil {
			b.Close()
			return p
		}
	}
	t.Fatal("no two free ports")
	return 0
}

func syncTestDir(t *testing.T, dir string) {
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}
