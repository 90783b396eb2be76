package client

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/meta/metatest"
)

// A pool created by another client a moment ago, whose map has not reached
// this client yet, is found in the newest map in etcd, which the client
// then takes; a pool no map has is still not found.
func TestPoolNotYetInTheClientsMap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ctx := context.Background()
	ms, err := meta.Connect(ctx, []string{metatest.StartEtcd(t, nil)}, nil)
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
