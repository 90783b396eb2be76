package cli

// `cairn nbd`: the NBD gateway's command.

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/internal/metricsrv"
	"github.com/cairn-storage/cairn/internal/nbd"
	"github.com/cairn-storage/cairn/internal/nbdgw"
	"github.com/cairn-storage/cairn/internal/runtimepolicy"
)

func nbdCmd(g *globals) *cobra.Command {
	var listen, debugListen, metricsListen, tlsCert, tlsKey, tlsClientCA string
	var handshakeTimeout time.Duration
	var maxConns int
	cmd := &cobra.Command{
		Use:   "nbd",
		Short: "serve volumes over NBD: export name POOL/NAME",
		Long: `Serves every volume of the cluster over the NBD protocol (fixed newstyle
handshake; NBD_OPT_LIST, INFO and GO with block sizes; read, write, flush,
trim, write-zeroes, FUA; structured replies with holes for unwritten areas;
block status (base:allocation) so clients skip what was never written; safe
with several connections per export). Writes are acknowledged when
durable on every copy, so FLUSH has nothing left to do.

POOL/NAME@SNAP exports a snapshot, read-only. With --tls-cert and --tls-key
the server requires TLS (NBD_OPT_STARTTLS) before anything else; with
--tls-client-ca it also requires a client certificate signed by that CA.

  nbdinfo 'nbds://127.0.0.1:10809/default/vm1?tls-certificates=/etc/pki/cairn'

  qemu-img info nbd://127.0.0.1:10809/default/vm1
  nbdinfo --list nbd://127.0.0.1:10809`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			load := runtimepolicy.ForGateway(ctx)
			if debugListen != "" {
				if err := serveDebug(debugListen); err != nil {
					return err
				}
			}
			c, err := g.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("nbd: listen on %s: %w", listen, err)
			}
			tc, err := nbdgw.TLSConfig(tlsCert, tlsKey, tlsClientCA)
			if err != nil {
				return err
			}
			if handshakeTimeout <= 0 || maxConns <= 0 {
				return fmt.Errorf("nbd: --handshake-timeout and --max-connections must be positive")
			}
			exports := nbdgw.NewExports(c, logger.Printf)
			if metricsListen != "" {
				exports.Metrics = nbdgw.NewMetrics()
				at, err := metricsrv.Serve(ctx, metricsListen, exports.Metrics.Registry, logger.Printf)
				if err != nil {
					return fmt.Errorf("nbd: %w", err)
				}
				logger.Printf("nbd: metrics on http://%s/metrics", at)
			}
			srv := &nbd.Server{Exports: exports, Logf: logger.Printf, TLS: tc, Load: load,
				HandshakeTimeout: handshakeTimeout, MaxConns: maxConns}
			logger.Printf("nbd: serving volumes on %s", ln.Addr())
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			return srv.Serve(ln)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:10809", "address to serve NBD on")
	cmd.Flags().StringVar(&debugListen, "debug-listen", "", "serve Go profiling (/debug/pprof) on this address")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this address")
	cmd.Flags().StringVar(&tlsCert, "tls-cert", "", "PEM certificate (chain): require TLS")
	cmd.Flags().StringVar(&tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&tlsClientCA, "tls-client-ca", "", "PEM CA certificates: also require a client certificate they signed")
	cmd.Flags().DurationVar(&handshakeTimeout, "handshake-timeout", nbd.DefaultHandshakeTimeout, "close a connection that has not chosen an export within this time")
	cmd.Flags().IntVar(&maxConns, "max-connections", nbd.DefaultMaxConns, "connections served at once; more are refused (and logged)")
	return cmd
}
