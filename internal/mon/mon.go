// Package mon runs a monitor: one embedded etcd member that holds the cluster
// map, plus a candidate for the keeper that marks OSDs down when their lease
// expires. Three mons on three hosts form a real etcd cluster through the
// initial-cluster options; there is no consensus code of ours.
package mon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Options configure one monitor.
type Options struct {
	Name           string // member name, unique in the etcd cluster
	DataDir        string
	ClientURL      string // e.g. http://127.0.0.1:2379
	PeerURL        string // e.g. http://127.0.0.1:2380
	InitialCluster string // name=peerURL,...; empty: a single-member cluster
	ClusterState   string // "new" or "existing"
	// EtcdPassword, if set, turns on etcd authentication (user root) so
	// that only holders of the cluster key reach the map.
	EtcdPassword string
	// MetricsURL, if set (http://host:port), serves etcd's Prometheus
	// metrics at /metrics there.
	MetricsURL string
	// For https URLs: the mon's certificate and key and the CA that
	// signed them, in PEM (conf.EtcdServerCert), and the TLS
	// configuration its own client connections use (conf.EtcdClientTLS).
	CertPEM, KeyPEM, CAPEM []byte
	ClientTLS              *tls.Config
	Logf                   func(string, ...any)
}

// Run starts etcd and the keeper and blocks until ctx ends, then stops etcd.
// ready, if not nil, is called once etcd serves clients.
func Run(ctx context.Context, o Options, ready func()) error {
	cfg, err := o.etcdConfig()
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("mon: start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("mon: etcd: %w", err)
	case <-ctx.Done():
		return nil
	case <-time.After(60 * time.Second):
		return fmt.Errorf("mon: etcd member %s did not become ready in 60 s (are the other members of %s up?)", o.Name, cfg.InitialCluster)
	}
	if err := syncDirs(o.DataDir); err != nil {
		return fmt.Errorf("mon %s: %w", o.Name, err)
	}
	o.Logf("mon %s: etcd serving clients on %s", o.Name, o.ClientURL)
	var auth *meta.Auth
	if o.EtcdPassword != "" {
		auth = &meta.Auth{User: "root", Password: o.EtcdPassword, TLS: o.ClientTLS} // conf.EtcdUser
		if err := meta.EnableAuth(ctx, o.ClientURL, auth); err != nil {
			return fmt.Errorf("mon %s: %w", o.Name, err)
		}
	} else if o.ClientTLS != nil {
		auth = &meta.Auth{TLS: o.ClientTLS}
	}
	if ready != nil {
		ready()
	}
	st, err := meta.Connect(ctx, []string{o.ClientURL}, auth)
	if err != nil {
		return err
	}
	defer st.Close()
	go st.RunKeeper(ctx, "mon."+o.Name, o.Logf)
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("mon: etcd: %w", err)
	}
}

// syncDirs makes the names of etcd's directories durable: every directory
// under dataDir, dataDir's own name and its parents' (etcd creates the
// missing ones). etcd syncs the files it writes and the directories it
// renames into, never the names of the directories it creates, so after a
// power cut a filesystem that does not persist a new name with the next
// fsync elsewhere (ext4's journal happens to) could lose the whole data
// directory: every map and lease, the cluster gone. Cheap, and done at
// every start, before anything is stored.
func syncDirs(dataDir string) error {
	dir, err := filepath.Abs(dataDir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir) // WalkDir stops at a link
	}
	if err != nil {
		return err
	}
	var dirs []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("sync the names of %s: %w", dir, err)
	}
	dirs = append(dirs, filepath.Dir(dir))
	for _, p := range dirs {
		if err := syncDir(p); err != nil {
			return fmt.Errorf("sync the names of %s: %w", dir, err)
		}
	}
	// Further up, as far as it works: an operator's directories are
	// likely durable already, and some root filesystems refuse fsync.
	for p := filepath.Dir(dir); p != filepath.Dir(p); {
		p = filepath.Dir(p)
		_ = syncDir(p)
	}
	return nil
}

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Members parses "a=http://x:2380,b=..." for error messages and checks.
func Members(initial string) []string {
	var out []string
	for _, m := range strings.Split(initial, ",") {
		if name, _, ok := strings.Cut(strings.TrimSpace(m), "="); ok {
			out = append(out, name)
		}
	}
	return out
}

// setTLS has etcd serve https client and peer URLs with the mon's
// certificate, written beside the data directory (etcd reads files).
// Peers must present a certificate of the same CA; clients need none.
func (o Options) setTLS(cfg *embed.Config, cu, pu *url.URL) error {
	if cu.Scheme != "https" && pu.Scheme != "https" {
		return nil
	}
	if len(o.CertPEM) == 0 || len(o.KeyPEM) == 0 || len(o.CAPEM) == 0 {
		return fmt.Errorf("mon: https URLs need the cluster's cairn.conf (--conf): its key makes the mon's certificate")
	}
	dir := strings.TrimRight(o.DataDir, "/") + ".tls"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mon: %w", err)
	}
	files := map[string][]byte{"mon.crt": o.CertPEM, "mon.key": o.KeyPEM, "ca.crt": o.CAPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return fmt.Errorf("mon: %w", err)
		}
	}
	// Clients prove the cluster key with etcd's password, not a
	// certificate (etcd asks for one from every client if it has a CA).
	info := transport.TLSInfo{CertFile: filepath.Join(dir, "mon.crt"), KeyFile: filepath.Join(dir, "mon.key"), MinVersion: tls.VersionTLS13}
	if cu.Scheme == "https" {
		cfg.ClientTLSInfo = info
	}
	if pu.Scheme == "https" {
		peer := info
		peer.TrustedCAFile, peer.ClientCertAuth = filepath.Join(dir, "ca.crt"), true
		cfg.PeerTLSInfo = peer
	}
	return nil
}

// etcdConfig is the embedded etcd member's configuration.
func (o Options) etcdConfig() (*embed.Config, error) {
	cu, err := url.Parse(o.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("mon: client url %q: %w", o.ClientURL, err)
	}
	pu, err := url.Parse(o.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("mon: peer url %q: %w", o.PeerURL, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.DataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = o.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = o.Name + "=" + o.PeerURL
	}
	cfg.ClusterState = o.ClusterState
	if cfg.ClusterState == "" {
		cfg.ClusterState = embed.ClusterStateFlagNew
	}
	cfg.LogLevel = "error"
	// The map and leases are small; compact history so the db stays small.
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "1000"
	cfg.MaxRequestBytes = 8 << 20 // room for maps of large clusters
	// The password is derived from a 256-bit key: a slow hash adds cost to
	// every connection and no protection.
	cfg.BcryptCost = 4
	if err := o.setTLS(cfg, cu, pu); err != nil {
		return nil, err
	}
	if o.MetricsURL != "" {
		mu, err := url.Parse(o.MetricsURL)
		if err != nil || mu.Host == "" {
			return nil, fmt.Errorf("mon: metrics url %q: want http://host:port", o.MetricsURL)
		}
		cfg.ListenMetricsUrls = []url.URL{*mu}
	}
	return cfg, nil
}
