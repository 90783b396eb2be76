package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/internal/health"
)

func osdDFCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "df",
		Short: "show each OSD's disk usage, the small writes not yet on its data disk (UNSYNCED), their SYNC RATE and time to DRAIN, and its write-back area (WRITEBACK: dirty/size, DESTAGE rate and time to go)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ms, _, err := g.meta(ctx)
			if err != nil {
				return err
			}
			defer ms.Close()
			m, _, err := ms.Map(ctx)
			if err != nil {
				return err
			}
			stats, err := ms.Stats(ctx)
			if err != nil {
				return err
			}
			rows := health.DF(m, stats)
			if g.json {
				return g.printJSON(rows)
			}
			tw := tabwriter.NewWriter(g.out, 0, 4, 2, ' ', tabwriter.AlignRight)
			io.WriteString(tw, dfHeader)
			for _, r := range rows {
				fmt.Fprintln(tw, dfLine(r))
			}
			return tw.Flush()
		},
	}
}

const dfHeader = "ID\tHOST\tCLASS\tSTATUS\tSIZE\tUSED\tAVAIL\t%USE\tOBJECTS\tUNSYNCED\tSYNC RATE\tDRAIN\tWRITEBACK\tDESTAGE\tFLASH CACHE\t\n"

// dfLine is a row of `cairn osd df`, tab-separated.
func dfLine(r health.DFRow) string {
	status := "down"
	if r.Up {
		status = "up"
	}
	if !r.Reported {
		return fmt.Sprintf("%d\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t", r.ID, r.Host, r.Class, status)
	}
	rate, drain := "-", "-"
	if r.SyncRate > 0 {
		rate = humanBytes(r.SyncRate) + "/s"
		drain = seconds(r.DrainSec)
	}
	wb, destage := writebackColumns(r)
	return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t", r.ID, r.Host, r.Class, status,
		humanBytes(r.Size), humanBytes(r.Used), humanBytes(r.Avail), r.UsedPct, r.Objects, humanBytes(r.Unsynced), rate, drain, wb, destage,
		flashCacheColumn(r))
}

// flashCacheColumn is the FLASH CACHE cell: bytes held of its size and
// the share of lookups it answered, or "-" without one.
func flashCacheColumn(r health.DFRow) string {
	if r.FlashCacheSize <= 0 {
		return "-"
	}
	return fmt.Sprintf("%s/%s, %.0f%% hits", humanBytes(r.FlashCacheUsed), humanBytes(r.FlashCacheSize), 100*r.FlashCacheHitRate)
}

// writebackColumns are the WRITEBACK (dirty/area) and DESTAGE (rate)
// cells of a row: "-" for an OSD without an area; an area being drained
// after it was turned off shows its dirty bytes over no size, or "(off)"
// when `cairn osd writeback off` turned it off.
func writebackColumns(r health.DFRow) (wb, destage string) {
	wb, destage = "-", "-"
	if r.WritebackArea > 0 || r.WritebackDirty > 0 {
		wb = humanBytes(r.WritebackDirty) + "/" + humanBytes(r.WritebackArea)
	}
	if r.WritebackOff {
		wb += " (off)"
	}
	if r.DestageRate > 0 {
		destage = humanBytes(r.DestageRate) + "/s"
	}
	if r.DestageSec > 0 {
		destage += ", " + seconds(r.DestageSec) + " to go"
	}
	return wb, destage
}

// seconds shows a duration in seconds to a tenth of a second.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}
