// Package mon runs a monitor: one embedded etcd member that holds the cluster
// map, plus a candidate for the keeper that marks OSDs down when their lease
// expires. Three mons on three hosts form a real etcd cluster through the
// initial-cluster options; there is no consensus code of ours.
package mon

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
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
	Logf       func(string, ...any)
}

// Run starts etcd and the keeper and blocks until ctx ends, then stops etcd.
// ready, if not nil, is called once etcd serves clients.
func Run(ctx context.Context, o Options, ready func()) error {
	cu, err := url.Parse(o.ClientURL)
	if err != nil {
		return fmt.Errorf("mon: client url %q: %w", o.ClientURL, err)
	}
	pu, err := url.Parse(o.PeerURL)
	if err != nil {
		return fmt.Errorf("mon: peer url %q: %w", o.PeerURL, err)
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
	if o.MetricsURL != "" {
		mu, err := url.Parse(o.MetricsURL)
		if err != nil || mu.Host == "" {
			return fmt.Errorf("mon: metrics url %q: want http://host:port", o.MetricsURL)
		}
		cfg.ListenMetricsUrls = []url.URL{*mu}
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
	o.Logf("mon %s: etcd serving clients on %s", o.Name, o.ClientURL)
	var auth *meta.Auth
	if o.EtcdPassword != "" {
		if err := meta.EnableAuth(ctx, o.ClientURL, o.EtcdPassword); err != nil {
			return fmt.Errorf("mon %s: %w", o.Name, err)
		}
		auth = &meta.Auth{User: "root", Password: o.EtcdPassword} // conf.EtcdUser
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
