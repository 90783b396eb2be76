// Package meta is the only importer of etcd. It stores the cluster map as one
// JSON document changed by compare-and-swap on its epoch, holds OSD liveness
// leases, per-OSD usage and health reports, snapshot groups, S3 users
// with their access keys and the running gateways, and drives the keeper: its election and the watch
// of the leases (what the keeper changes in the map is package keeper's pure
// policy).
//
// Nothing here is on the IO path: clients and OSDs read the map once and then
// follow a watch, and S3 gateways likewise keep every access key in memory
// (S3Credentials).
package meta

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/keeper"
	pgrec "github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/report"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// Key layout in etcd.
const (
	prefix       = "/cairn/"
	keyMap       = prefix + "map"
	prefixAlive  = prefix + "alive/"  // alive/<osd id> → addr, held by the OSD's lease
	prefixStats  = prefix + "stats/"  // stats/<osd id> → OSDStats JSON, under the same lease
	prefixReport = prefix + "report/" // report/<kind>/<id> → Report JSON
	prefixPG     = prefix + "pg/"     // pg/<pgid> → pg.Record JSON, written by the PG's primary
	keyElection  = prefix + "keeper"
)

// ErrNoMap means the cluster was never initialised in this etcd.
var ErrNoMap = errors.New("no cluster map in etcd: the cluster was not created (run cairn dev, or check --etcd-endpoints)")

// Store is a connection to the cluster's etcd.
type Store struct {
	cli    *clientv3.Client
	watchN atomic.Uint64 // numbers each watch's stream (see watch)
	// ctx ends when the Store closes: background work stops with it.
	ctx     context.Context
	stop    context.CancelFunc
	orphans orphans // leases to revoke once etcd answers (revoke.go)
}

// watch starts a watch on a gRPC stream of its own. The etcd client runs
// every watch of one context on one shared stream, which carries the auth
// token it was opened with: once that token expired (etcd forgets an idle
// one after 5 minutes), etcd refuses every new watch on the stream, and a
// re-established watch failed again at once, forever (a volume lost its
// snapshot-group registration 10,925 times in 5 minutes). A new stream
// carries the token as refreshed by the client's last request.
func (s *Store) watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	ctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx),
		"cairn-watch", strconv.FormatUint(s.watchN.Add(1), 10))
	return s.cli.Watch(ctx, key, opts...)
}

// Auth is the etcd user and password to authenticate with.
type Auth struct {
	User, Password string // "": no user
	// TLS, for https endpoints: whom to trust (conf.EtcdClientTLS).
	TLS *tls.Config
}

// AuthFor returns the etcd credentials and TLS configuration a cairn.conf
// implies (nil: none).
func AuthFor(c *conf.Config) *Auth {
	a := &Auth{}
	if c.EtcdAuth {
		a.User, a.Password = conf.EtcdUser, c.EtcdPassword()
	}
	if c.EtcdTLS() {
		cfg, err := c.EtcdClientTLS()
		if err != nil {
			// Only a broken random source gets here; connecting without
			// trust would fail anyway, with etcd's error.
			cfg = &tls.Config{MinVersion: tls.VersionTLS13}
		}
		a.TLS = cfg
	}
	if a.User == "" && a.TLS == nil {
		return nil
	}
	return a
}

// ConnectConf opens a client to the etcd that cairn.conf names.
func ConnectConf(ctx context.Context, c *conf.Config) (*Store, error) {
	return Connect(ctx, c.EtcdEndpoints, AuthFor(c))
}

// Connect opens a client to the given etcd endpoints and checks it answers.
func Connect(ctx context.Context, endpoints []string, auth *Auth) (*Store, error) {
	cc := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if auth != nil {
		cc.Username, cc.Password, cc.TLS = auth.User, auth.Password, auth.TLS
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Get(cctx, keyMap); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s does not answer: %w", strings.Join(endpoints, ","), err)
	}
	sctx, stop := context.WithCancel(context.Background())
	return &Store{cli: cli, ctx: sctx, stop: stop}, nil
}

// Close releases the etcd client. Leases given up while etcd did not
// answer and not ended since are left to run out.
func (s *Store) Close() error {
	s.stop()
	return s.cli.Close()
}

// Init stores an empty epoch-1 map for fsid unless a map exists already. It
// returns the map in etcd, and fails if that map belongs to another cluster.
func (s *Store) Init(ctx context.Context, fsid string) (*clustermap.Map, error) {
	now := time.Now().UTC()
	m := &clustermap.Map{Epoch: 1, FSID: fsid, Created: now, Modified: now, NextPoolID: 1}
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(keyMap), "=", 0)).
		Then(clientv3.OpPut(keyMap, string(m.Encode()))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd: init map: %w", err)
	}
	cur, _, err := s.Map(ctx)
	if err != nil {
		return nil, err
	}
	if cur.FSID != fsid {
		return nil, fmt.Errorf("etcd holds the map of cluster %s, not %s: wrong etcd endpoints?", cur.FSID, fsid)
	}
	return cur, nil
}

