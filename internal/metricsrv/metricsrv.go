// Package metricsrv serves a daemon's Prometheus metrics at /metrics on an
// admin address, separate from the daemon's own protocol so a scraper
// never competes with clients for a connection. OSDs and gateways use it;
// what they measure is their own.
package metricsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves reg's metrics at http://addr/metrics until ctx ends, and
// returns the address it listens on (addr may end in :0).
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, logf func(string, ...any)) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("metrics server on %s: %v", ln.Addr(), err)
		}
	}()
	return ln.Addr(), nil
}
