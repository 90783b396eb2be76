package conf

// TLS for etcd. A cluster whose etcd endpoints are https:// encrypts its
// etcd traffic too, with certificates of a certificate authority derived
// from the cluster key: every holder of cairn.conf computes the same CA
// (an Ed25519 key from the key, a certificate with fixed fields; Ed25519
// signatures are deterministic), trusts it, and a mon has it sign a
// serving certificate for its addresses when it starts. There are no
// certificate files to hand out or renew; whoever lacks the key can
// neither pose as a mon nor read the traffic.

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"
)

// EtcdTLS reports whether the etcd endpoints are https.
func (c *Config) EtcdTLS() bool {
	for _, e := range c.EtcdEndpoints {
		if strings.HasPrefix(e, "https://") {
			return true
		}
	}
	return false
}

// etcdCA derives the cluster's etcd certificate authority from the key.
func (c *Config) etcdCA() (*x509.Certificate, ed25519.PrivateKey, error) {
	m := hmac.New(sha256.New, c.ClusterKey)
	m.Write([]byte("cairn etcd certificate authority"))
	priv := ed25519.NewKeyFromSeed(m.Sum(nil))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cairn etcd CA " + c.FSID},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2120, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, priv.Public(), priv)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, priv, err
}

// EtcdClientTLS is the TLS configuration of an etcd client of this
// cluster: it trusts the cluster's etcd CA only.
func (c *Config) EtcdClientTLS() (*tls.Config, error) {
	ca, _, err := c.etcdCA()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// EtcdServerCert returns, in PEM, a fresh certificate and key for a mon
// reachable at the hosts of urls (for serving clients and, as a client
// certificate, its peers), and the CA certificate that signed it.
func (c *Config) EtcdServerCert(urls ...string) (certPEM, keyPEM, caPEM []byte, err error) {
	ca, caKey, err := c.etcdCA()
	if err != nil {
		return nil, nil, nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "cairn mon"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Hostname() == "" {
			return nil, nil, nil, fmt.Errorf("etcd certificate: url %q has no host", u)
		}
		if ip := net.ParseIP(p.Hostname()); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, p.Hostname())
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("etcd certificate: %w", err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), nil
}
