package cli

// `cairn pool`: pools created, listed and removed.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/health"
	"github.com/cairn-storage/cairn/internal/s3gw"
	"github.com/cairn-storage/cairn/internal/volume"
)

func poolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "create, list and remove pools"}
	var spec client.PoolSpec
	var pgNum uint32
	var stripeUnit string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "create a replicated pool (or, with --ec K+M, an erasure-coded one)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			spec.Name, spec.PGNum = args[0], pgNum
			if spec.EC != "" {
				if !cmd.Flags().Changed("size") {
					spec.Size = 0 // K+M
				}
				u, err := parseBytes(stripeUnit)
				if err != nil || u > 1<<20 {
					return fmt.Errorf("--stripe-unit %q: want a multiple of 4K up to 1M, like 16K", stripeUnit)
				}
				spec.StripeUnit = int(u)
			}
			info, err := c.CreatePool(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.out, "pool %q created: id %d, %d pgs, %s%s\n",
				info.Name, info.ID, info.PGNum, info.Protection, classNote(info.Class))
			return nil
		},
	}
	create.Flags().IntVar(&spec.Size, "size", 3, "number of copies")
	create.Flags().IntVar(&spec.MinSize, "min-size", 0, "copies below which writes stop (default size - size/2)")
	create.Flags().Uint32Var(&pgNum, "pg-num", 0, "placement groups (default: about 100 per OSD)")
	create.Flags().StringVar(&spec.Class, "class", "", "device class: hdd, ssd or nvme (default any)")
	create.Flags().StringVar(&spec.FailureDomain, "failure-domain", "host", "osd, host or rack")
	create.Flags().StringVar(&spec.EC, "ec", "", "erasure code K+M (e.g. 2+1, 4+2): K data and M parity shards, one per failure domain; min_size defaults to K+1")
	create.Flags().StringVar(&stripeUnit, "stripe-unit", "16K", "bytes of each chunk of an erasure-coded stripe: a multiple of 4K up to 1M (16K suits volumes; 256K suits S3 data, whose GETs then copy nothing)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "list pools: what each keeps, what it can lose by design and now, and the user data that still fits (MAX AVAIL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			pools := c.Pools()
			if g.json {
				return g.printJSON(pools)
			}
			red, err := poolRedundancy(cmd.Context(), g)
			if err != nil {
				return err
			}
			return printPools(g.out, pools, red)
		},
	}
	cmd.AddCommand(create, ls, poolRmCmd(g))
	return cmd
}

// poolRedundancy reads what each pool can lose and hold, by name.
func poolRedundancy(ctx context.Context, g *globals) (map[string]health.PoolRedundancy, error) {
	ms, _, err := g.meta(ctx)
	if err != nil {
		return nil, err
	}
	defer ms.Close()
	m, _, err := ms.Map(ctx)
	if err != nil {
		return nil, err
	}
	stats, err := ms.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]health.PoolRedundancy{}
	for _, r := range health.Compute(m, stats, nil, time.Now()).Redundancy {
		out[r.Name] = r
	}
	return out, nil
}

// printPools is the table of `cairn pool ls`.
func printPools(w io.Writer, pools []client.PoolInfo, red map[string]health.PoolRedundancy) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKIND\tSIZE\tMIN_SIZE\tPGS\tCLASS\tFAILURE_DOMAIN\tCAN LOSE\tNOW\tUSABLE\tMAX AVAIL")
	for _, p := range pools {
		class := p.Class
		if class == "" {
			class = "any"
		}
		kind := "replicated"
		if p.EC != "" {
			kind = "ec " + p.EC + " " + unitLabel(p.StripeUnit)
		}
		r := red[p.Name]
		avail := "-"
		if r.MaxAvail > 0 {
			avail = humanBytes(r.MaxAvail)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.0f%%\t%s\n", p.ID, p.Name, kind, p.Size, p.MinSize, p.PGNum, class, p.FailureDomain,
			strings.TrimPrefix(r.Design(), "can lose "), r.Now(), r.UsablePct, avail)
	}
	return tw.Flush()
}

// unitLabel writes a stripe unit as --stripe-unit takes it: 16K, 1M.
func unitLabel(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprintf("%dK", n>>10)
}

