package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// TestEncryptedClusterTraffic: with cairn dev --tls, objects and the map
// cross the network encrypted. A packet capture of the loopback
// interface while a client writes and reads an object and creates a pool
// finds neither the object's bytes nor its name nor the pool's name; the
// same capture does see a marker sent in plaintext, so it would have seen
// them. A peer that speaks plaintext, even with the cluster key, is
// refused by the OSDs, and etcd answers no plaintext request.
func TestEncryptedClusterTraffic(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		if os.Getenv("CAIRN_REQUIRE_TOOLS") != "" {
			t.Fatal("tcpdump is not installed (apt-get install tcpdump)")
		}
		t.Skip("tcpdump is not installed (apt-get install tcpdump)")
	}
	// Over TCP, so the traffic crosses the captured loopback interface.
	c := startCluster(t, clusterOpts{tls: true, tcpOnly: true})
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Encrypt || !strings.HasPrefix(cfg.EtcdEndpoints[0], "https://") {
		t.Fatalf("cairn dev --tls wrote encrypt=%v, etcd %v", cfg.Encrypt, cfg.EtcdEndpoints)
	}
	osd := c.procs["osd.0"]

	pcap := filepath.Join(t.TempDir(), "lo.pcap")
	// Only this cluster's ports (its OSDs and etcd): other tests' traffic
	// on the loopback, at full speed, made the capture drop packets.
	filter := fmt.Sprintf("tcp portrange %d-%d or tcp portrange %d-%d", c.osdPort, c.osdPort+c.hosts*c.perHost-1, c.etcdPort, c.etcdPort+1)
	capture := exec.Command(tcpdump, "-i", "lo", "-U", "-s", "0", "-B", "16384", "-w", pcap, filter)
	stderr, err := capture.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { capture.Process.Kill(); capture.Wait() }) // on a failure before the capture is stopped
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				listening <- true
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump is not listening after 10 s")
	}

	secret := bytes.Repeat([]byte("PAYLOAD-OF-TENANT-ZED "), 3000)
	ctx := context.Background()
	p := c.pool("default")
	if err := p.Put(ctx, "OBJECT-NAME-OF-ZED", secret); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Get(ctx, "OBJECT-NAME-OF-ZED"); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := c.cli(nil, "pool", "create", "POOLNAMEOFZED", "--size", "2", "--min-size", "1", "--pg-num", "8"); err != nil {
		t.Fatal(err)
	}
	// The control: a plaintext marker to the OSD's port, which the capture
	// must show. The OSD refuses the connection (it is not TLS).
	if nc, err := net.Dial("tcp", osd.Addr); err == nil {
		nc.Write([]byte("PLAINTEXT-CONTROL-MARKER"))
		time.Sleep(200 * time.Millisecond)
		nc.Close()
	}
	// -U: tcpdump writes each packet as it comes; wait for the marker's.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(pcap); bytes.Contains(b, []byte("PLAINTEXT-CONTROL-MARKER")) {
			break
		}
	}
	capture.Process.Signal(syscall.SIGINT)
	capture.Wait()
	b, err := os.ReadFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("PLAINTEXT-CONTROL-MARKER")) {
		t.Fatalf("the capture (%d bytes) misses the plaintext control marker: it sees nothing", len(b))
	}
	// The object went to its primary, from there to two more copies, and
	// back: at least four times its size crossed the loopback.
	if n := c.localConns(); n != 0 || len(b) < 4*len(secret) {
		t.Fatalf("the capture holds %d bytes for an object of %d, with %d connections on local sockets: the traffic did not cross the loopback", len(b), len(secret), n)
	}
	for _, s := range []string{"PAYLOAD-OF-TENANT-ZED", "OBJECT-NAME-OF-ZED", "POOLNAMEOFZED"} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("%q is readable in the capture of the loopback interface", s)
		}
	}
	t.Logf("captured %d bytes of loopback traffic; none of the object's bytes, its name or the pool's name readable", len(b))

	// A plaintext peer with the right key is refused by the OSD.
	dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	_, err = rpc.Dial(dctx, osd.Addr, cfg.ClusterKey)
	cancel()
	if err == nil {
		t.Fatal("an OSD of an encrypted cluster admitted a plaintext peer")
	}
	// etcd serves https only.
	etcd := strings.Replace(cfg.EtcdEndpoints[0], "https://", "http://", 1)
	if resp, err := http.Get(etcd + "/version"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("etcd answered plaintext HTTP at %s", etcd)
		}
	}
	if out, err := c.cli(nil, "status"); err != nil || !strings.Contains(string(out), "https://") {
		t.Fatalf("status over https etcd: %v\n%s", err, out)
	}
}
