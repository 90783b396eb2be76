package cli

// `cairn s3` (with --listen): the S3 gateway's server. The gateway itself
// is package s3gw; this file wires it to a pool (poolStore), to the users'
// keys (meta.S3Credentials) and to an http.Server.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/metricsrv"
	"github.com/cairn-storage/cairn/internal/report"
	"github.com/cairn-storage/cairn/internal/runtimepolicy"
	"github.com/cairn-storage/cairn/internal/s3gw"
)

// s3Gateway holds the flags of the gateway server.
type s3Gateway struct {
	listen, pool, dataPool, region string
	debugListen                    string
	tlsCert, tlsKey, metricsListen string
	domains                        []string
	gcGrace, intentTimeout         time.Duration
	indexShardKeys                 int
}

// addS3Gateway makes `cairn s3` (the parent of user and key) serve S3 when
// given --listen.
func addS3Gateway(cmd *cobra.Command, g *globals) {
	var o s3Gateway
	cmd.Long = `With --listen, serves the S3 API on that address for the buckets kept in
--pool (created beforehand: cairn pool create s3). Requests are signed with
SigV4 by the access keys of cairn s3 key create; path-style and, for the
--domain names, virtual-host-style addressing. Several gateways may serve one
pool at once. Each collects the data of replaced and deleted objects after
--gc-grace and that of writes abandoned by a gateway that died after
--intent-timeout.

--pool holds the bucket registry and indexes (omap, changed by guarded
transactions); it may be erasure-coded, though a replicated one answers
listings and small PUTs faster. The data of a bucket goes to the pool named
when the bucket was created: --data-pool (default --pool), which may be
erasure-coded, like an RGW placement target's data pool. Changing --data-pool moves no existing
bucket: each keeps its data where it was.

  cairn s3 --listen 127.0.0.1:9000 --pool s3
  aws --endpoint-url http://127.0.0.1:9000 s3 ls

  cairn pool create s3-ec --ec 2+2            # new buckets' data: 2 bytes stored per byte
  cairn s3 --listen 127.0.0.1:9000 --pool s3 --data-pool s3-ec`
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if o.listen == "" {
			return cmd.Help()
		}
		return o.run(cmd.Context(), g)
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "", "serve S3 on this address (e.g. 127.0.0.1:9000)")
	f.StringVar(&o.pool, "pool", "s3", "the pool that holds the bucket registry and indexes (replicated), and the data of buckets without a data pool")
	f.StringVar(&o.dataPool, "data-pool", "", "the pool new buckets keep their data in, e.g. an erasure-coded one (default: --pool); existing buckets keep theirs")
	f.StringVar(&o.region, "region", "", "the only region requests may be signed for (default: any)")
	f.StringSliceVar(&o.domains, "domain", []string{"localhost"}, "host names under which BUCKET.NAME addresses a bucket")
	f.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain): serve HTTPS")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	f.DurationVar(&o.gcGrace, "gc-grace", 15*time.Minute, "how long replaced or deleted data stays for reads in flight")
	f.DurationVar(&o.intentTimeout, "intent-timeout", time.Hour, "after how long a write whose gateway died is reclaimed (longer than any upload of one part takes)")
	f.IntVar(&o.indexShardKeys, "index-shard-keys", 0, "keys a bucket index shard holds before it splits in two (0: 50000)")
	f.StringVar(&o.debugListen, "debug-listen", "", "serve Go profiling (/debug/pprof) on this address")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "serve Prometheus metrics at /metrics on this address")
	cmd.AddCommand(s3BucketCmd(g))
	longRunning(cmd)
}

