package conf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	c := New([]string{"http://127.0.0.1:2379", "http://[::1]:2379"})
	c.Encrypt, c.EtcdAuth, c.NoLocalSockets = true, true, true
	p := filepath.Join(t.TempDir(), "cairn.conf")
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 600", fi.Mode().Perm())
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.FSID != c.FSID || !bytes.Equal(got.ClusterKey, c.ClusterKey) || strings.Join(got.EtcdEndpoints, ",") != strings.Join(c.EtcdEndpoints, ",") ||
		!got.Encrypt || !got.EtcdAuth || !got.NoLocalSockets {
		t.Fatalf("round trip changed config: %+v vs %+v", got, c)
	}
}

func TestLoadRefusesReadableByOthers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cairn.conf")
	if err := New([]string{"http://127.0.0.1:2379"}).Save(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("want a refusal naming chmod 600, got %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"fsid = x\n", "etcd_endpoints is missing"},
		{"fsid = x\netcd_endpoints = a\ncluster_key = zz\n", "not hex"},
		{"fsid = x\netcd_endpoints = a\ncluster_key = 00\n", "at least 16"},
		{"bogus\n", "want key = value"},
		{"color = blue\n", "unknown key"},
		{"encrypt = yes\n", "encrypt must be true or false"},
		{"etcd_auth = 1\n", "etcd_auth must be true or false"},
		{"local_sockets = off\n", "local_sockets must be true or false"},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("fsid = a\netcd_endpoints = http://x:1\ncluster_key = 00112233445566778899aabbccddeeff\n"))
	f.Add([]byte("# c\n\n=\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if c.FSID == "" || len(c.EtcdEndpoints) == 0 || len(c.ClusterKey) < 16 {
			t.Fatalf("Parse accepted an incomplete config: %+v", c)
		}
	})
}

// TestEtcdCertificates: every holder of the key derives the same CA, a
// mon's certificate verifies against it for its addresses, and a cluster
// with another key does not trust it.
func TestEtcdCertificates(t *testing.T) {
	c := New([]string{"https://127.0.0.1:2379"})
	certPEM, keyPEM, caPEM, err := c.EtcdServerCert("https://127.0.0.1:2379", "https://[::1]:2380", "https://mon-a.example:2380")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	_, _, caPEM2, _ := c.EtcdServerCert("https://127.0.0.1:2379")
	if !bytes.Equal(caPEM, caPEM2) {
		t.Fatal("the derived CA differs between calls")
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.EtcdClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "::1", "mon-a.example"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, DNSName: "127.0.0.2"}); err == nil {
		t.Error("the certificate verifies for an address it was not made for")
	}
	other, _ := New([]string{"https://127.0.0.1:2379"}).EtcdClientTLS()
	if _, err := cert.Verify(x509.VerifyOptions{Roots: other.RootCAs}); err == nil {
		t.Error("another cluster's CA trusts this cluster's mon")
	}
}
