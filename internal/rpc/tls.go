package rpc

// Encrypted connections: with encryption on, every connection is TLS 1.3
// first, and the cluster-key handshake runs inside it, bound to the TLS
// session (each proof also covers keying material exported from the
// session, RFC 8446 §7.5). The peers are authenticated by the cluster
// key, as on plaintext connections, so no certificate authority is
// needed: each server makes a throwaway self-signed certificate when it
// starts, and clients do not check it. A machine in the middle cannot
// relay the handshake, because its two TLS sessions export different
// material, and it cannot answer it without the key.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	// bindingLabel names the keying material the handshake proofs cover.
	bindingLabel = "EXPORTER-cairn-rpc-channel-binding"
	bindingLen   = 32
	// tlsHandshakeRecord is the first byte of a TLS ClientHello.
	tlsHandshakeRecord = 0x16
)

// serverTLS returns the TLS configuration of an encrypting server, with a
// fresh self-signed certificate.
func serverTLS() (*tls.Config, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("rpc: tls key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "cairn daemon"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, fmt.Errorf("rpc: tls certificate: %w", err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: priv}},
	}, nil
}

// clientTLS is an encrypting client's configuration: the server is
// authenticated by the bound cluster-key handshake, not its certificate.
var clientTLS = &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}

// binding returns the keying material both handshake proofs cover.
func binding(c *tls.Conn) ([]byte, error) {
	cs := c.ConnectionState()
	b, err := cs.ExportKeyingMaterial(bindingLabel, nil, bindingLen)
	if err != nil {
		return nil, fmt.Errorf("rpc: tls channel binding: %w", err)
	}
	return b, nil
}

// clientEncrypt runs the client's TLS handshake on nc.
func clientEncrypt(ctx context.Context, nc net.Conn) (*tls.Conn, []byte, error) {
	tc := tls.Client(nc, clientTLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) {
			return nil, nil, errors.New("the server does not encrypt its traffic while this client does: cairn.conf's encrypt setting must be the same on every daemon and client")
		}
		return nil, nil, fmt.Errorf("tls handshake: %w", err)
	}
	b, err := binding(tc)
	return tc, b, err
}

// serverEncrypt runs the server's TLS handshake on nc.
func serverEncrypt(nc net.Conn, cfg *tls.Config) (*tls.Conn, []byte, error) {
	tc := tls.Server(nc, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, nil, fmt.Errorf("tls handshake (the client may not encrypt its traffic): %w", err)
	}
	b, err := binding(tc)
	return tc, b, err
}
