package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/placement"
)

// actingOf computes, as a client does, which OSDs hold an object now.
func actingOf(t testing.TB, c *cluster, pool, name string) []clustermap.OSDID {
	t.Helper()
	m := currentMap(t, c)
	p, ok := m.PoolByName(pool)
	if !ok {
		t.Fatalf("no pool %q", pool)
	}
	_, acting := placement.NewTable(m).Locate(p, name)
	return acting
}

func currentMap(t testing.TB, c *cluster) *clustermap.Map {
	t.Helper()
	cfg, err := conf.Load(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms, err := meta.ConnectConf(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	m, _, err := ms.Map(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
