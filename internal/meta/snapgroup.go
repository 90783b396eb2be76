package meta

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Snapshot groups: the writers of one volume all send the volume's newest
// snapshot number with their writes, so the OSDs keep what a snapshot
// needs before it changes. A snapshot therefore counts only once every open
// writer uses its number. etcd holds the number and, under each writer's
// lease, the number that writer has switched to; taking a snapshot bumps the
// number with a compare-and-swap and waits until no writer lags.
const (
	prefixSnapSeq    = prefix + "snapseq/"    // snapseq/<group> → newest snapshot number
	prefixSnapWriter = prefix + "snapwriter/" // snapwriter/<group>/<lease> → number in use
)

// snapWriterTTL bounds how long a vanished writer can hold up a snapshot.
const snapWriterTTL = 10 * time.Second

// SnapWriter is one writer's membership of a snapshot group.
type SnapWriter struct {
	s      *Store
	group  string
	apply  func(seq uint64, ok bool)
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	lost error // why the registration was last lost, if it was
}

// Lost returns why the registration was last lost, nil if it never was.
func (w *SnapWriter) Lost() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// JoinSnapGroup registers a writer of group. apply(seq, true) is called
// with the number to use now and whenever it grows; the writer must have
// finished every write under the old number when apply returns.
// apply(0, false) means the registration was lost (etcd unreachable): the
// writer must stop writing until apply is called with ok again.
func (s *Store) JoinSnapGroup(ctx context.Context, group string, apply func(seq uint64, ok bool)) (*SnapWriter, error) {
	wctx, cancel := context.WithCancel(context.Background())
	w := &SnapWriter{s: s, group: group, apply: apply, cancel: cancel, done: make(chan struct{})}
	lease, ka, rev, err := w.register(ctx, wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go w.run(wctx, lease, ka, rev)
	return w, nil
}

// register grants a lease, announces the writer, reads the number and
// reports it. The key is written before the number is read, so a snapshot
// taken concurrently either sees this writer or is seen by it.
func (w *SnapWriter) register(ctx, wctx context.Context) (clientv3.LeaseID, <-chan *clientv3.LeaseKeepAliveResponse, int64, error) {
	cli := w.s.cli
	g, err := cli.Grant(ctx, int64(snapWriterTTL/time.Second))
	if err != nil {
		return 0, nil, 0, fmt.Errorf("etcd: grant lease: %w", err)
	}
	key := prefixSnapWriter + w.group + "/" + strconv.FormatInt(int64(g.ID), 16)
	if _, err := cli.Put(ctx, key, "0", clientv3.WithLease(g.ID)); err != nil {
		return 0, nil, 0, fmt.Errorf("etcd: register writer of %s: %w", w.group, err)
	}
	seq, rev, err := w.s.snapSeq(ctx, w.group)
	if err != nil {
		return 0, nil, 0, err
	}
	w.apply(seq, true)
	if _, err := cli.Put(ctx, key, strconv.FormatUint(seq, 10), clientv3.WithLease(g.ID)); err != nil {
		return 0, nil, 0, fmt.Errorf("etcd: register writer of %s: %w", w.group, err)
	}
	ka, err := cli.KeepAlive(wctx, g.ID)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("etcd: keep lease alive: %w", err)
	}
	return g.ID, ka, rev, nil
}

