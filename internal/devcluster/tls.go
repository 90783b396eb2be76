package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The dev cluster's S3 gateway over TLS (cairn dev --tls): a CA made for
// this directory alone signs a certificate for the loopback addresses and
// localhost. Clients trust DIR/s3-ca.pem; the CA's key is never written,
// so nothing else can be signed by it. A later start reuses the pair while
// it is valid for more than a day.
const (
	tlsCAFile   = "s3-ca.pem"
	tlsCertFile = "s3-cert.pem"
	tlsKeyFile  = "s3-key.pem"
	tlsValidity = 365 * 24 * time.Hour
)

// s3TLSFiles returns the paths of the CA, the certificate and its key in
// dir, making them unless a usable pair for host is already there.
func s3TLSFiles(dir, host string) (ca, cert, key string, err error) {
	ca, cert, key = filepath.Join(dir, tlsCAFile), filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile)
	if usableTLSPair(cert, key, host) {
		return ca, cert, key, nil
	}
	return ca, cert, key, writeTLSPair(ca, cert, key)
}

// usableTLSPair reports whether cert and key load as a pair whose
// certificate names host and stays valid for at least a day.
func usableTLSPair(cert, key, host string) bool {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil || pair.Leaf == nil {
		return false
	}
	return pair.Leaf.VerifyHostname(host) == nil && time.Until(pair.Leaf.NotAfter) > 24*time.Hour
}

// writeTLSPair makes a CA and a server certificate for 127.0.0.1, ::1
// and localhost signed by it, and writes the CA's certificate to ca
// and the server's certificate and key to cert and key.
func writeTLSPair(ca, cert, key string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
		return n
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "cairn dev CA " + now.UTC().Format(time.DateTime)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(tlsValidity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	// The gateway listens on the first host's loopback address.
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	srvTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "cairn dev S3 gateway"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(tlsValidity), DNSNames: []string{"localhost"}, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{
		{key, "PRIVATE KEY", keyDER, 0o600},
		{cert, "CERTIFICATE", srvDER, 0o644},
		{ca, "CERTIFICATE", caDER, 0o644},
	} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			return fmt.Errorf("dev: writing %s: %w", f.path, err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			return err
		}
	}
	return nil
}
