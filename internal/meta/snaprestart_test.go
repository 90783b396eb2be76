package meta

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/meta/metatest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// restartableEtcd is a single-member etcd that a test stops and starts
// again on the same data and address, as a mon restarting does.
type restartableEtcd struct {
	t   *testing.T
	cfg func() *embed.Config
	e   *embed.Etcd
	ep  string
}

func newRestartableEtcd(t *testing.T) *restartableEtcd {
	t.Helper()
	cu, pu, dir := metatest.FreeURL(t), metatest.FreeURL(t), t.TempDir()
	r := &restartableEtcd{t: t, ep: cu.String()}
	r.cfg = func() *embed.Config {
		cfg := embed.NewConfig()
		cfg.Dir = dir
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialCluster = cfg.Name + "=" + pu.String()
		cfg.LogLevel = "fatal"
		return cfg
	}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartableEtcd) start() {
	r.t.Helper()
	e, err := embed.StartEtcd(r.cfg())
	if err != nil {
		r.t.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		r.t.Fatal("etcd not ready")
	}
	r.e = e
}

func (r *restartableEtcd) stop() {
	if r.e != nil {
		r.e.Close()
		r.e = nil
	}
}

// TestSnapGroupEtcdRestart: etcd grants every lease it holds its whole TTL
// again when it restarts, so a registration given up while etcd was down
// came back with it as a writer that never switches, and held the next
// snapshot back (for ever while etcd restarted more often than the TTL, as
// in a run of power cuts). The process that gave it up ends it as soon as
// it reaches etcd again, and a writer that stayed open switches as before.
func TestSnapGroupEtcdRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	// Leases that outlast the restart and the client's reconnection
	// by far: what a registration given up holds back is then plain.
	defer func(ttl time.Duration) { snapWriterTTL = ttl }(snapWriterTTL)
	snapWriterTTL = time.Minute
	r := newRestartableEtcd(t)
	s := connect(t, r.ep) // the process that writes
	ctx := context.Background()
	gone, err := s.JoinSnapGroup(ctx, "g", func(uint64, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	var used atomic.Uint64
	open, err := s.JoinSnapGroup(ctx, "g", func(seq uint64, ok bool) {
		if ok {
			used.Store(seq)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Leave()

	r.stop()
	gone.Leave() // etcd cannot hear of it now
	r.start()

	// The writers' process reaches etcd again after its client's
	// reconnection delay (which grows while etcd is down).
	for start := time.Now(); ; {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.cli.Get(gctx, "x")
		cancel()
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the client does not reach etcd again: %v", err)
		}
	}
	other := connect(t, r.ep) // the process taking the snapshot
	seq, err := other.NextSnap(ctx, "g", 5*time.Second)
	if err != nil || seq != 1 {
		t.Fatalf("a snapshot once etcd is back: %d, %v", seq, err)
	}
	if used.Load() != 1 {
		t.Fatalf("NextSnap returned before the open writer switched (it uses %d)", used.Load())
	}
	for start := time.Now(); s.orphaned() != 0; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d given-up lease(s) still to end 10 s after etcd answered", s.orphaned())
		}
	}
}

// TestSnapLagError: a snapshot that open writers hold back says which,
// whether each process still runs, and what to do; one whose caller gave
// up says so, not that it waited its whole bound.
func TestSnapLagError(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	ctx := context.Background()
	s := connect(t, ep)
	// What etcd holds of a writer whose process stopped: its key under a
	// lease nobody renews.
	g, err := s.cli.Grant(ctx, int64(snapWriterTTL/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, prefixSnapWriter+"g/"+strconv.FormatInt(int64(g.ID), 16), "0", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = s.NextSnap(cctx, "g", 30*time.Second)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "gave up after") || strings.Contains(err.Error(), "within 30s") {
		t.Fatalf("a snapshot whose caller gave up after a second: %v", err)
	}
	_, err = s.NextSnap(ctx, "g", 6*time.Second)
	for _, want := range []string{"1 open writer(s) did not switch to it within 6s", "at number 0", "not renewed for", "its process stopped", "Take the snapshot again"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a snapshot held back by a stopped writer: want %q in the error, got %v", want, err)
		}
	}
}

// TestSnapWriterDropStopsKeepalive: a registration given up (its watch
// broke, or announcing a number failed) whose revocation does not get
// through must not stay kept alive by the client: its key, at an old
// number, would hold every snapshot back for as long as the writer is
// open.
func TestSnapWriterDropStopsKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	s := connect(t, ep)
	ctx := context.Background()
	w, err := s.JoinSnapGroup(ctx, "g", func(uint64, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg, err := w.register(ctx, wctx) // a registration anew
	if err != nil {
		t.Fatal(err)
	}
	s.stop() // its revocation cannot get through
	w.drop(reg)
	// The client renews a lease every third of its TTL.
	time.Sleep(snapWriterTTL/3 + 2*time.Second)
	l, err := s.cli.TimeToLive(ctx, reg.lease)
	if err != nil {
		t.Fatal(err)
	}
	if l.TTL > 0 && l.GrantedTTL-l.TTL < int64(snapWriterTTL/3/time.Second) {
		t.Fatalf("a dropped registration's lease is still renewed: %d of %d s left", l.TTL, l.GrantedTTL)
	}
}