func (w *SnapWriter) run(ctx context.Context, lease clientv3.LeaseID, ka <-chan *clientv3.LeaseKeepAliveResponse, rev int64) {
	defer close(w.done)
	var backoff time.Duration
	for ctx.Err() == nil {
		since := time.Now()
		why := w.follow(ctx, lease, ka, rev)
		if ctx.Err() != nil {
			break
		}
		// A registration that fails again at once (a fault that
		// registering does not cure) is retried ever more slowly, not in a
		// loop that floods etcd and the log.
		if time.Since(since) < time.Second {
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		} else {
			backoff = 0
		}
		w.mu.Lock()
		w.lost = fmt.Errorf("%s at %s", why, time.Now().Format(time.StampMilli))
		w.mu.Unlock()
		// The lease is lost or the watch broke. Stop writing first, then
		// end the lease (if it still lives, its key would hold snapshots
		// back forever), and register anew.
		w.apply(0, false)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		w.s.cli.Revoke(rctx, lease)
		cancel()
		sleep(ctx, backoff)
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			lease, ka, rev, err = w.register(rctx, ctx)
			cancel()
			if err == nil {
				break
			}
			sleep(ctx, time.Second)
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	w.s.cli.Revoke(rctx, lease)
	cancel()
}

// follow applies every new number until the lease is lost or ctx ends, and
// says why it stopped.
func (w *SnapWriter) follow(ctx context.Context, lease clientv3.LeaseID, ka <-chan *clientv3.LeaseKeepAliveResponse, rev int64) string {
	key := prefixSnapWriter + w.group + "/" + strconv.FormatInt(int64(lease), 16)
	wch := w.s.watch(ctx, prefixSnapSeq+w.group, clientv3.WithRev(rev+1))
	for {
		select {
		case _, ok := <-ka:
			if !ok {
				return "the lease's keepalive ended (lease expired or etcd unreachable)"
			}
		case resp, ok := <-wch:
			if !ok {
				return "the watch of the snapshot number closed"
			}
			if err := resp.Err(); err != nil {
				return fmt.Sprintf("the watch of the snapshot number failed: %v", err)
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				seq, err := strconv.ParseUint(string(ev.Kv.Value), 10, 64)
				if err != nil {
					continue
				}
				w.apply(seq, true)
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = w.s.cli.Put(pctx, key, strconv.FormatUint(seq, 10), clientv3.WithLease(lease))
				cancel()
				if err != nil {
					return fmt.Sprintf("announcing number %d failed: %v", seq, err)
				}
			}
		}
	}
}

// Leave ends the membership (the writer is closing).
func (w *SnapWriter) Leave() {
	w.cancel()
	<-w.done
}

func (s *Store) snapSeq(ctx context.Context, group string) (uint64, int64, error) {
	resp, err := s.cli.Get(ctx, prefixSnapSeq+group)
	if err != nil {
		return 0, 0, fmt.Errorf("etcd: read snapshot number of %s: %w", group, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, resp.Header.Revision, nil
	}
	seq, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("etcd: snapshot number of %s is %q", group, resp.Kvs[0].Value)
	}
	return seq, resp.Header.Revision, nil
}

// SnapSeq returns the group's newest snapshot number (0: none yet).
func (s *Store) SnapSeq(ctx context.Context, group string) (uint64, error) {
	seq, _, err := s.snapSeq(ctx, group)
	return seq, err
}

// NextSnap allocates the group's next snapshot number and returns once
// every registered writer uses it, or fails after wait naming how many lag.
func (s *Store) NextSnap(ctx context.Context, group string, wait time.Duration) (uint64, error) {
	key := prefixSnapSeq + group
	var next uint64
	for {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("etcd: %w", err)
		}
		var cur uint64
		var modRev int64
		if len(resp.Kvs) > 0 {
			if cur, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
				return 0, fmt.Errorf("etcd: snapshot number of %s is %q", group, resp.Kvs[0].Value)
			}
			modRev = resp.Kvs[0].ModRevision
		}
		next = cur + 1
		t, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, strconv.FormatUint(next, 10))).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: %w", err)
		}
		if t.Succeeded {
			break
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		resp, err := s.cli.Get(wctx, prefixSnapWriter+group+"/", clientv3.WithPrefix())
		if err != nil {
			return 0, fmt.Errorf("snapshot %d of %s: waiting for writers: %w", next, group, err)
		}
		lagging := 0
		for _, kv := range resp.Kvs {
			if v, err := strconv.ParseUint(string(kv.Value), 10, 64); err != nil || v < next {
				lagging++
			}
		}
		if lagging == 0 {
			return next, nil
		}
		wch := s.watch(wctx, prefixSnapWriter+group+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			return 0, fmt.Errorf("snapshot %d of %s: %d open writer(s) did not switch to it within %v (a stopped process holds its registration for up to %v)", next, group, lagging, wait, snapWriterTTL)
		}
	}
}

// SnapWriters counts the writers registered in a snapshot group; a writer
// that vanished without leaving counts until its lease runs out.
func (s *Store) SnapWriters(ctx context.Context, group string) (int, error) {
	resp, err := s.cli.Get(ctx, prefixSnapWriter+group+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcd: counting the writers of %s: %w", group, err)
	}
	return int(resp.Count), nil
}

// DeleteSnapGroup forgets a group (its volume was removed).
func (s *Store) DeleteSnapGroup(ctx context.Context, group string) error {
	_, err := s.cli.Delete(ctx, prefixSnapSeq+group)
	return err
}
