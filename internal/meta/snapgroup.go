package meta

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// snapWriterTTL bounds how long a vanished writer can hold up a snapshot
// (a variable so that a test can make leases outlast an etcd restart).
var snapWriterTTL = 10 * time.Second

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
	reg, err := w.register(ctx, wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go w.run(wctx, reg)
	return w, nil
}

// registration is one lease of a writer: its key lives under it.
type registration struct {
	lease  clientv3.LeaseID
	ka     <-chan *clientv3.LeaseKeepAliveResponse
	stopKA context.CancelFunc // ends the client's keepalive of the lease
	rev    int64              // the revision the number was read at
}

// drop gives a registration up. Its keepalive stops first: the client
// would otherwise keep an abandoned lease, and its key with an old number,
// alive for as long as the writer runs. Then the lease ends, at once or as
// soon as etcd answers (revoke.go says why that matters).
func (w *SnapWriter) drop(r registration) {
	if r.lease == 0 {
		return // none: registering failed as the writer left
	}
	r.stopKA()
	w.s.revoke(r.lease)
}

// register grants a lease, announces the writer, reads the number and
// reports it. The key is written before the number is read, so a snapshot
// taken concurrently either sees this writer or is seen by it. A lease
// granted by an attempt that fails later is ended, not left to count as a
// writer.
func (w *SnapWriter) register(ctx, wctx context.Context) (registration, error) {
	cli := w.s.cli
	g, err := cli.Grant(ctx, int64(snapWriterTTL/time.Second))
	if err != nil {
		return registration{}, fmt.Errorf("etcd: grant lease: %w", err)
	}
	reg := registration{lease: g.ID, stopKA: func() {}}
	if err := w.announce(ctx, &reg); err != nil {
		w.s.revoke(g.ID)
		return registration{}, err
	}
	kctx, stopKA := context.WithCancel(wctx)
	if reg.ka, err = cli.KeepAlive(kctx, g.ID); err != nil {
		stopKA()
		w.s.revoke(g.ID)
		return registration{}, fmt.Errorf("etcd: keep lease alive: %w", err)
	}
	reg.stopKA = stopKA
	return reg, nil
}

// announce writes the writer's key under reg's lease, reads the number,
// applies it and writes it as the number in use.
func (w *SnapWriter) announce(ctx context.Context, reg *registration) error {
	cli := w.s.cli
	key := prefixSnapWriter + w.group + "/" + strconv.FormatInt(int64(reg.lease), 16)
	if _, err := cli.Put(ctx, key, "0", clientv3.WithLease(reg.lease)); err != nil {
		return fmt.Errorf("etcd: register writer of %s: %w", w.group, err)
	}
	seq, rev, err := w.s.snapSeq(ctx, w.group)
	if err != nil {
		return err
	}
	w.apply(seq, true)
	if _, err := cli.Put(ctx, key, strconv.FormatUint(seq, 10), clientv3.WithLease(reg.lease)); err != nil {
		return fmt.Errorf("etcd: register writer of %s: %w", w.group, err)
	}
	reg.rev = rev
	return nil
}

func (w *SnapWriter) run(ctx context.Context, reg registration) {
	defer close(w.done)
	var backoff time.Duration
	for ctx.Err() == nil {
		since := time.Now()
		why := w.follow(ctx, reg)
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
		// back), and register anew.
		w.apply(0, false)
		w.drop(reg)
		sleep(ctx, backoff)
		reg = w.reregister(ctx)
	}
	w.drop(reg)
}

// reregister registers until it succeeds or ctx ends.
func (w *SnapWriter) reregister(ctx context.Context) registration {
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		reg, err := w.register(rctx, ctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return reg
		}
		sleep(ctx, time.Second)
	}
}

