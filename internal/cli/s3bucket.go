package cli

// `cairn s3 bucket ls|stat` (and fill, s3fill.go): the gateway's buckets with their objects and
// bytes, read from the pool (s3gw.ListBucketStats, StatBucket).

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/s3gw"
)

func s3BucketCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "bucket", Short: "list the S3 buckets, show their objects and bytes, fill one with test objects"}
	cmd.AddCommand(s3BucketLsCmd(g), s3BucketStatCmd(g), s3BucketFillCmd(g))
	return cmd
}

// s3Store opens the gateway's pool as its Store.
func (g *globals) s3Store(ctx context.Context, pool string) (s3gw.Store, func(), error) {
	c, err := g.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	p, err := c.Pool(pool)
	if errors.Is(err, client.ErrPoolNotFound) {
		c.Close()
		return nil, nil, fmt.Errorf("s3: pool %q does not exist (the gateway's pool is named by --pool)", pool)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return poolStore{p}, func() { c.Close() }, nil
}

// namePool names the gateway's pool where a bucket's data lives in it.
func namePool(s *s3gw.BucketStat, pool string) {
	if s.DataPool == "" {
		s.DataPool = pool
	}
}

func printBucketStats(g *globals, stats []s3gw.BucketStat) error {
	tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tOBJECTS\tBYTES\tUPLOADS\tGC PENDING\tINDEX SHARDS\tDATA POOL\tCREATED")
	for _, s := range stats {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", s.Name, s.Owner, s.Objects, humanBytes(int64(s.Bytes)), s.Uploads, s.GCPending, s.IndexShards,
			s.DataPool, s.Created.UTC().Format(time.DateTime))
	}
	return tw.Flush()
}

func s3BucketLsCmd(g *globals) *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "list the buckets of the gateway's pool with their owners, objects and bytes",
		Long: `Lists every bucket with its owner, object count, bytes, multipart uploads in
progress, data waiting for the collector and the pool holding its data. It reads every bucket's whole
index (1,000 keys per round trip): an administrator's view.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, done, err := g.s3Store(cmd.Context(), pool)
			if err != nil {
				return err
			}
			defer done()
			stats, err := s3gw.ListBucketStats(cmd.Context(), st)
			if err != nil {
				return err
			}
			for i := range stats {
				namePool(&stats[i], pool)
			}
			if g.json {
				if stats == nil {
					stats = []s3gw.BucketStat{}
				}
				return g.printJSON(stats)
			}
			return printBucketStats(g, stats)
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "s3", "the gateway's pool")
	return cmd
}

func s3BucketStatCmd(g *globals) *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "stat BUCKET",
		Short: "show a bucket's owner, objects and bytes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, done, err := g.s3Store(cmd.Context(), pool)
			if err != nil {
				return err
			}
			defer done()
			s, err := s3gw.StatBucket(cmd.Context(), st, args[0])
			if errors.Is(err, s3gw.ErrNoSuchBucket) {
				return fmt.Errorf("s3: bucket %q does not exist in pool %q (cairn s3 bucket ls lists them)", args[0], pool)
			}
			if err != nil {
				return err
			}
			namePool(&s, pool)
			if g.json {
				return g.printJSON(s)
			}
			return printBucketStats(g, []s3gw.BucketStat{s})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "s3", "the gateway's pool")
	return cmd
}
