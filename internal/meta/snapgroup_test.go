package meta

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// TestSnapGroup: a new snapshot number is returned only once every
// registered writer switched to it, a writer that cannot switch holds it
// back with an error naming the wait, and a writer that leaves no longer
// counts.
func TestSnapGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	s := connect(t, ep)
	ctx := context.Background()

	if seq, err := s.SnapSeq(ctx, "g"); err != nil || seq != 0 {
		t.Fatalf("a new group: seq %d, %v", seq, err)
	}
	var mu sync.Mutex
	used := map[int]uint64{}
	join := func(i int, block *sync.Mutex) *SnapWriter {
		w, err := s.JoinSnapGroup(ctx, "g", func(seq uint64, ok bool) {
			if block != nil {
				block.Lock() // a write in flight under the old number
				block.Unlock()
			}
			mu.Lock()
			used[i] = seq
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1 := join(1, nil)
	w2 := join(2, nil)
	seq, err := s.NextSnap(ctx, "g", 10*time.Second)
	if err != nil || seq != 1 {
		t.Fatalf("first snapshot: %d, %v", seq, err)
	}
	mu.Lock()
	if used[1] != 1 || used[2] != 1 {
		t.Fatalf("NextSnap returned before the writers switched: %v", used)
	}
	mu.Unlock()

	// A writer busy with a write holds the snapshot back until it is done.
	var busy sync.Mutex
	w3 := join(3, &busy)
	busy.Lock()
	go func() {
		time.Sleep(500 * time.Millisecond)
		busy.Unlock()
	}()
	if seq, err := s.NextSnap(ctx, "g", 10*time.Second); err != nil || seq != 2 {
		t.Fatalf("second snapshot: %d, %v", seq, err)
	}
	mu.Lock()
	if used[3] != 2 {
		t.Fatalf("the busy writer had not switched: %v", used)
	}
	mu.Unlock()

	// One that never finishes makes the snapshot fail, saying why.
	var stuck sync.Mutex
	w4 := join(4, &stuck)
	stuck.Lock()
	_, err = s.NextSnap(ctx, "g", time.Second)
	if err == nil || !strings.Contains(err.Error(), "1 open writer(s) did not switch") {
		t.Fatalf("a stuck writer: want an error naming it, got %v", err)
	}
	if !strings.Contains(err.Error(), "its lease renewed lately (its process runs") {
		t.Fatalf("a stuck writer that runs: the error does not say it runs: %v", err)
	}
	stuck.Unlock()
	w4.Leave()

	// A writer whose lease is lost pauses, registers again, and then
	// counts as before.
	var paused atomic.Bool
	w5, err := s.JoinSnapGroup(ctx, "g", func(seq uint64, ok bool) {
		if !ok {
			paused.Store(true)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Get(ctx, prefixSnapWriter+"g/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs { // every writer loses its lease
		if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.cli.Get(ctx, prefixSnapWriter+"g/", clientv3.WithPrefix())
		if err == nil && len(r.Kvs) == len(resp.Kvs) && paused.Load() {
			break // the writers paused and are back under new leases
		}
		if time.Now().After(deadline) {
			t.Fatalf("writers whose leases were revoked did not pause and register again (paused: %v)", paused.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if seq, err := s.NextSnap(ctx, "g", 10*time.Second); err != nil || seq != 4 {
		t.Fatalf("after a writer re-registered: %d, %v", seq, err)
	}
	if err := w5.Lost(); err == nil || !strings.Contains(err.Error(), "keepalive ended") {
		t.Fatalf("a writer whose lease was revoked says it lost it because: %v", err)
	}
	w5.Leave()

	w1.Leave()
	w2.Leave()
	w3.Leave()
	if seq, err := s.NextSnap(ctx, "g", 5*time.Second); err != nil || seq != 5 {
		t.Fatalf("with no writers: %d, %v", seq, err)
	}
	if err := s.DeleteSnapGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if seq, _ := s.SnapSeq(ctx, "g"); seq != 0 {
		t.Fatalf("a deleted group still has seq %d", seq)
	}
}

// A writer that joins once the client's auth token has expired (etcd drops
// an idle one, after 5 minutes by default) stays registered: its watch
// must not ride the stream an earlier watch opened with the old token,
// which etcd refuses every new watch on.
func TestSnapGroupAfterAuthTokenExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcdWith(t, func(c *embed.Config) { c.AuthTokenTTL = 1 })
	ctx := context.Background()
	if err := EnableAuth(ctx, ep, &Auth{User: conf.EtcdUser, Password: "secret"}); err != nil {
		t.Fatal(err)
	}
	s, err := Connect(ctx, []string{ep}, &Auth{User: conf.EtcdUser, Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Init(ctx, "fsid"); err != nil {
		t.Fatal(err)
	}
	// A long-lived watch, as every gateway and OSD keeps on the map.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	maps := make(chan *clustermap.Map, 1)
	go s.Watch(wctx, func(m *clustermap.Map) {
		select {
		case maps <- m:
		default:
		}
	})
	<-maps
	time.Sleep(3 * time.Second) // the token expires

	w, err := s.JoinSnapGroup(ctx, "vol", func(uint64, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	time.Sleep(time.Second)
	if err := w.Lost(); err != nil {
		t.Fatalf("registration lost after the token expired: %v", err)
	}
	if seq, err := s.NextSnap(ctx, "vol", 5*time.Second); err != nil || seq != 1 {
		t.Fatalf("snapshot: %d, %v", seq, err)
	}
}
