package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/meta"
)

// S3Info is the content of DIR/s3.json (mode 0600): how to reach the dev
// cluster's S3 gateway as user admin.
type S3Info struct {
	Endpoint  string `json:"endpoint"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	// CAFile is the CA that signed the gateway's certificate, with
	// --tls (the endpoint is then https://).
	CAFile string `json:"ca_file,omitempty"`
}

// s3Pool is the pool the dev cluster's gateway keeps buckets in; s3PGs its
// placement groups (few: a gateway's index and data need no more here).
const (
	s3Pool = "s3"
	s3PGs  = 16
	s3User = "admin"
)

// startS3 makes sure the pool s3 and the user admin with a key exist
// (writing DIR/s3.json at the first start, reusing it later while its key
// still exists), and starts the gateway on o.S3Port, over TLS with
// o.TLS.
func (c *Cluster) startS3(ctx context.Context, o Options, cfg *conf.Config, ms *meta.Store, cl *client.Client) error {
	if err := ensurePool(ctx, cl, client.PoolSpec{Name: s3Pool, Size: min(3, o.Hosts), PGNum: s3PGs, FailureDomain: clustermap.DomainHost}); err != nil {
		return err
	}
	addr := net.JoinHostPort(strings.Trim(o.Loopback(0), "[]"), strconv.Itoa(o.S3Port))
	args := []string{"s3", "--conf", c.Conf, "--listen", addr, "--pool", s3Pool}
	if o.S3DataPool != "" {
		spec, err := o.s3DataSpec()
		if err != nil {
			return err
		}
		if err := ensurePool(ctx, cl, spec); err != nil {
			return err
		}
		args = append(args, "--data-pool", o.S3DataPool)
	}
	endpoint, caFile := "http://"+addr, ""
	if o.TLS {
		ca, cert, key, err := s3TLSFiles(c.Dir, strings.Trim(o.Loopback(0), "[]"))
		if err != nil {
			return err
		}
		args = append(args, "--tls-cert", cert, "--tls-key", key)
		endpoint, caFile = "https://"+addr, ca
	}
	info, err := s3Credentials(ctx, ms, filepath.Join(c.Dir, "s3.json"), endpoint, caFile)
	if err != nil {
		return err
	}
	if o.S3GCGrace > 0 {
		args = append(args, "--gc-grace", o.S3GCGrace.String())
	}
	if o.S3IntentTimeout > 0 {
		args = append(args, "--intent-timeout", o.S3IntentTimeout.String())
	}
	if o.S3IndexShardKeys > 0 {
		args = append(args, "--index-shard-keys", strconv.Itoa(o.S3IndexShardKeys))
	}
	metrics := o.metricsAddr(o.Loopback(0), o.Hosts*o.OSDsPerHost+2)
	if metrics != "" {
		args = append(args, "--metrics-listen", metrics)
	}
	if err := c.sup.start("s3", addr, "", args); err != nil {
		return err
	}
	if err := c.sup.setMetrics("s3", metrics); err != nil {
		return err
	}
	if err := waitListening(ctx, addr, "the S3 gateway (log in "+c.Dir+"/s3.log)"); err != nil {
		return err
	}
	c.S3 = &info
	return nil
}

// ensurePool creates the pool of spec for the S3 gateway unless it exists.
func ensurePool(ctx context.Context, cl *client.Client, spec client.PoolSpec) error {
	_, err := cl.Pool(spec.Name)
	if !errors.Is(err, client.ErrPoolNotFound) {
		return err
	}
	if _, err := cl.CreatePool(ctx, spec); err != nil {
		return fmt.Errorf("dev: creating pool %s for the S3 gateway: %w", spec.Name, err)
	}
	return nil
}

// s3DataUnit is the stripe unit of an erasure-coded S3 data pool: chunks
// this large reach a GET's client as the positions sent them, without a
// copy (client.MinPiece), at the price of up to M chunks of parity for an
// object smaller than a stripe (where 16 KiB chunks spread it over all K).
const s3DataUnit = 256 << 10

// s3DataSpec is the S3 gateway's data pool: like s3, or erasure-coded
// with one shard per host where there are hosts enough, else one per OSD
// (shards then share hosts, so a host lost may take more than M of them:
// fine for a dev cluster, which is one machine anyway).
func (o Options) s3DataSpec() (client.PoolSpec, error) {
	spec := client.PoolSpec{Name: o.S3DataPool, Size: min(3, o.Hosts), PGNum: s3PGs, FailureDomain: clustermap.DomainHost}
	if o.S3DataEC == "" {
		return spec, nil
	}
	e, err := clustermap.ParseECProfile(o.S3DataEC, 0)
	if err != nil {
		return spec, fmt.Errorf("dev: the S3 data pool's erasure code: %w", err)
	}
	spec.Size, spec.EC, spec.StripeUnit = 0, o.S3DataEC, s3DataUnit
	if o.Hosts < e.K+e.M {
		spec.FailureDomain = clustermap.DomainOSD
	}
	return spec, nil
}

// s3Credentials returns admin's key from path if it still exists, or
// creates the user (if missing) and a new key, and writes path.
func s3Credentials(ctx context.Context, ms *meta.Store, path, endpoint, caFile string) (S3Info, error) {
	var info S3Info
	if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &info) == nil && info.AccessKey != "" {
		keys, err := ms.S3Keys(ctx, s3User)
		if err == nil {
			for _, k := range keys {
				if k.AccessKey == info.AccessKey {
					info.Endpoint, info.CAFile = endpoint, caFile
					return info, writeS3Info(path, info)
				}
			}
		}
	}
	if _, err := ms.CreateS3User(ctx, s3User); err != nil && !errors.Is(err, meta.ErrS3UserExists) {
		return info, fmt.Errorf("dev: creating S3 user %s: %w", s3User, err)
	}
	key, secret, err := ms.CreateS3Key(ctx, s3User)
	if err != nil {
		return info, fmt.Errorf("dev: creating an access key for S3 user %s: %w", s3User, err)
	}
	info = S3Info{Endpoint: endpoint, AccessKey: key.AccessKey, SecretKey: secret, CAFile: caFile}
	return info, writeS3Info(path, info)
}

func writeS3Info(path string, info S3Info) error {
	b, _ := json.MarshalIndent(info, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
