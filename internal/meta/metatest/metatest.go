// Package metatest starts a single-member etcd for the tests of packages
// that talk to etcd through meta (meta itself, client). Tests only: it
// embeds etcd's server, which in the product only mon runs.
package metatest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// FreeURL returns an http URL on 127.0.0.1 with a port free a moment ago.
func FreeURL(t testing.TB) url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	u, _ := url.Parse("http://" + ln.Addr().String())
	return *u
}

// StartEtcd runs a single-member etcd, configured further by opt (may be
// nil), until the test ends, and returns its client URL.
func StartEtcd(t testing.TB, opt func(*embed.Config)) string {
	t.Helper()
	cu, pu := FreeURL(t), FreeURL(t)
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
	if opt != nil {
		opt(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready")
	}
	return cu.String()
}