func (o s3Gateway) run(ctx context.Context, g *globals) error {
	load := runtimepolicy.ForGateway(ctx)
	if o.debugListen != "" {
		if err := serveDebug(o.debugListen); err != nil {
			return err
		}
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return fmt.Errorf("s3: TLS needs both --tls-cert and --tls-key")
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	pool, err := o.openPools(c)
	if err != nil {
		return err
	}
	ms, _, err := g.meta(ctx)
	if err != nil {
		return err
	}
	defer ms.Close()
	creds, err := ms.WatchS3Credentials(ctx)
	if err != nil {
		return err
	}
	defer creds.Close()
	cfg := s3gw.Config{Store: poolStore{pool}, DataPool: o.dataPool, DataStore: dataStores(c), Lookup: creds.Lookup, Region: o.region, Domains: o.domains,
		GCGrace: o.gcGrace, IntentTimeout: o.intentTimeout, IndexShardKeys: o.indexShardKeys, Logf: logger.Printf}
	if o.metricsListen != "" {
		cfg.Metrics = s3gw.NewMetrics()
		at, err := metricsrv.Serve(ctx, o.metricsListen, cfg.Metrics.Registry, logger.Printf)
		if err != nil {
			return err
		}
		logger.Printf("s3: metrics on http://%s/metrics", at)
	}
	gw := s3gw.New(cfg)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("s3: listen on %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: countLoad(gw, load), MaxHeaderBytes: 64 << 10, ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, ErrorLog: logger}
	go gw.Run(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	logger.Printf("s3: serving the buckets of pool %q on %s://%s%s", o.pool, scheme, ln.Addr(), o.dataPoolNote(c))
	defer registerGateway(ctx, ms, report.Gateway{Kind: "s3", Endpoint: scheme + "://" + ln.Addr().String(), Pool: o.pool})()
	if o.tlsCert != "" {
		err = srv.ServeTLS(ln, o.tlsCert, o.tlsKey)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// openPools opens the gateway's pool, which must be replicated (the
// registry and indexes are omaps), and checks the data pool exists.
func (o *s3Gateway) openPools(c *client.Client) (*client.Pool, error) {
	pool, err := c.Pool(o.pool)
	if errors.Is(err, client.ErrPoolNotFound) {
		return nil, fmt.Errorf("s3: pool %q does not exist: create it (cairn pool create %s) or name another with --pool", o.pool, o.pool)
	}
	if err != nil {
		return nil, err
	}
	if o.dataPool == o.pool {
		o.dataPool = ""
	}
	if o.dataPool != "" {
		if _, err := c.Pool(o.dataPool); errors.Is(err, client.ErrPoolNotFound) {
			return nil, fmt.Errorf("s3: data pool %q does not exist: create it (cairn pool create %s, --ec K+M for an erasure-coded one) or name another with --data-pool", o.dataPool, o.dataPool)
		} else if err != nil {
			return nil, err
		}
	}
	return pool, nil
}

// dataPoolNote says where new buckets' data goes, for the start-up line.
func (o s3Gateway) dataPoolNote(c *client.Client) string {
	if o.dataPool == "" {
		return ""
	}
	kind := "(replicated)"
	if p, err := c.Pool(o.dataPool); err == nil {
		if info, err := p.Info(); err == nil && info.EC != "" {
			kind = ecDataPoolNote(info.EC, info.StripeUnit)
		}
	}
	return fmt.Sprintf("; new buckets keep their data in pool %q %s", o.dataPool, kind)
}

// ecDataPoolNote describes an erasure-coded data pool, with advice when
// its chunks are too small for a GET to send them as they come.
func ecDataPoolNote(code string, unit int) string {
	note := fmt.Sprintf("(erasure-coded %s, %s chunks)", code, unitLabel(unit))
	if unit < client.MinPiece {
		note += "; its GETs copy the chunks into one buffer first: a data pool made with --stripe-unit 256K is read without that copy"
	}
	return note
}

// dataStores opens data pools by name for the gateway.
func dataStores(c *client.Client) func(string) (s3gw.Store, error) {
	return func(name string) (s3gw.Store, error) {
		p, err := c.Pool(name)
		if err != nil {
			return nil, storeErr(err)
		}
		return poolStore{p}, nil
	}
}

// registerGateway lists the gateway g in etcd (cairn status shows it)
// while it runs; the function it returns removes it and waits until done.
func registerGateway(ctx context.Context, ms *meta.Store, g report.Gateway) (stop func()) {
	g.Host, _ = os.Hostname()
	g.PID, g.Started = os.Getpid(), time.Now().UTC().Truncate(time.Second)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ms.RegisterGateway(ctx, g, 10*time.Second)
	}()
	return func() {
		cancel()
		<-done
	}
}

// countLoad counts requests in and out for the runtime policy, which gives
// the gateway more processors while requests overlap.
func countLoad(h http.Handler, load *runtimepolicy.Load) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		load.Begin()
		defer load.End()
		h.ServeHTTP(w, r)
	})
}

// poolStore is the gateway's Store on a cairn pool: the same operations,
// with client's errors turned into s3gw's.
type poolStore struct{ p *client.Pool }

func storeErr(err error) error {
	var pe *client.PreconditionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return &s3gw.PreconditionError{Key: pe.Key, Value: pe.Value, Exists: pe.Exists}
	case errors.Is(err, client.ErrNotFound):
		return fmt.Errorf("%w: %v", s3gw.ErrNotFound, err)
	case errors.Is(err, client.ErrPoolNotFound):
		return fmt.Errorf("%w: %v", s3gw.ErrNoPool, err)
	case errors.Is(err, client.ErrNoSpace):
		return fmt.Errorf("%w: %s", s3gw.ErrNoSpace, s3gw.Reason(err, client.ErrNoSpace))
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("%w: %s", s3gw.ErrUnavailable, s3gw.Reason(err, client.ErrUnavailable))
	}
	return err
}

