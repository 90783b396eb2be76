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
