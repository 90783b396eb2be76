package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

// snapCmd is `cairn volume snap`.
func snapCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "snap", Short: "volume snapshots: create, list, remove, roll back"}
	rm := snapWalkCmd(g, "rm POOL/NAME@SNAP", "remove a snapshot and the data only it kept", "snap rm", volume.SnapRemove, "removed snapshot")
	rollback := snapWalkCmd(g, "rollback POOL/NAME@SNAP", "make a volume what it was at a snapshot (stop its writers first)", "rollback", volume.Rollback, "rolled back to")
	cmd.AddCommand(snapCreateCmd(g), snapLsCmd(g), rm, rollback)
	return cmd
}

// needSnap refuses a POOL/NAME where a command needs POOL/NAME@SNAP.
func needSnap(arg, snap string) error {
	if snap == "" {
		return fmt.Errorf("%q: name the snapshot: POOL/NAME@SNAP", arg)
	}
	return nil
}

// snapCreateCmd is `cairn volume snap create`.
func snapCreateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create POOL/NAME@SNAP",
		Short: "take a snapshot (instant; later writes are copy-on-write)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				if err := needSnap(args[0], snap); err != nil {
					return err
				}
				s, err := volume.SnapCreate(cmd.Context(), p, name, snap)
				if err != nil {
					return err
				}
				if g.json {
					return g.printJSON(s)
				}
				fmt.Fprintf(g.out, "created snapshot %s (id %d, %s)\n", args[0], s.ID, humanBytes(int64(s.Size)))
				return nil
			})
		},
	}
}

// snapLsCmd is `cairn volume snap ls`.
func snapLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls POOL/NAME",
		Short: "list a volume's snapshots",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumePool(cmd.Context(), g, args[0], func(p *client.Pool, name string) error {
				info, err := volume.Stat(cmd.Context(), p, name)
				if err != nil {
					return err
				}
				if g.json {
					if info.Snaps == nil {
						info.Snaps = []volume.Snap{}
					}
					return g.printJSON(info.Snaps)
				}
				w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tNAME\tSIZE\tCREATED")
				for _, s := range info.Snaps {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", s.ID, s.Name, humanBytes(int64(s.Size)), s.Created.Format("2006-01-02 15:04:05"))
				}
				return w.Flush()
			})
		},
	}
}

// snapWalkCmd is a snapshot command that walks every object of the volume,
// with a progress bar (rm, rollback): run does the work, done is what the
// last line says.
func snapWalkCmd(g *globals, use, short, what string, run func(context.Context, *client.Pool, string, string, volume.Progress) error, done string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withVolumeSnap(cmd.Context(), g, args[0], func(p *client.Pool, name, snap string) error {
				if err := needSnap(args[0], snap); err != nil {
					return err
				}
				bar := newCountBar(g, what+" "+args[0])
				if err := run(cmd.Context(), p, name, snap, bar.update); err != nil {
					bar.abort()
					return err
				}
				bar.finish()
				fmt.Fprintf(g.out, "%s %s\n", done, args[0])
				return nil
			})
		},
	}
}
