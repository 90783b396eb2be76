package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

func volumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "volume", Short: "thin block volumes: create, snapshot, clone, send and receive (served by cairn nbd)"}
	imp := streamInCmd(g, "import FILE|- POOL/NAME",
		"create a volume from a stream made by export; a damaged stream is refused and leaves nothing behind",
		"import", volume.Import)
	importDiff := streamInCmd(g, "import-diff FILE|- POOL/NAME",
		"apply a stream made by export-diff; a damaged stream is refused and the volume rolled back to where it was",
		"import-diff", volume.ImportDiff)
	cmd.AddCommand(volumeCreateCmd(g), volumeLsCmd(g), volumeInfoCmd(g), volumeResizeCmd(g), volumeRmCmd(g),
		volumeExportCmd(g), imp, volumeExportDiffCmd(g), importDiff, volumeCloneCmd(g), volumeFlattenCmd(g), snapCmd(g))
	return cmd
}

// volumeCreateCmd is `cairn volume create`.
func volumeCreateCmd(g *globals) *cobra.Command {
	var size, objectSize string
	create := &cobra.Command{
		Use:   "create POOL/NAME --size SIZE",
		Short: "create a thin volume (nothing is written until the guest writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseBytes(size)
			if err != nil {
				return err
			}
			var os uint64
			if objectSize != "" {
				v, err := parseSize(objectSize)
				if err != nil {
					return err
				}
				os = uint64(v)
			}
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Create(cmd.Context(), p, name, n, os)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	create.Flags().StringVar(&size, "size", "", "size, e.g. 100G, 512M or 1T (required)")
	create.Flags().StringVar(&objectSize, "object-size", "", "size of the objects the volume is striped over (default 4M)")
	create.MarkFlagRequired("size")
	return create
}

// volumeLsCmd is `cairn volume ls`.
func volumeLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls POOL",
		Short: "list a pool's volumes",
		Args:  cobra.ExactArgs(1),
		RunE: onPool(g, func(cmd *cobra.Command, p *client.Pool, _ []string) error {
			vols, err := volume.List(cmd.Context(), p)
			if err != nil {
				return err
			}
			if g.json {
				if vols == nil {
					vols = []volume.Info{}
				}
				return g.printJSON(vols)
			}
			w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tOBJECT SIZE\tSNAPSHOTS\tPARENT\tCREATED")
			for _, v := range vols {
				parent := "-"
				if v.Parent != nil {
					parent = v.Parent.Pool + "/" + v.Parent.Volume + "@" + v.Parent.Snap
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, humanBytes(int64(v.Size)), humanBytes(int64(v.ObjectSize)),
					len(v.Snaps), parent, v.Created.Format("2006-01-02 15:04:05"))
			}
			return w.Flush()
		}),
	}
}

// volumeInfoCmd is `cairn volume info`.
func volumeInfoCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "info POOL/NAME",
		Short: "show a volume's size, object size and id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Stat(cmd.Context(), p, name)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
}

// volumeResizeCmd is `cairn volume resize`.
func volumeResizeCmd(g *globals) *cobra.Command {
	var newSize string
	var force bool
	resize := &cobra.Command{
		Use:   "resize POOL/NAME --size SIZE",
		Short: "grow or shrink a volume (shrinking deletes the data past the new end)",
		Long: `Grows or shrinks a volume. Open writers (cairn nbd connections) take the
new size before the command returns; NBD clients keep the size they
connected with, and their IO past the new end fails.

Shrinking deletes the data past the new end (snapshots keep theirs), and
is refused while the volume is open for writing: a guest's file system
would lose its end, and NBD cannot tell a client that its disk shrank.
--force shrinks anyway.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseBytes(newSize)
			if err != nil {
				return err
			}
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Resize(cmd.Context(), p, name, n, force)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
	resize.Flags().StringVar(&newSize, "size", "", "new size, e.g. 200G (required)")
	resize.Flags().BoolVar(&force, "force", false, "shrink even while clients have the volume open (their IO past the new end fails)")
	resize.MarkFlagRequired("size")
	return resize
}

// volumeRmCmd is `cairn volume rm`.
func volumeRmCmd(g *globals) *cobra.Command {
	var force bool
	rm := &cobra.Command{
		Use:   "rm POOL/NAME",
		Short: "remove a volume and all its data (refused while clients have it open, unless --force)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				if err := volume.Remove(cmd.Context(), p, name, force); err != nil {
					return err
				}
				fmt.Fprintf(g.out, "removed %s\n", args[0])
				return nil
			})
		},
	}
	rm.Flags().BoolVar(&force, "force", false, "remove even while clients have the volume open (all their IO then fails)")
	return rm
}

// volumeExportCmd is `cairn volume export`.
func volumeExportCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "export POOL/NAME[@SNAP] FILE|-",
		Short: "write a volume's data (now, or at a snapshot) as a checksummed stream (written parts only), to a file or stdout",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				v, err := volume.OpenSnap(cmd.Context(), p, name, snap)
				if err != nil {
					return err
				}
				return streamOut(g, args[1], "export "+args[0], func(w io.Writer, progress volume.Progress) error {
					return v.Export(cmd.Context(), w, progress)
				})
			})
		},
	}
}

// volumeExportDiffCmd is `cairn volume export-diff`.
func volumeExportDiffCmd(g *globals) *cobra.Command {
	var fromSnap string
	exportDiff := &cobra.Command{
		Use:   "export-diff --from-snap A POOL/NAME[@B] FILE|-",
		Short: "write what changed in a volume from snapshot A to snapshot B (or to now) as a checksummed stream",
		Long: `Writes the objects that changed from snapshot A to snapshot B (or to the
volume as it is now, without @B). Unchanged objects are found from their
snapshot state, without reading their data. Apply the stream with
import-diff onto a volume that has snapshot A.

  cairn volume export default/vm1@monday full.cvol
  cairn volume import full.cvol backup/vm1           # backup/vm1@monday exists too
  cairn volume export-diff --from-snap monday default/vm1@tuesday - | cairn volume import-diff - backup/vm1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				return streamOut(g, args[1], "export-diff "+args[0], func(w io.Writer, progress volume.Progress) error {
					return volume.ExportDiff(cmd.Context(), p, name, fromSnap, snap, w, progress)
				})
			})
		},
	}
	exportDiff.Flags().StringVar(&fromSnap, "from-snap", "", "the snapshot the diff starts from (required)")
	exportDiff.MarkFlagRequired("from-snap")
	return exportDiff
}