// Map returns the current map and the etcd revision it was read at.
func (s *Store) Map(ctx context.Context) (*clustermap.Map, int64, error) {
	resp, err := s.cli.Get(ctx, keyMap)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: read map: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, ErrNoMap
	}
	m, err := clustermap.Decode(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return m, resp.Header.Revision, nil
}

// ErrNoChange may be returned by an Update function to leave the map as it is.
var ErrNoChange = errors.New("no change")

// Update applies fn to a copy of the current map and stores the result with
// the epoch incremented, retrying if another writer got there first. fn may
// return ErrNoChange to store nothing; any other error aborts the update.
func (s *Store) Update(ctx context.Context, fn func(m *clustermap.Map) error) (*clustermap.Map, error) {
	for attempt := 0; ; attempt++ {
		resp, err := s.cli.Get(ctx, keyMap)
		if err != nil {
			return nil, fmt.Errorf("etcd: read map: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return nil, ErrNoMap
		}
		kv := resp.Kvs[0]
		cur, err := clustermap.Decode(kv.Value)
		if err != nil {
			return nil, err
		}
		next := cur.Clone()
		if err := fn(next); err != nil {
			if errors.Is(err, ErrNoChange) {
				return cur, nil
			}
			return nil, err
		}
		next.Epoch = cur.Epoch + 1
		next.Modified = time.Now().UTC()
		if err := next.Validate(); err != nil {
			return nil, fmt.Errorf("refusing to store an invalid map: %w", err)
		}
		tr, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(keyMap), "=", kv.ModRevision)).
			Then(clientv3.OpPut(keyMap, string(next.Encode()))).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("etcd: write map: %w", err)
		}
		if tr.Succeeded {
			return next, nil
		}
		if attempt > 1000 {
			return nil, errors.New("etcd: map update lost the race 1000 times in a row")
		}
	}
}

// Watch calls fn with every new map, starting with the current one, until ctx
// ends. Maps arrive in epoch order; a broken watch is re-established.
func (s *Store) Watch(ctx context.Context, fn func(*clustermap.Map)) {
	var last clustermap.Epoch
	deliver := func(m *clustermap.Map) {
		if m.Epoch > last {
			last = m.Epoch
			fn(m)
		}
	}
	for ctx.Err() == nil {
		m, rev, err := s.Map(ctx)
		if err != nil {
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		deliver(m)
		wch := s.watch(ctx, keyMap, clientv3.WithRev(rev+1))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				if m, err := clustermap.Decode(ev.Kv.Value); err == nil {
					deliver(m)
				}
			}
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// OSDStats is what a live OSD publishes about itself under its lease
// (package report owns its shape).
type OSDStats = report.OSDStats

// FlashCacheStats is an OSD's flash read cache, as it publishes it.
type FlashCacheStats = report.FlashCacheStats

// WorkProgress is one background worker's progress (recovery, scrub).
type WorkProgress = report.WorkProgress

// PGRecord returns the record of pg and its etcd revision (0: none yet).
func (s *Store) PGRecord(ctx context.Context, pg string) (*pgrec.Record, int64, error) {
	resp, err := s.cli.Get(ctx, prefixPG+pg)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: read pg %s: %w", pg, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	var r pgrec.Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return nil, 0, fmt.Errorf("etcd: pg %s record is damaged: %v", pg, err)
	}
	return &r, resp.Kvs[0].ModRevision, nil
}

// ErrPGRecordRaced means another primary changed a PG record first.
var ErrPGRecordRaced = errors.New("etcd: pg record changed concurrently")

// PutPGRecord replaces pg's record if it is still at revision rev (0: absent)
// and returns the new revision.
func (s *Store) PutPGRecord(ctx context.Context, pg string, r pgrec.Record, rev int64) (int64, error) {
	b, _ := json.Marshal(r)
	key := prefixPG + pg
	tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd: write pg %s: %w", pg, err)
	}
	if !tr.Succeeded {
		return 0, ErrPGRecordRaced
	}
	return tr.Header.Revision, nil
}

// PGRecords returns every PG record, by PG id.
func (s *Store) PGRecords(ctx context.Context) (map[string]pgrec.Record, error) {
	resp, err := s.cli.Get(ctx, prefixPG, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list pg records: %w", err)
	}
	out := map[string]pgrec.Record{}
	for _, kv := range resp.Kvs {
		var r pgrec.Record
		if json.Unmarshal(kv.Value, &r) == nil {
			out[strings.TrimPrefix(string(kv.Key), prefixPG)] = r
		}
	}
	return out, nil
}

