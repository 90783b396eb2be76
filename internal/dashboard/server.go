package dashboard

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/health"
	"github.com/cairn-storage/cairn/internal/report"
)

// Source is where the cluster's state is read (meta.Store in cairn mon).
type Source interface {
	Map(ctx context.Context) (*clustermap.Map, int64, error)
	Stats(ctx context.Context) (map[clustermap.OSDID]report.OSDStats, error)
	Reports(ctx context.Context) ([]report.Event, error)
}

// Options configure a dashboard.
type Options struct {
	Source Source
	// Catalog lists volumes and buckets (nil: none shown). It may be
	// slow: it runs in the background every CatalogEvery.
	Catalog func(ctx context.Context) (Catalog, error)
	// Password, if set, is asked for (HTTP basic authentication, user
	// User) on every request.
	User, Password string
	// SampleEvery is how often the history takes a sample (default 10 s);
	// CatalogEvery how often the catalog is refreshed (default 30 s).
	SampleEvery, CatalogEvery time.Duration
	Logf                      func(string, ...any)
}

// Dashboard serves the pages. Make one with New, run its samplers with
// Run, and serve it as an http.Handler.
type Dashboard struct {
	o       Options
	mu      sync.Mutex
	history *History
	catalog Catalog
}

// New returns a dashboard that keeps an hour of history.
func New(o Options) *Dashboard {
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.CatalogEvery <= 0 {
		o.CatalogEvery = 30 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return &Dashboard{o: o, history: NewHistory(time.Hour)}
}

// Run samples the cluster and refreshes the catalog until ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	go d.every(ctx, d.o.SampleEvery, d.sample)
	if d.o.Catalog != nil {
		d.every(ctx, d.o.CatalogEvery, d.refreshCatalog)
	}
	<-ctx.Done()
}

func (d *Dashboard) every(ctx context.Context, period time.Duration, fn func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dashboard) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.o.SampleEvery)
	defer cancel()
	stats, err := d.o.Source.Stats(ctx)
	if err != nil {
		return
	}
	used, total := health.Usage(stats)
	d.mu.Lock()
	d.history.Add(time.Now(), stats, used, total)
	d.mu.Unlock()
}

func (d *Dashboard) refreshCatalog(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, d.o.CatalogEvery)
	defer cancel()
	cat, err := d.o.Catalog(ctx)
	if err != nil {
		d.mu.Lock()
		d.catalog.Error = fmt.Sprintf("listing volumes and buckets failed: %v (shown: the last list)", err)
		d.mu.Unlock()
		return
	}
	cat.Updated = time.Now().UTC()
	d.mu.Lock()
	d.catalog = cat
	d.mu.Unlock()
}

// view reads the cluster now and assembles the page's view.
func (d *Dashboard) view(ctx context.Context) (View, error) {
	m, _, err := d.o.Source.Map(ctx)
	if err != nil {
		return View{}, err
	}
	stats, err := d.o.Source.Stats(ctx)
	if err != nil {
		return View{}, err
	}
	events, err := d.o.Source.Reports(ctx)
	if err != nil {
		return View{}, err
	}
	d.mu.Lock()
	samples, cat := d.history.Samples(), d.catalog
	d.mu.Unlock()
	return Build(m, stats, events, samples, cat, time.Now()), nil
}

// ServeHTTP serves / (the page) and /api/status (its view as JSON).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="cairn dashboard", charset="UTF-8"`)
		http.Error(w, "the dashboard needs the cluster's dashboard password (cairn dashboard password prints it)", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "the dashboard is read-only: GET only", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case "/", "/api/status":
	default:
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	v, err := d.view(ctx)
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the cluster's state from etcd: %v", err), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == "/api/status" {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := page.Execute(w, v); err != nil {
		d.o.Logf("dashboard: rendering: %v", err)
	}
}

func (d *Dashboard) authorized(r *http.Request) bool {
	if d.o.Password == "" {
		return true
	}
	u, p, ok := r.BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(u), []byte(d.o.User)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(d.o.Password)) == 1
}

// Serve runs a dashboard on addr until ctx ends.
func Serve(ctx context.Context, addr string, o Options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	d := New(o)
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	go d.Run(ctx)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}
