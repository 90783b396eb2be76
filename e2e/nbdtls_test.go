package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// writeTLSDir writes a CA and a server certificate for 127.0.0.1 signed by
// it, named as libnbd and QEMU expect (ca-cert.pem, server-cert.pem,
// server-key.pem).
func writeTLSDir(t *testing.T, dir string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, srvKey := newKey(), newKey()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cairn test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca-cert.pem", "CERTIFICATE", caDER)
	write("server-cert.pem", "CERTIFICATE", srvDER)
	write("server-key.pem", "PRIVATE KEY", keyDER)
}

// TestNBDOverTLS: `cairn nbd --tls-cert --tls-key` serves libnbd's clients
// over TLS (nbds://, the certificate checked against a CA), and refuses a
// client that does not start TLS.
func TestNBDOverTLS(t *testing.T) {
	t.Parallel()
	needTools(t, "nbdinfo", "nbdcopy")
	c := startCluster(t, clusterOpts{hosts: 3, perHost: 1})
	if out, err := c.cli(nil, "volume", "create", "default/sec", "--size", "32M"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dir := t.TempDir()
	writeTLSDir(t, dir)
	port := freePorts(t, 1)
	srv := exec.Command(cairnBin, "--conf", c.conf, "nbd", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--tls-cert", filepath.Join(dir, "server-cert.pem"), "--tls-key", filepath.Join(dir, "server-key.pem"))
	var log bytes.Buffer
	srv.Stdout, srv.Stderr = &log, &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for i := 0; ; i++ {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			conn.Close()
			break
		}
		if i > 100 {
			t.Fatalf("cairn nbd --tls-cert did not listen:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	uri := fmt.Sprintf("nbds://127.0.0.1:%d/default/sec?tls-certificates=%s", port, dir)
	var info struct {
		Exports []struct {
			Size int64 `json:"export-size"`
		} `json:"exports"`
	}
	if err := json.Unmarshal([]byte(runTool(t, "nbdinfo", "--json", uri)), &info); err != nil || len(info.Exports) != 1 || info.Exports[0].Size != 32<<20 {
		t.Fatalf("nbdinfo over TLS: %+v, %v", info, err)
	}
	if out, err := exec.Command("nbdinfo", fmt.Sprintf("nbd://127.0.0.1:%d/default/sec", port)).CombinedOutput(); err == nil {
		t.Fatalf("a client without TLS was served:\n%s", out)
	}
	img := make([]byte, 8<<20)
	rand.Read(img)
	in, out := filepath.Join(t.TempDir(), "in.img"), filepath.Join(t.TempDir(), "out.img")
	os.WriteFile(in, img, 0o644)
	runTool(t, "nbdcopy", in, uri)
	runTool(t, "nbdcopy", uri, out)
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got[:len(img)], img) {
		t.Fatal("data copied over TLS came back different")
	}
}