// follow applies every new number until the lease is lost or ctx ends, and
// says why it stopped.
func (w *SnapWriter) follow(ctx context.Context, reg registration) string {
	key := prefixSnapWriter + w.group + "/" + strconv.FormatInt(int64(reg.lease), 16)
	wch := w.s.watch(ctx, prefixSnapSeq+w.group, clientv3.WithRev(reg.rev+1))
	for {
		select {
		case _, ok := <-reg.ka:
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
				_, err = w.s.cli.Put(pctx, key, strconv.FormatUint(seq, 10), clientv3.WithLease(reg.lease))
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
// every registered writer uses it. It fails when they have not after wait,
// or when ctx ends first, naming the writers that lag and what each is
// likely waiting for.
func (s *Store) NextSnap(ctx context.Context, group string, wait time.Duration) (uint64, error) {
	next, err := s.bumpSnapSeq(ctx, group)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var lagging []*mvccpb.KeyValue
	for {
		resp, err := s.cli.Get(wctx, prefixSnapWriter+group+"/", clientv3.WithPrefix())
		switch {
		case err != nil && wctx.Err() != nil && lagging != nil:
			return 0, s.lagError(ctx, group, next, lagging, time.Since(start), wait)
		case err != nil:
			return 0, fmt.Errorf("snapshot %d of %s: waiting for writers: %w", next, group, err)
		}
		lagging = lagging[:0]
		for _, kv := range resp.Kvs {
			if v, err := strconv.ParseUint(string(kv.Value), 10, 64); err != nil || v < next {
				lagging = append(lagging, kv)
			}
		}
		if len(lagging) == 0 {
			return next, nil
		}
		wch := s.watch(wctx, prefixSnapWriter+group+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		select {
		case <-wch:
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			return 0, s.lagError(ctx, group, next, lagging, time.Since(start), wait)
		}
	}
}

// bumpSnapSeq increments the group's number with a compare-and-swap and
// returns the new one.
func (s *Store) bumpSnapSeq(ctx context.Context, group string) (uint64, error) {
	key := prefixSnapSeq + group
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
		t, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
			Then(clientv3.OpPut(key, strconv.FormatUint(cur+1, 10))).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: %w", err)
		}
		if t.Succeeded {
			return cur + 1, nil
		}
	}
}

// snapLagAdvice is what an operator can do about writers that lag.
const snapLagAdvice = "A running writer switches once its writes under the old number finish, " +
	"which needs their placement groups active (cairn status); a writer whose process stopped, " +
	"or that lost etcd, counts until its lease runs out, %v after etcd last heard from it " +
	"(and a restart of etcd gives every lease that long again). Take the snapshot again then"

// lagError says why snapshot next did not count: the writers that had not
// switched to it (the first few), whether each still renews its lease,
// and what to do.
func (s *Store) lagError(ctx context.Context, group string, next uint64, lagging []*mvccpb.KeyValue, waited, wait time.Duration) error {
	var b strings.Builder
	for i, kv := range lagging {
		if i == 4 {
			fmt.Fprintf(&b, "; %d more", len(lagging)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.describeWriter(kv))
	}
	what := fmt.Sprintf("%d open writer(s) did not switch to it within %v", len(lagging), wait)
	if ctx.Err() != nil {
		what = fmt.Sprintf("gave up after %v (%v) while %d open writer(s) had not switched to it",
			waited.Round(time.Millisecond), context.Cause(ctx), len(lagging))
	}
	return fmt.Errorf("snapshot %d of %s: %s: %s. "+snapLagAdvice, next, group, what, b.String(), snapWriterTTL)
}

// describeWriter names a registered writer, the number it uses, and from
// its lease whether its process still runs: a client renews its lease a
// few times per TTL, so one not renewed for half of it has likely stopped.
func (s *Store) describeWriter(kv *mvccpb.KeyValue) string {
	key := string(kv.Key)
	desc := fmt.Sprintf("writer %s at number %s", key[strings.LastIndexByte(key, '/')+1:], kv.Value)
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	l, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	switch {
	case err != nil:
		return desc
	case l.TTL <= 0:
		return desc + ", its lease just ended"
	case l.GrantedTTL-l.TTL > l.GrantedTTL/2:
		return fmt.Sprintf("%s, its lease not renewed for %ds, ending in %ds (its process stopped or lost etcd)", desc, l.GrantedTTL-l.TTL, l.TTL)
	default:
		return desc + ", its lease renewed lately (its process runs and a write of it under the old number has not finished, or etcd restarted lately)"
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