// volumeCloneCmd is `cairn volume clone`.
func volumeCloneCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "clone POOL/NAME@SNAP POOL/CLONE",
		Short: "make a writable volume from a snapshot; it shares the snapshot's data until written",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				if snap == "" {
					return fmt.Errorf("%q: clone needs a snapshot: POOL/NAME@SNAP", args[0])
				}
				dpool, dname, err := splitVolume(args[1])
				if err != nil {
					return err
				}
				dp, err := p.Client().Pool(dpool)
				if err != nil {
					return err
				}
				info, err := volume.Clone(cmd.Context(), p, name, snap, dp, dname)
				if err != nil {
					return err
				}
				return printVolume(g, info)
			})
		},
	}
}

// volumeFlattenCmd is `cairn volume flatten`.
func volumeFlattenCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "flatten POOL/CLONE",
		Short: "copy into a clone the data it still shares with its parent snapshot, and detach it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				bar := newCountBar(g, "flatten "+args[0])
				if err := volume.Flatten(cmd.Context(), p, name, bar.update); err != nil {
					bar.abort()
					return err
				}
				bar.finish()
				fmt.Fprintf(g.out, "flattened %s\n", args[0])
				return nil
			})
		},
	}
}

func printVolume(g *globals, info volume.Info) error {
	if g.json {
		return g.printJSON(info)
	}
	fmt.Fprintf(g.out, "volume %s/%s\n  size:        %s (%d bytes)\n  object size: %s\n  id:          %s\n  created:     %s\n",
		info.Pool, info.Name, humanBytes(int64(info.Size)), info.Size, humanBytes(int64(info.ObjectSize)), info.ID, info.Created.Format("2006-01-02 15:04:05 UTC"))
	if p := info.Parent; p != nil {
		fmt.Fprintf(g.out, "  parent:      %s/%s@%s (overlap %s)\n", p.Pool, p.Volume, p.Snap, humanBytes(int64(p.Overlap)))
	}
	for _, s := range info.Snaps {
		fmt.Fprintf(g.out, "  snapshot:    %s (id %d, %s, %s)\n", s.Name, s.ID, humanBytes(int64(s.Size)), s.Created.Format("2006-01-02 15:04:05 UTC"))
	}
	for _, c := range info.Children {
		fmt.Fprintf(g.out, "  clone:       %s/%s\n", c.Pool, c.Volume)
	}
	return nil
}

// splitVolume parses POOL/NAME (no snapshot).
func splitVolume(s string) (string, string, error) {
	ref, err := volume.ParseRef(s)
	if err != nil {
		return "", "", err
	}
	if ref.Snap != "" {
		return "", "", fmt.Errorf("%q names a snapshot: this command takes a volume, POOL/NAME", s)
	}
	return ref.Pool, ref.Name, nil
}

// withVolumeSnap is withVolumePool for POOL/NAME[@SNAP].
func withVolumeSnap(ctx context.Context, g *globals, arg string, fn func(p *client.Pool, name, snap string) error) error {
	ref, err := volume.ParseRef(arg)
	if err != nil {
		return err
	}
	return withPool(ctx, g, ref.Pool, func(p *client.Pool) error { return fn(p, ref.Name, ref.Snap) })
}

func withVolumePool(ctx context.Context, g *globals, arg string, fn func(*client.Pool, string) error) error {
	poolName, name, err := splitVolume(arg)
	if err != nil {
		return err
	}
	return withPool(ctx, g, poolName, func(p *client.Pool) error { return fn(p, name) })
}

// withPool dials the cluster and runs fn on a pool.
func withPool(ctx context.Context, g *globals, poolName string, fn func(*client.Pool) error) error {
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.Pool(poolName)
	if err != nil {
		return err
	}
	return fn(p)
}
