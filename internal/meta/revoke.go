package meta

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leases given up while etcd does not answer. etcd keeps a lease it was
// never told to end, and when it restarts it grants every lease it holds
// its whole TTL again: a snapshot-group registration given up during an
// outage (its volume closed, or its writer registered anew) would return
// with etcd as a writer that never switches, holding every snapshot back
// for a TTL after each restart of etcd, and for ever while etcd restarts
// more often than that (as in a run of power cuts). So the process that
// gave a lease up ends it as soon as etcd answers again.

// orphans are the leases still to be revoked.
type orphans struct {
	mu      sync.Mutex
	ids     map[clientv3.LeaseID]bool
	running bool // a goroutine is revoking them
}

// orphanRetry is the pause between rounds of revoking orphaned leases.
const orphanRetry = 500 * time.Millisecond

// revoke ends lease: now if etcd answers within a moment, else as soon as
// it does (while the Store is open).
func (s *Store) revoke(lease clientv3.LeaseID) {
	if s.revokeOnce(lease) == nil {
		return
	}
	s.orphans.mu.Lock()
	defer s.orphans.mu.Unlock()
	if s.orphans.ids == nil {
		s.orphans.ids = map[clientv3.LeaseID]bool{}
	}
	s.orphans.ids[lease] = true
	if !s.orphans.running {
		s.orphans.running = true
		go s.revokeOrphans()
	}
}

// revokeOnce tries to end lease once; a lease etcd no longer has is ended.
func (s *Store) revokeOnce(lease clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	_, err := s.cli.Revoke(ctx, lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// revokeOrphans revokes the orphaned leases until none is left or the
// Store closes.
func (s *Store) revokeOrphans() {
	for {
		s.orphans.mu.Lock()
		var ids []clientv3.LeaseID
		for id := range s.orphans.ids {
			ids = append(ids, id)
		}
		if len(ids) == 0 || s.ctx.Err() != nil {
			s.orphans.running = false
			s.orphans.mu.Unlock()
			return
		}
		s.orphans.mu.Unlock()
		for _, id := range ids {
			if s.revokeOnce(id) == nil {
				s.orphans.mu.Lock()
				delete(s.orphans.ids, id)
				s.orphans.mu.Unlock()
			}
		}
		sleep(s.ctx, orphanRetry)
	}
}

// orphaned counts the leases given up that etcd has not ended yet.
func (s *Store) orphaned() int {
	s.orphans.mu.Lock()
	defer s.orphans.mu.Unlock()
	return len(s.orphans.ids)
}
