package meta

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta/metatest"
	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd runs a single-member etcd for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startEtcdWith(t, func(*embed.Config) {})
}

// startEtcdWith runs a single-member etcd configured further by opt.
func startEtcdWith(t *testing.T, opt func(*embed.Config)) string {
	t.Helper()
	return metatest.StartEtcd(t, opt)
}

func connect(t *testing.T, ep string) *Store {
	t.Helper()
	s, err := Connect(context.Background(), []string{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMapCASAndWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	ctx := context.Background()
	s := connect(t, ep)
	if _, _, err := s.Map(ctx); err != ErrNoMap {
		t.Fatalf("empty etcd: want ErrNoMap, got %v", err)
	}
	if _, err := s.Init(ctx, "fsid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Init(ctx, "fsid-2"); err == nil {
		t.Fatal("Init with another fsid must refuse the existing map")
	}

	var mu sync.Mutex
	var seen []clustermap.Epoch
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go connect(t, ep).Watch(wctx, func(m *clustermap.Map) {
		mu.Lock()
		seen = append(seen, m.Epoch)
		mu.Unlock()
	})

	// 8 writers × 10 updates, each adding one host: none may be lost.
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := connect(t, ep)
			for i := 0; i < 10; i++ {
				if _, err := s.Update(ctx, func(m *clustermap.Map) error {
					m.UpsertHost(fmt.Sprintf("h%d-%d", w, i), "")
					return nil
				}); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	m, _, err := s.Map(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Hosts) != 80 || m.Epoch != 81 {
		t.Fatalf("after 80 concurrent updates: %d hosts at epoch %d, want 80 at 81", len(m.Hosts), m.Epoch)
	}
	// A failing update stores nothing; ErrNoChange stores nothing.
	if _, err := s.Update(ctx, func(m *clustermap.Map) error { m.Pools = append(m.Pools, clustermap.Pool{Name: ""}); return nil }); err == nil {
		t.Fatal("an update producing an invalid map was stored")
	}
	if _, err := s.Update(ctx, func(*clustermap.Map) error { return ErrNoChange }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n, last := len(seen), clustermap.Epoch(0)
		if n > 0 {
			last = seen[n-1]
		}
		ordered := true
		for i := 1; i < n; i++ {
			ordered = ordered && seen[i] > seen[i-1]
		}
		mu.Unlock()
		if !ordered {
			t.Fatalf("watch delivered epochs out of order: %v", seen)
		}
		if last == 81 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch reached epoch %d, want 81", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKeeperMarksExpiredOSDDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := connect(t, ep)
	if _, err := s.Init(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, func(m *clustermap.Map) error {
		m.UpsertHost("h", "")
		m.UpsertOSD(clustermap.OSD{ID: 0, Host: "h", Class: clustermap.ClassSSD, Weight: 1, In: true})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	go s.RunKeeper(ctx, "test", t.Logf)
	osdCtx, kill := context.WithCancel(ctx)
	osdStore := connect(t, ep)
	if _, err := osdStore.RegisterAlive(osdCtx, 0, "127.0.0.1:1", time.Second); err != nil {
		t.Fatal(err)
	}
	waitOSD := func(up bool) time.Duration {
		start := time.Now()
		for time.Since(start) < 15*time.Second {
			m, _, err := s.Map(ctx)
			if err == nil {
				if o, _ := m.OSD(0); o.Up == up {
					return time.Since(start)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("osd.0 never became up=%v", up)
		return 0
	}
	waitOSD(true)
	kill() // stops the keepalives, as a SIGKILL would
	d := waitOSD(false)
	t.Logf("marked down %s after its keepalives stopped (TTL 1 s)", d)
	m, _, _ := s.Map(ctx)
	if o, _ := m.OSD(0); o.DownSince.IsZero() {
		t.Fatal("a down OSD must record since when")
	}
}

// TestExpireIfAtSparesARestartedOSD: a peer's refused connection may date
// from before the OSD restarted at the same address; the new process's
// lease must survive it, and only an address that still refuses ends it.
func TestExpireIfAtSparesARestartedOSD(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	ctx := context.Background()
	s := connect(t, ep)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if _, err := s.RegisterAlive(ctx, 0, addr, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	alive := func() bool {
		a, err := s.Alive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return a[0]
	}
	if ok, err := s.ExpireIfAt(ctx, 0, addr); ok || err != nil || !alive() {
		t.Fatalf("ExpireIfAt ended the lease of an OSD that listens at %s (ok=%v err=%v)", addr, ok, err)
	}
	ln.Close()
	if ok, err := s.ExpireIfAt(ctx, 0, "127.0.0.1:1"); ok || err != nil || !alive() {
		t.Fatalf("ExpireIfAt ended a lease registered at another address (ok=%v err=%v)", ok, err)
	}
	if ok, err := s.ExpireIfAt(ctx, 0, addr); !ok || err != nil || alive() {
		t.Fatalf("ExpireIfAt kept the lease of an OSD whose address refuses (ok=%v err=%v)", ok, err)
	}
}
