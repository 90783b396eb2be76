package cli

// The mon's web dashboard: what cairn mon --dashboard-listen wires up
// (internal/dashboard renders; this lists volumes and buckets for it) and
// `cairn dashboard password`.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/dashboard"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/s3gw"
	"github.com/cairn-storage/cairn/internal/volume"
)

func dashboardCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dashboard", Short: "the web dashboard a mon serves (cairn mon --dashboard-listen)"}
	cmd.AddCommand(&cobra.Command{
		Use:   "password",
		Short: "print the dashboard's user and password (derived from the cluster key in cairn.conf)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := client.LoadConfig(g.conf)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"user": conf.DashboardUser, "password": cfg.DashboardPassword()})
			}
			fmt.Fprintf(g.out, "user %s password %s\n", conf.DashboardUser, cfg.DashboardPassword())
			return nil
		},
	})
	return cmd
}

// serveDashboard runs the dashboard of the cluster of cfg on addr until
// ctx ends; auth asks for the dashboard password.
func serveDashboard(ctx context.Context, cfg *client.Config, clientURL, addr string, auth bool, every time.Duration) error {
	ms, err := meta.Connect(ctx, []string{clientURL}, meta.AuthFor(cfg))
	if err != nil {
		return err
	}
	defer ms.Close()
	var c *client.Client // dialled at the first listing (the map may not exist yet); lives as long as the mon
	catalog := func(ctx context.Context) (dashboard.Catalog, error) {
		if c == nil {
			if c, err = client.Dial(ctx, cfg); err != nil {
				c = nil
				return dashboard.Catalog{}, err
			}
		}
		return listCatalog(ctx, c)
	}
	o := dashboard.Options{Source: ms, Catalog: catalog, SampleEvery: every, CatalogEvery: 3 * every, Logf: logger.Printf}
	if auth {
		o.User, o.Password = conf.DashboardUser, cfg.DashboardPassword()
	}
	logger.Printf("dashboard on http://%s/", addr)
	return dashboard.Serve(ctx, addr, o)
}

// maxCatalog bounds how many volumes and buckets the dashboard lists.
const maxCatalog = 1000

// listCatalog lists the volumes and buckets of every pool.
func listCatalog(ctx context.Context, c *client.Client) (dashboard.Catalog, error) {
	var cat dashboard.Catalog
	for _, pool := range c.Pools() {
		if pool.EC != "" {
			continue // no omap: neither volumes nor a bucket registry (an S3 data pool holds stripes only)
		}
		p, err := c.Pool(pool.Name)
		if errors.Is(err, client.ErrPoolNotFound) {
			continue // removed since the map was read
		}
		if err != nil {
			return cat, err
		}
		vols, err := volume.List(ctx, p)
		if err != nil {
			return cat, fmt.Errorf("pool %s: volumes: %w", pool.Name, err)
		}
		for _, v := range vols[:min(len(vols), maxCatalog-len(cat.Volumes))] {
			cat.Volumes = append(cat.Volumes, dashboard.Volume{Pool: v.Pool, Name: v.Name, Size: v.Size, Snapshots: len(v.Snaps)})
		}
		buckets, err := s3gw.ListBucketStats(ctx, poolStore{p})
		if err != nil {
			return cat, fmt.Errorf("pool %s: buckets: %w", pool.Name, err)
		}
		for _, b := range buckets[:min(len(buckets), maxCatalog-len(cat.Buckets))] {
			cat.Buckets = append(cat.Buckets, dashboard.Bucket{Pool: pool.Name, Name: b.Name, Owner: b.Owner, Objects: b.Objects, Bytes: b.Bytes})
		}
	}
	return cat, nil
}