func (s poolStore) Put(ctx context.Context, name string, data []byte) error {
	return storeErr(s.p.Put(ctx, name, data))
}

func (s poolStore) ReadAt(ctx context.Context, name string, off, length uint64) ([]byte, uint64, error) {
	b, size, err := s.p.ReadAt(ctx, name, off, length)
	return b, size, storeErr(err)
}

// ReadAtPooled reads the positions of an erasure-coded pool straight
// (client.Pool.ReadSettledPieces): the gateway's data stripes are written
// once before the index names them, so their positions nearly always agree.
func (s poolStore) ReadAtPooled(ctx context.Context, name string, off, length uint64) ([][]byte, uint64, func(), error) {
	bufs, size, release, err := s.p.ReadSettledPieces(ctx, name, off, length)
	return bufs, size, release, storeErr(err)
}

func (s poolStore) Delete(ctx context.Context, name string) error {
	return storeErr(s.p.Delete(ctx, name))
}

func (s poolStore) OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error) {
	m, err := s.p.OmapGet(ctx, name, keys...)
	return m, storeErr(err)
}

func (s poolStore) OmapApply(ctx context.Context, name string, t s3gw.Txn) error {
	txn := client.OmapTxn{Set: t.Set, Rm: t.Rm, RmFrom: t.RmFrom, RmTo: t.RmTo, Create: t.Create}
	for _, c := range t.If {
		txn.If = append(txn.If, client.OmapCond{Key: c.Key, Value: c.Value, Absent: c.Absent})
	}
	return storeErr(s.p.OmapApply(ctx, name, txn))
}

func (s poolStore) OmapList(ctx context.Context, name, start, end string, limit int) ([]s3gw.KV, bool, error) {
	kvs, more, err := s.p.OmapList(ctx, name, start, end, limit)
	out := make([]s3gw.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = s3gw.KV{Key: kv.Key, Value: kv.Value}
	}
	return out, more, storeErr(err)
}

func (s poolStore) OmapListDelim(ctx context.Context, name, prefix, delim, after string, limit int) (s3gw.Listing, error) {
	l, err := s.p.OmapListDelim(ctx, name, prefix, delim, after, limit)
	out := s3gw.Listing{Prefixes: l.Prefixes, More: l.More, Next: l.Next, Entries: make([]s3gw.KV, len(l.Entries))}
	for i, kv := range l.Entries {
		out.Entries[i] = s3gw.KV{Key: kv.Key, Value: kv.Value}
	}
	return out, storeErr(err)
}