// DeletePGRecords removes the records of a deleted pool's PGs.
func (s *Store) DeletePGRecords(ctx context.Context, pool clustermap.PoolID) error {
	_, err := s.cli.Delete(ctx, prefixPG+strconv.Itoa(int(pool))+".", clientv3.WithPrefix())
	return err
}

// Lease is an OSD's liveness registration.
type Lease struct {
	s    *Store
	id   clientv3.LeaseID
	osd  clustermap.OSDID
	done <-chan struct{}
}

// Done is closed when the lease is lost (etcd unreachable for longer than the TTL).
func (l *Lease) Done() <-chan struct{} { return l.done }

// RegisterAlive grants a lease of ttl, stores the OSD's alive key under it and
// keeps it alive until ctx ends or Revoke is called.
func (s *Store) RegisterAlive(ctx context.Context, osd clustermap.OSDID, addr string, ttl time.Duration) (*Lease, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	g, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd: grant lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, prefixAlive+strconv.Itoa(int(osd)), addr, clientv3.WithLease(g.ID)); err != nil {
		return nil, fmt.Errorf("etcd: register %s: %w", osd, err)
	}
	ka, err := s.cli.KeepAlive(ctx, g.ID)
	if err != nil {
		return nil, fmt.Errorf("etcd: keep lease alive: %w", err)
	}
	done := make(chan struct{})
	go func() {
		for range ka {
		}
		close(done)
	}()
	return &Lease{s: s, id: g.ID, osd: osd, done: done}, nil
}

// PublishStats stores usage figures under the lease, so they vanish with it.
func (l *Lease) PublishStats(ctx context.Context, st OSDStats) error {
	b, _ := json.Marshal(st)
	_, err := l.s.cli.Put(ctx, prefixStats+strconv.Itoa(int(l.osd)), string(b), clientv3.WithLease(l.id))
	return err
}

// Revoke ends the lease now (clean shutdown), deleting the alive key.
func (l *Lease) Revoke(ctx context.Context) error {
	_, err := l.s.cli.Revoke(ctx, l.id)
	return err
}

// ExpireIfAt ends osd's liveness lease now if its alive key still names
// addr and addr still refuses connections. Callers use it when a
// connection to addr was refused: nothing listens there, so the OSD
// process is gone, and waiting for its lease to run out would only stall
// IO. The keeper then marks it down at once.
//
// The refusal the caller saw may be older than a restart of the OSD at the
// same address, whose new lease the key then holds. An OSD listens before
// it registers, so dialling addr again after reading the key tells the
// two apart: a new process answers, and its lease is kept.
func (s *Store) ExpireIfAt(ctx context.Context, osd clustermap.OSDID, addr string) (bool, error) {
	resp, err := s.cli.Get(ctx, prefixAlive+strconv.Itoa(int(osd)))
	if err != nil {
		return false, err
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != addr || resp.Kvs[0].Lease == 0 {
		return false, nil
	}
	if !refuses(ctx, addr) {
		return false, nil
	}
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		return false, err
	}
	return true, nil
}

// refuses reports whether a connection to addr is refused now.
func refuses(ctx context.Context, addr string) bool {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Alive returns the OSDs that currently hold a live lease.
func (s *Store) Alive(ctx context.Context) (map[clustermap.OSDID]bool, error) {
	resp, err := s.cli.Get(ctx, prefixAlive, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list alive: %w", err)
	}
	out := map[clustermap.OSDID]bool{}
	for _, kv := range resp.Kvs {
		if id, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefixAlive)); err == nil {
			out[clustermap.OSDID(id)] = true
		}
	}
	return out, nil
}

// Stats returns the usage published by live OSDs.
func (s *Store) Stats(ctx context.Context) (map[clustermap.OSDID]OSDStats, error) {
	resp, err := s.cli.Get(ctx, prefixStats, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list stats: %w", err)
	}
	out := map[clustermap.OSDID]OSDStats{}
	for _, kv := range resp.Kvs {
		id, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefixStats))
		if err != nil {
			continue
		}
		var st OSDStats
		if json.Unmarshal(kv.Value, &st) == nil {
			out[clustermap.OSDID(id)] = st
		}
	}
	return out, nil
}

// Report is a health event worth an operator's attention (package report
// owns its shape).
type Report = report.Event

