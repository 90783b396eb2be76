package devcluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// The pair cairn dev --tls makes verifies against its CA for the
// gateway's addresses, and a later start keeps it.
func TestS3TLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key, err := s3TLSFiles(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(ca)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the CA file")
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if fi, _ := os.Stat(key); fi.Mode().Perm() != 0o600 {
		t.Errorf("the key has mode %v", fi.Mode().Perm())
	}
	before, _ := os.ReadFile(cert)
	if _, _, _, err := s3TLSFiles(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(cert); !bytes.Equal(before, after) {
		t.Error("a second start made a new certificate")
	}
	os.WriteFile(key, []byte("garbage"), 0o600)
	if _, _, _, err := s3TLSFiles(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		t.Errorf("a broken key was not replaced: %v", err)
	}
}
