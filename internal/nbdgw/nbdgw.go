package nbdgw

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/nbd"
	"github.com/cairn-storage/cairn/internal/volume"
)

// TLSConfig builds the NBD server's TLS configuration from PEM files (nil:
// no TLS): the certificate (chain) and its key, and, when clientCA is
// given, the CAs whose client certificates it requires. Its errors name
// cairn nbd's flags (--tls-cert, --tls-key, --tls-client-ca).
func TLSConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCA != "" {
			return nil, fmt.Errorf("nbd: --tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("nbd: TLS needs both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("nbd: loading the TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("nbd: --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nbd: --tls-client-ca %s holds no PEM certificate", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

var (
	_ nbd.Exports = Exports{}
	_ nbd.Device  = device{}
)

// Exports serves cairn volumes as NBD exports named POOL/NAME, and their
// snapshots, read-only, as POOL/NAME@SNAP.
type Exports struct {
	c    *client.Client
	logf func(format string, args ...any)
	// Metrics, if set, counts each export's commands.
	Metrics *Metrics
}

// NewExports serves the volumes of every pool of c; the volumes it opens
// log through logf.
func NewExports(c *client.Client, logf func(format string, args ...any)) Exports {
	return Exports{c: c, logf: logf}
}

// Open opens the volume or snapshot an export name refers to; a name that
// refers to none is nbd.ErrUnknownExport.
func (e Exports) Open(ctx context.Context, export string) (nbd.Device, error) {
	ref, err := volume.ParseRef(export)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", nbd.ErrUnknownExport, err)
	}
	p, err := e.c.Pool(ref.Pool)
	if errors.Is(err, client.ErrPoolNotFound) {
		return nil, fmt.Errorf("%w: pool %q does not exist", nbd.ErrUnknownExport, ref.Pool)
	}
	if err != nil {
		return nil, err
	}
	var v *volume.Volume
	if ref.Snap != "" {
		v, err = volume.OpenSnap(ctx, p, ref.Name, ref.Snap) // read-only
	} else {
		v, err = volume.Open(ctx, p, ref.Name, volume.WithLog(e.logf))
	}
	if errors.Is(err, volume.ErrNotFound) || errors.Is(err, volume.ErrSnapNotFound) {
		return nil, fmt.Errorf("%w: %v", nbd.ErrUnknownExport, err)
	}
	if err != nil {
		return nil, err
	}
	if e.Metrics != nil {
		return e.Metrics.wrap(device{v}, export), nil
	}
	return device{v}, nil
}

// List names every volume and snapshot of every pool, sorted.
func (e Exports) List(ctx context.Context) ([]string, error) {
	var out []string
	for _, pi := range e.c.Pools() {
		p, err := e.c.Pool(pi.Name)
		if err != nil {
			continue
		}
		vols, err := volume.List(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			out = append(out, pi.Name+"/"+v.Name)
			for _, s := range v.Snaps {
				out = append(out, pi.Name+"/"+v.Name+"@"+s.Name)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// device adapts a volume to nbd.Device.
type device struct{ v *volume.Volume }

// Size follows resizes: IO past a shrunk end fails at once.
func (d device) Size() uint64   { return d.v.CurrentSize() }
func (d device) ReadOnly() bool { return d.v.ReadOnly() }
func (d device) Close() error   { return d.v.Close() }

// Flush has nothing to do: every write was durable on every copy before it
// was acknowledged.
func (d device) Flush(context.Context) error { return nil }

func (d device) Read(ctx context.Context, off uint64, length uint32) ([]nbd.Chunk, error) {
	ext, err := d.v.Read(ctx, off, uint64(length))
	if err != nil {
		return nil, nbdErr(err)
	}
	out := make([]nbd.Chunk, len(ext))
	for i, e := range ext {
		out[i] = nbd.Chunk{Data: e.Data, Hole: uint32(e.Hole), Release: e.Release}
	}
	return out, nil
}

// Extents answers NBD block status from the volume's object map.
func (d device) Extents(ctx context.Context, off uint64, length uint32) ([]nbd.Extent, error) {
	runs, err := d.v.Map(ctx, off, uint64(length))
	if err != nil {
		return nil, nbdErr(err)
	}
	out := make([]nbd.Extent, len(runs))
	for i, r := range runs {
		out[i] = nbd.Extent{Length: uint32(r.Length), Hole: r.Hole}
	}
	return out, nil
}

func (d device) Write(ctx context.Context, off uint64, data []byte) error {
	return nbdErr(d.v.WriteAt(ctx, data, off))
}

func (d device) Zero(ctx context.Context, off uint64, length uint32, punch bool) error {
	return nbdErr(d.v.Zero(ctx, off, uint64(length), punch))
}

func (d device) Trim(ctx context.Context, off uint64, length uint32) error {
	return nbdErr(d.v.Trim(ctx, off, uint64(length)))
}

// nbdErr makes a volume's error one the NBD server answers as the protocol
// says: a full cluster is ENOSPC.
func nbdErr(err error) error {
	if errors.Is(err, client.ErrNoSpace) {
		return fmt.Errorf("%w: %v", nbd.ErrNoSpace, err)
	}
	return err
}