// AddReport records a health event; the same kind/OSD/PG/object adds to its count.
func (s *Store) AddReport(ctx context.Context, r Report) error {
	key := prefixReport + r.Kind + "/" + strconv.Itoa(int(r.OSD)) + "/" + r.PG + "/" + r.Object
	for i := 0; i < 10; i++ {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return err
		}
		var rev int64
		r.Count = 1
		if len(resp.Kvs) == 1 {
			var old Report
			if json.Unmarshal(resp.Kvs[0].Value, &old) == nil {
				r.Count = old.Count + 1
			}
			rev = resp.Kvs[0].ModRevision
		}
		b, _ := json.Marshal(r)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return err
		}
		if tr.Succeeded {
			return nil
		}
	}
	return errors.New("etcd: report update kept racing")
}

// Reports lists recorded health events.
func (s *Store) Reports(ctx context.Context) ([]Report, error) {
	resp, err := s.cli.Get(ctx, prefixReport, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []Report
	for _, kv := range resp.Kvs {
		var r Report
		if json.Unmarshal(kv.Value, &r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// ArchiveReports marks every report not archived yet as archived at now,
// and returns how many it marked. A report that changes meanwhile (the
// event happened again) stays as it is.
func (s *Store) ArchiveReports(ctx context.Context, now time.Time) (int, error) {
	resp, err := s.cli.Get(ctx, prefixReport, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range resp.Kvs {
		var r Report
		if json.Unmarshal(kv.Value, &r) != nil || !r.Archived.IsZero() {
			continue
		}
		r.Archived = now
		b, _ := json.Marshal(r)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpPut(string(kv.Key), string(b))).Commit()
		if err != nil {
			return n, err
		}
		if tr.Succeeded {
			n++
		}
	}
	return n, nil
}

// ClearReports deletes all recorded health events of a kind ("" for all).
func (s *Store) ClearReports(ctx context.Context, kind string) error {
	_, err := s.cli.Delete(ctx, prefixReport+kind, clientv3.WithPrefix())
	return err
}

// RunKeeper drives the keeper's policy (package keeper): while this process
// is the elected keeper (one per cluster, any daemon may run for it), it
// applies keeper.Decide to the map whenever a liveness key changes, and
// every 2 s for the down-out interval. It returns when ctx ends.
func (s *Store) RunKeeper(ctx context.Context, name string, logf func(string, ...any)) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(5), concurrency.WithContext(ctx))
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		el := concurrency.NewElection(sess, keyElection)
		if err := el.Campaign(ctx, name); err != nil {
			sess.Close()
			sleep(ctx, time.Second)
			continue
		}
		logf("keeper: %s leads", name)
		s.keep(ctx, sess, logf)
		sess.Close()
	}
}

func (s *Store) keep(ctx context.Context, sess *concurrency.Session, logf func(string, ...any)) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.watch(wctx, prefixAlive, clientv3.WithPrefix())
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		if err := s.reconcile(ctx, logf); err != nil && ctx.Err() == nil {
			logf("keeper: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-sess.Done():
			return
		case _, ok := <-wch:
			if !ok {
				return
			}
		case <-tick.C:
		}
	}
}

// reconcile applies the keeper's policy (keeper.Decide) to the map and
// the live leases.
func (s *Store) reconcile(ctx context.Context, logf func(string, ...any)) error {
	alive, err := s.Alive(ctx)
	if err != nil {
		return err
	}
	var changes []string
	_, err = s.Update(ctx, func(m *clustermap.Map) error {
		var next *clustermap.Map
		next, changes = keeper.Decide(m, alive, time.Now().UTC())
		if next == nil {
			return ErrNoChange
		}
		*m = *next
		return nil
	})
	if err == nil && len(changes) > 0 {
		logf("keeper: marked %s", strings.Join(changes, ", "))
	}
	return err
}

// EnableAuth turns on etcd authentication with the user root and password,
// unless it is on already. Safe to race from several mons.
func EnableAuth(ctx context.Context, endpoint string, auth *Auth) error {
	password := auth.Password
	s, err := Connect(ctx, []string{endpoint}, auth)
	if err != nil {
		return fmt.Errorf("etcd auth: %w", err)
	}
	defer s.Close()
	st, err := s.cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd auth: status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	ignoreExists := func(err error) error {
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	if _, err := s.cli.UserAdd(ctx, conf.EtcdUser, password); ignoreExists(err) != nil {
		return fmt.Errorf("etcd auth: add user: %w", err)
	}
	if _, err := s.cli.RoleAdd(ctx, "root"); ignoreExists(err) != nil {
		return fmt.Errorf("etcd auth: add role: %w", err)
	}
	if _, err := s.cli.UserGrantRole(ctx, conf.EtcdUser, "root"); err != nil {
		return fmt.Errorf("etcd auth: grant role: %w", err)
	}
	if _, err := s.cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd auth: enable: %w", err)
	}
	return nil
}

// Client exposes the raw etcd client to the mon (health checks) and tests.
func (s *Store) Client() *clientv3.Client { return s.cli }
