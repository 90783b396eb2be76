package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/cairn-storage/cairn/client"
	"github.com/spf13/cobra"
)

func poolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "pool", Short: "create, list and remove pools"}
	var spec client.PoolSpec
	var pgNum uint32
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "create a replicated pool",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			spec.Name, spec.PGNum = args[0], pgNum
			info, err := c.CreatePool(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.out, "pool %q created: id %d, size %d, min_size %d, %d pgs, one copy per %s%s\n",
				info.Name, info.ID, info.Size, info.MinSize, info.PGNum, info.FailureDomain, classNote(info.Class))
			return nil
		},
	}
	create.Flags().IntVar(&spec.Size, "size", 3, "number of copies")
	create.Flags().IntVar(&spec.MinSize, "min-size", 0, "copies below which writes stop (default size - size/2)")
	create.Flags().Uint32Var(&pgNum, "pg-num", 0, "placement groups (default: about 100 per OSD)")
	create.Flags().StringVar(&spec.Class, "class", "", "device class: hdd, ssd or nvme (default any)")
	create.Flags().StringVar(&spec.FailureDomain, "failure-domain", "host", "osd, host or rack")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "list pools",
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
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSIZE\tMIN_SIZE\tPGS\tCLASS\tFAILURE_DOMAIN")
			for _, p := range pools {
				class := p.Class
				if class == "" {
					class = "any"
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%s\n", p.ID, p.Name, p.Size, p.MinSize, p.PGNum, class, p.FailureDomain)
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "remove a pool and all its objects",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.DeletePool(cmd.Context(), args[0]); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"removed": args[0]})
			}
			fmt.Fprintf(g.out, "pool %q removed\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func classNote(c string) string {
	if c == "" {
		return ""
	}
	return ", class " + c
}

func objCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "obj", Short: "put, get, list, stat and remove objects"}
	withPool := func(run func(cmd *cobra.Command, p *client.Pool, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.Pool(args[0])
			if err != nil {
				return err
			}
			return run(cmd, p, args[1:])
		}
	}
	put := &cobra.Command{
		Use:   "put POOL NAME [FILE|-]",
		Short: "store a file (or standard input) as an object",
		Args:  cobra.RangeArgs(2, 3),
		RunE: withPool(func(cmd *cobra.Command, p *client.Pool, args []string) error {
			var r io.Reader = os.Stdin
			if len(args) == 2 && args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			n, err := p.PutReader(cmd.Context(), args[0], bufio.NewReaderSize(r, 1<<20))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(client.ObjectInfo{Name: args[0], Size: uint64(n)})
			}
			return nil
		}),
	}
	get := &cobra.Command{
		Use:   "get POOL NAME [FILE|-]",
		Short: "write an object to a file (or standard output)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: withPool(func(cmd *cobra.Command, p *client.Pool, args []string) error {
			data, err := p.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if len(args) == 2 && args[1] != "-" {
				return os.WriteFile(args[1], data, 0o644)
			}
			_, err = g.out.Write(data)
			return err
		}),
	}
	rm := &cobra.Command{
		Use:   "rm POOL NAME",
		Short: "remove an object",
		Args:  cobra.ExactArgs(2),
		RunE: withPool(func(cmd *cobra.Command, p *client.Pool, args []string) error {
			if err := p.Delete(cmd.Context(), args[0]); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"removed": args[0]})
			}
			return nil
		}),
	}
	stat := &cobra.Command{
		Use:   "stat POOL NAME",
		Short: "show an object's size",
		Args:  cobra.ExactArgs(2),
		RunE: withPool(func(cmd *cobra.Command, p *client.Pool, args []string) error {
			info, err := p.Stat(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(info)
			}
			fmt.Fprintf(g.out, "%s/%s size %d\n", p.Name(), info.Name, info.Size)
			return nil
		}),
	}
	ls := &cobra.Command{
		Use:   "ls POOL",
		Short: "list the objects of a pool",
		Args:  cobra.ExactArgs(1),
		RunE: withPool(func(cmd *cobra.Command, p *client.Pool, args []string) error {
			var names []string
			w := bufio.NewWriter(g.out)
			defer w.Flush()
			err := p.List(cmd.Context(), func(name string) error {
				if g.json {
					names = append(names, name)
					return nil
				}
				_, err := fmt.Fprintln(w, name)
				return err
			})
			if err != nil {
				return err
			}
			if g.json {
				if names == nil {
					names = []string{}
				}
				return g.printJSON(names)
			}
			return nil
		}),
	}
	cmd.AddCommand(put, get, rm, stat, ls)
	return cmd
}
