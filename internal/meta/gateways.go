package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cairn-storage/cairn/internal/report"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// prefixGateway holds one key per running gateway:
// gateway/<kind>/<host>/<pid> → report.Gateway JSON, under its lease.
const prefixGateway = prefix + "gateway/"

// Gateway is a gateway's registration (package report owns its shape).
type Gateway = report.Gateway

// RegisterGateway keeps g's key in etcd under a lease of ttl until ctx
// ends, then removes it (revoking the lease, later if etcd is down then). A lease lost (etcd unreachable for longer than
// ttl) is granted again and the key written again, after a second's pause
// per failed attempt; it returns only when ctx ends. Nothing depends on the
// key but cairn status, which lists the gateways.
func (s *Store) RegisterGateway(ctx context.Context, g Gateway, ttl time.Duration) {
	key := prefixGateway + g.Kind + "/" + g.Host + "/" + strconv.Itoa(g.PID)
	val, _ := json.Marshal(g)
	secs := max(int64(ttl/time.Second), 1)
	for ctx.Err() == nil {
		id, ka, err := s.putUnderLease(ctx, key, string(val), secs)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for range ka {
		}
		// Ended now, or as soon as etcd answers again (revoke.go): a
		// lease left to etcd would come back whole at its next restart,
		// listing a gateway that stopped, or an abandoned registration.
		s.revoke(id)
	}
}

// putUnderLease grants a lease of secs, writes key under it and keeps the
// lease alive until ctx ends; the channel closes when it ends or is lost.
func (s *Store) putUnderLease(ctx context.Context, key, val string, secs int64) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, error) {
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return 0, nil, fmt.Errorf("etcd: grant lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, key, val, clientv3.WithLease(g.ID)); err != nil {
		s.revoke(g.ID)
		return 0, nil, fmt.Errorf("etcd: register %s: %w", key, err)
	}
	ka, err := s.cli.KeepAlive(ctx, g.ID)
	if err != nil {
		s.revoke(g.ID)
		return 0, nil, fmt.Errorf("etcd: keep lease alive: %w", err)
	}
	return g.ID, ka, nil
}

// Gateways returns the registered gateways, by kind, host and endpoint.
func (s *Store) Gateways(ctx context.Context) ([]Gateway, error) {
	resp, err := s.cli.Get(ctx, prefixGateway, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list gateways: %w", err)
	}
	out := []Gateway{}
	for _, kv := range resp.Kvs {
		var g Gateway
		if json.Unmarshal(kv.Value, &g) == nil {
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Endpoint < b.Endpoint
	})
	return out, nil
}
