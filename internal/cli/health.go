package cli

import (
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/spf13/cobra"
)

// healthCmd lists and archives the recorded health events (checksum errors
// found and repaired, copies that could not be repaired): the history
// behind status's OBJECT_REPAIRED and OBJECT_CORRUPT.
func healthCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "health", Short: "list and archive recorded health events (checksum errors and repairs)"}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "list every recorded event, archived ones too",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			reports, err := ms.Reports(cmd.Context())
			if err != nil {
				return err
			}
			sort.Slice(reports, func(i, j int) bool { return reports[i].Time.Before(reports[j].Time) })
			if g.json {
				if reports == nil {
					reports = []meta.Report{}
				}
				return g.printJSON(reports)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LAST SEEN\tKIND\tOSD\tPG\tOBJECT\tCOUNT\tARCHIVED\tDETAIL")
			for _, r := range reports {
				archived := "-"
				if !r.Archived.IsZero() {
					archived = r.Archived.UTC().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%q\t%d\t%s\t%s\n", r.Time.UTC().Format(time.DateTime), r.Kind, r.OSD, r.PG, r.Object, r.Count, archived, r.Detail)
			}
			return tw.Flush()
		},
	}
	archive := &cobra.Command{
		Use:   "archive",
		Short: "stop counting every event recorded so far in status (they stay listed; a new occurrence counts again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ms, _, err := g.meta(cmd.Context())
			if err != nil {
				return err
			}
			defer ms.Close()
			n, err := ms.ArchiveReports(cmd.Context(), time.Now().UTC())
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]int{"archived": n})
			}
			fmt.Fprintf(g.out, "archived %d event(s); `cairn health ls` still lists them\n", n)
			return nil
		},
	}
	cmd.AddCommand(ls, archive)
	return cmd
}
