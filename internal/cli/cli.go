// Package cli implements the cairn command line as a library: cmd/cairn only
// calls Main. It is command wiring: each command's flags, what it prints,
// and the package that does the work. Data commands go through the public
// client package; admin views (status, osd tree) read the map, stats and
// health events from meta, and status judges them with package health;
// cairn s3 user and key keep S3 users and access keys through meta.
// cairn dev runs package devcluster, cairn nbd package nbdgw, cairn bench
// package bench's workload driver.
//
// Use it for: adding or changing a command. Not for: logic a command
// needs; put that in the package that owns the concept.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/spf13/cobra"
)

// globals shared by every command.
type globals struct {
	conf string
	json bool
	out  io.Writer
	err  io.Writer // progress and diagnostics
}

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	g := &globals{out: os.Stdout, err: os.Stderr}
	root := &cobra.Command{
		Use:           "cairn",
		Short:         "cairn: replicated, checksummed storage for block volumes and objects",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.conf, "conf", "", "path of cairn.conf (default: $CAIRN_CONF, ./cairn.conf or ./cairn-dev/cairn.conf)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print the result as JSON")
	root.AddCommand(longRunning(devCmd(g)), longRunning(monCmd(g)), longRunning(osdCmd(g)), poolCmd(g), objCmd(g),
		statusCmd(g), healthCmd(g), longRunning(benchCmd(g)), baselineCopyCmd(), scrubCmd(g), volumeCmd(g), longRunning(nbdCmd(g)), s3Cmd(g), dashboardCmd(g))
	root.SetArgs(args)
	if c, _, err := root.Find(args); err == nil && slices.Equal(args, os.Args[1:]) {
		reexecForSysmon(c) // see sysmon.go; returns only if it does not
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "cairn: %v\n", err)
		return 1
	}
	return 0
}

func (g *globals) dial(ctx context.Context) (*client.Client, error) {
	cfg, err := client.LoadConfig(g.conf)
	if err != nil {
		return nil, err
	}
	return client.Dial(ctx, cfg)
}

func (g *globals) meta(ctx context.Context) (*meta.Store, *client.Config, error) {
	cfg, err := client.LoadConfig(g.conf)
	if err != nil {
		return nil, nil, err
	}
	ms, err := meta.ConnectConf(ctx, cfg)
	if err != nil {
		return nil, nil, cfg.ConnectError(err)
	}
	return ms, cfg, nil
}

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
