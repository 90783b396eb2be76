package meta

import (
	"context"
	"testing"
	"time"
)

// A registered gateway is listed while its registration runs and not
// after it returns.
func TestRegisterGateway(t *testing.T) {
	s := connect(t, startEtcd(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g := Gateway{Kind: "s3", Endpoint: "https://127.0.0.1:9000", Pool: "s3", Host: "h1", PID: 42, Started: time.Now().UTC().Truncate(time.Second)}
	go func() { s.RegisterGateway(ctx, g, 5*time.Second); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		gws, err := s.Gateways(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(gws) == 1 {
			if gws[0] != g {
				t.Fatalf("listed %+v, registered %+v", gws[0], g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway is not listed: %+v", gws)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if gws, err := s.Gateways(context.Background()); err != nil || len(gws) != 0 {
		t.Fatalf("after the registration ended: %+v %v", gws, err)
	}
}

// TestGatewayGoneAfterEtcdRestart: a gateway that stops while etcd is down
// cannot end its registration then, and etcd, restarted, grants its lease
// its whole TTL again; status would list the stopped gateway for that
// long after every restart. The registration ends as soon as etcd answers.
func TestGatewayGoneAfterEtcdRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	r := newRestartableEtcd(t)
	s := connect(t, r.ep)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g := Gateway{Kind: "s3", Endpoint: "http://127.0.0.1:9000", Pool: "s3", Host: "h1", PID: 7}
	go func() { s.RegisterGateway(ctx, g, time.Minute); close(done) }()
	waitGateways(t, s, 1)
	r.stop()
	cancel() // the gateway stops; etcd cannot hear of it now
	<-done
	r.start()
	waitGateways(t, s, 0)
}

// waitGateways waits up to 20 s (etcd's client reconnects with a growing
// delay) for n gateways to be listed.
func waitGateways(t *testing.T, s *Store, n int) {
	t.Helper()
	var gws []Gateway
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var err error
		gws, err = s.Gateways(gctx)
		cancel()
		if err == nil && len(gws) == n {
			return
		}
	}
	t.Fatalf("%d gateways listed after 20 s, want %d: %+v", len(gws), n, gws)
}
