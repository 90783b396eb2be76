package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
)

func scrubCmd(g *globals) *cobra.Command {
	var deep bool
	cmd := &cobra.Command{
		Use:   "scrub [--deep] POOL | PGID",
		Short: "compare every copy of a pool's (or one PG's) objects now, and repair what differs",
		Long: `Light scrub compares object names, versions, sizes, xattrs and omaps across
the copies; --deep also reads every byte, verifying each block's checksum, and
compares data digests. Inconsistent copies are repaired from the copy most
OSDs agree on (a copy failing its checksums never counts) and reported in
cairn status. Scrubs also run by themselves (--scrub-interval and
--deep-scrub-interval of cairn osd).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := g.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			poolName, seeds, err := scrubTargets(c, args[0])
			if err != nil {
				return err
			}
			p, err := c.Pool(poolName)
			if err != nil {
				return err
			}
			kind := "scrub"
			if deep {
				kind = "deep scrub"
			}
			var results []client.ScrubResult
			var total client.ScrubResult
			start := time.Now()
			var shown time.Time
			for i, seed := range seeds {
				r, err := p.Scrub(ctx, seed, deep)
				if err != nil {
					return err
				}
				results = append(results, r)
				total.Objects += r.Objects
				total.Bytes += r.Bytes
				total.Errors += r.Errors
				total.Repaired += r.Repaired
				if !g.json && (time.Since(shown) >= 250*time.Millisecond || i == len(seeds)-1) {
					shown = time.Now()
					el := time.Since(start)
					fmt.Fprintf(g.err, "\r%s %s: %s %d/%d pgs, %d objects, %s, %d inconsistent, %d repaired, %s   ",
						kind, poolName, bar(i+1, len(seeds), 20), i+1, len(seeds), total.Objects, humanBytes(total.Bytes), total.Errors, total.Repaired, el.Round(time.Second))
				}
			}
			if g.json {
				return g.printJSON(map[string]any{"pool": poolName, "deep": deep, "pgs": results, "objects": total.Objects,
					"bytes": total.Bytes, "errors": total.Errors, "repaired": total.Repaired})
			}
			fmt.Fprintln(g.err)
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "PG\tOBJECTS\tBYTES\tINCONSISTENT\tREPAIRED\tDETAIL")
			for _, r := range results {
				if r.Errors == 0 && len(results) > 16 {
					continue // only the interesting ones of a big pool
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%s\n", r.PG, r.Objects, humanBytes(r.Bytes), r.Errors, r.Repaired, r.Detail)
			}
			fmt.Fprintf(w, "total\t%d\t%s\t%d\t%d\t\n", total.Objects, humanBytes(total.Bytes), total.Errors, total.Repaired)
			w.Flush()
			if total.Errors > total.Repaired {
				return fmt.Errorf("%s found %d inconsistencies it could not repair: see cairn status", kind, total.Errors-total.Repaired)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&deep, "deep", false, "read and verify all data, not only metadata")
	return cmd
}

// scrubTargets resolves a pool name or a PG id ("1.2a") to the pool and seeds.
func scrubTargets(c *client.Client, arg string) (string, []uint32, error) {
	if p, err := c.Pool(arg); err == nil {
		info, err := p.Info()
		if err != nil {
			return "", nil, err
		}
		seeds := make([]uint32, info.PGNum)
		for i := range seeds {
			seeds[i] = uint32(i)
		}
		return arg, seeds, nil
	}
	id, err := clustermap.ParsePGID(arg)
	if err != nil {
		return "", nil, fmt.Errorf("%q is neither a pool nor a placement group id like 1.2a", arg)
	}
	for _, info := range c.Pools() {
		if info.ID == uint32(id.Pool) {
			if id.Seed >= info.PGNum {
				return "", nil, fmt.Errorf("pg %s does not exist: pool %q has %d pgs", arg, info.Name, info.PGNum)
			}
			return info.Name, []uint32{id.Seed}, nil
		}
	}
	return "", nil, fmt.Errorf("pg %s: pool %d does not exist", arg, id.Pool)
}
