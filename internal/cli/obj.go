package cli

// `cairn obj`: objects put, read, listed and removed one at a time.

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

func objCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "obj", Short: "put, get, list, stat and remove objects"}
	cmd.AddCommand(objPutCmd(g), objGetCmd(g), objRmCmd(g), objStatCmd(g), objLsCmd(g))
	return cmd
}

// notVolumes refuses to change the volumes' own objects: they change only
// through cairn volume (removing the directory object, say, would hide
// every volume of the pool).
func notVolumes(p *client.Pool, name, verb string) error {
	if what, ok := volume.ReservedObject(name); ok {
		return fmt.Errorf("%s/%s is %s: obj %s refuses it; use cairn volume (ls, rm, resize) to change volumes", p.Name(), name, what, verb)
	}
	return nil
}

// onPool is the RunE of a command whose first argument is a pool: run gets
// the pool and the other arguments.
func onPool(g *globals, run func(cmd *cobra.Command, p *client.Pool, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return withPool(cmd.Context(), g, args[0], func(p *client.Pool) error { return run(cmd, p, args[1:]) })
	}
}

// objPutCmd is `cairn obj put`.
func objPutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "put POOL NAME [FILE|-]",
		Short: "store a file (or standard input) as an object",
		Args:  cobra.RangeArgs(2, 3),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, args []string) error {
			if err := notVolumes(p, args[0], "put"); err != nil {
				return err
			}
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
}

// objGetCmd is `cairn obj get`.
func objGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get POOL NAME [FILE|-]",
		Short: "write an object to a file (or standard output)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, args []string) error {
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
}

// objRmCmd is `cairn obj rm`.
func objRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm POOL NAME",
		Short: "remove an object",
		Args:  cobra.ExactArgs(2),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, args []string) error {
			if err := notVolumes(p, args[0], "rm"); err != nil {
				return err
			}
			if err := p.Delete(cmd.Context(), args[0]); err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]string{"removed": args[0]})
			}
			return nil
		}),
	}
}

// objStatCmd is `cairn obj stat`.
func objStatCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stat POOL NAME",
		Short: "show an object's size",
		Args:  cobra.ExactArgs(2),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, args []string) error {
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
}

// objLsCmd is `cairn obj ls`: names stream out as the listing finds them,
// except with --json, which prints one array at the end.
func objLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls POOL",
		Short: "list the objects of a pool",
		Args:  cobra.ExactArgs(1),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, args []string) error {
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
}