// poolRmCmd is `cairn pool rm`, which asks before it deletes data.
func poolRmCmd(g *globals) *cobra.Command {
	var confirm, force bool
	rm := &cobra.Command{
		Use:   "rm NAME --yes-i-really-mean-it [--force]",
		Short: "remove a pool and every object in it, for good",
		Long: `Removes a pool and every object in it; nothing brings them back.
It asks for --yes-i-really-mean-it, and refuses a pool that holds volumes, or
whose volumes' snapshots have clones in other pools, unless --force is given
too (those clones then lose the data they share: flatten them first).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := checkPoolRemovable(cmd.Context(), c, args[0], confirm, force); err != nil {
				return err
			}
			if err := c.DeletePool(cmd.Context(), args[0]); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"removed": args[0]})
			}
			fmt.Fprintf(g.out, "pool %q removed; its OSDs free its space in the background\n", args[0])
			return nil
		},
	}
	rm.Flags().BoolVar(&confirm, "yes-i-really-mean-it", false, "confirm that every object of the pool is to be deleted")
	rm.Flags().BoolVar(&force, "force", false, "remove the pool even though it holds volumes or other pools' clones depend on it")
	return rm
}

// checkNoBuckets refuses to remove a pool that S3 buckets use: one whose
// registry holds buckets (their indexes are in it), or the data pool of a
// bucket whose registry is in another pool; the gateway would answer for
// those buckets with their data gone.
func checkNoBuckets(ctx context.Context, c *client.Client, name string) error {
	var uses []string
	for _, info := range c.Pools() {
		if info.EC != "" {
			continue // no omap: no registry
		}
		q, err := c.Pool(info.Name)
		if err != nil {
			return err
		}
		buckets, err := s3gw.BucketPools(ctx, poolStore{q})
		if err != nil {
			return fmt.Errorf("pool %q: reading its S3 bucket registry before removing pool %q: %w (add --force to remove it without this check)", info.Name, name, err)
		}
		for _, b := range buckets {
			if info.Name == name || b.DataPool == name {
				uses = append(uses, b.Bucket)
			}
		}
	}
	if len(uses) > 0 {
		return fmt.Errorf("pool %q holds the index or the data of %d S3 bucket(s) (%s): empty and delete them first (aws s3 rb --force s3://BUCKET), or add --force to lose them with the pool", name, len(uses), listSome(uses))
	}
	return nil
}

// checkPoolRemovable refuses what an operator would not expect `pool rm` to
// do: delete data without a confirmation, or delete volumes (and the data
// other pools' clones share with them) without --force.
func checkPoolRemovable(ctx context.Context, c *client.Client, name string, confirm, force bool) error {
	p, err := c.Pool(name)
	if err != nil {
		return err
	}
	if !confirm {
		return fmt.Errorf("pool rm deletes pool %q and every object in it for good; to go on, run: cairn pool rm %s --yes-i-really-mean-it", name, name)
	}
	if force {
		return nil
	}
	if err := checkNoBuckets(ctx, c, name); err != nil {
		return err
	}
	if info, err := p.Info(); err == nil && info.EC != "" {
		return nil // erasure-coded pools hold no volumes
	}
	vols, err := volume.List(ctx, p)
	if err != nil {
		return fmt.Errorf("pool %q: listing its volumes before removing it: %w (add --force to remove it without this check)", name, err)
	}
	if len(vols) == 0 {
		return nil
	}
	var names, clones []string
	for _, v := range vols {
		names = append(names, v.Name)
		for _, ch := range v.Children {
			if ch.Pool != name {
				clones = append(clones, ch.Pool+"/"+ch.Volume)
			}
		}
	}
	if len(clones) > 0 {
		return fmt.Errorf("pool %q holds volumes whose snapshots have clones in other pools (%s): flatten them first (cairn volume flatten), or add --force to break them", name, listSome(clones))
	}
	return fmt.Errorf("pool %q holds %d volume(s) (%s): remove them first (cairn volume rm), or add --force to delete them with the pool", name, len(vols), listSome(names))
}

// listSome joins up to 10 names, with "…" for the rest.
func listSome(names []string) string {
	if len(names) > 10 {
		names = append(names[:10:10], fmt.Sprintf("… %d more", len(names)-10))
	}
	return strings.Join(names, ", ")
}

func classNote(c string) string {
	if c == "" {
		return ""
	}
	return ", class " + c
}
