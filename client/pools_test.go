package client

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/meta"
	"go.etcd.io/etcd/server/v3/embed"
)

// A pool created by another client a moment ago, whose map has not reached
// this client yet, is found in the newest map in etcd, which the client
// then takes; a pool no map has is still not found.
func TestPoolNotYetInTheClientsMap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ctx := context.Background()
	ms, err := meta.Connect(ctx, []string{startEtcd(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	old, err := ms.Init(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Update(ctx, func(m *clustermap.Map) error {
		m.Pools = append(m.Pools, clustermap.Pool{ID: m.NextPoolID, Name: "fresh", Size: 1, MinSize: 1, PGNum: 8, FailureDomain: "osd"})
		m.NextPoolID++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c := &Client{meta: ms, view: mapview.Static(old)} // a view whose watch lags
	p, err := c.Pool("fresh")
	if err != nil || p.Name() != "fresh" {
		t.Fatalf("a pool in etcd's newest map: %v", err)
	}
	if c.view.Epoch() <= old.Epoch {
		t.Fatalf("the client's map stayed at epoch %d", c.view.Epoch())
	}
	if _, err := c.Pool("none"); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("a pool no map has: %v, want ErrPoolNotFound", err)
	}
}

// startEtcd runs a single-member etcd for the test and returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	free := func() url.URL {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		u, _ := url.Parse("http://" + ln.Addr().String())
		return *u
	}
	cu, pu := free(), free()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "error"
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
