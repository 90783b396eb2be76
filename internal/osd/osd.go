// Package osd is the OSD daemon: it owns one object store, serves the
// object operations of the placement groups it is primary for, replicates
// writes to the other OSDs of each group, and applies the writes its peers
// replicate to it.
//
// It is the driver of package pg, which decides (peering, what each member
// lacks, which copy scrub repairs from): osd owns the goroutines, the IO
// and the locks around those decisions. It imports pg, objstore, rpc,
// proto, placement, mapview and meta; no package imports it.
package osd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// Options configure one OSD daemon.
type Options struct {
	ID      clustermap.OSDID // -1: allocate a new id on first start
	DataDir string
	MetaDir string // "" = DataDir/meta
	Listen  string // host:port, IPv4 or [IPv6]
	// MetricsListen, if set, serves Prometheus metrics at /metrics there.
	MetricsListen string
	Host          string
	Rack          string
	Class         clustermap.DeviceClass
	// Flash names the device of MetaDir for the map (clustermap.OSD.Flash):
	// "" detects it, "none" says it is shared with no other OSD.
	Flash    string
	Weight   float64
	LeaseTTL time.Duration
	Conf     *conf.Config
	Logf     func(string, ...any)
	// ReserveBytes, CacheBytes, DataCacheBytes and ReserveDataCache are
	// passed to the object store (0, false: its defaults).
	ReserveBytes     int64
	CacheBytes       int64
	DataCacheBytes   int64
	ReserveDataCache bool
	// WritebackBytes sizes the store's write-back area on the meta
	// device (objstore.Options.WritebackBytes; 0: none).
	WritebackBytes int64
	// FlashCacheBytes sizes the store's read cache on the meta device
	// (objstore.Options.FlashCacheBytes; 0: none).
	FlashCacheBytes int64
	// StallTimeout: how long the meta device may leave a commit
	// outstanding before the store fails and the OSD stops
	// (objstore.Options.StallTimeout; 0: its default, negative: never).
	StallTimeout time.Duration
	// RecoveryParallel bounds the objects recovery copies at once (0: 4).
	RecoveryParallel int
	// ScrubInterval and DeepScrubInterval: how often each PG is scrubbed
	// (0: daily and weekly; negative: never).
	ScrubInterval     time.Duration
	DeepScrubInterval time.Duration
	// WriteLoad, if set, is told when each transaction on the store starts
	// (Begin) and ends (End): the daemon sizes its runtime to it.
	WriteLoad interface {
		Begin()
		End()
	}
}

// identity is stored in the data dir so that the OSD keeps its id and can
// never be started against another cluster's data.
type identity struct {
	FSID string           `json:"fsid"`
	ID   clustermap.OSDID `json:"osd_id"`
}

const identityFile = "osd.json"

// Server is a running OSD.
type Server struct {
	id    clustermap.OSDID
	opts  Options
	store *objstore.Store
	meta  *meta.Store
	view  *mapview.View
	peers *rpc.Pool
	logf  func(string, ...any)
	// rpcSrv serves this OSD's connections (set once serving; metrics
	// count them by transport).
	rpcSrv atomic.Pointer[rpc.Server]

	pgMu sync.Mutex
	pgs  map[clustermap.PGID]*pgState

	locks [1024]sync.RWMutex // object locks, by hash of (pg, name)
	seed  maphash.Seed

	kick            chan struct{} // wakes the peering loop
	statsKick       chan struct{} // publishes stats now: PG states changed
	flashFailLogged atomic.Bool   // the flash read cache's failure was logged
	checkedEpoch    atomic.Uint64 // the map epoch the PG phases were last checked at
	recoveryWake    chan struct{}
	recovery        recoveryStats
	suspectMu       sync.Mutex
	suspected       map[clustermap.OSDID]clustermap.Epoch // last epoch each was reported unreachable
	lastClientOp    atomic.Int64                          // unix nanos of the last client operation: recovery yields to clients
	backfillRefused atomic.Int64                          // unix nanos of the last recovery copy refused for space (space.go)
	scrubs          scrubStats
	metrics         *metrics // nil in tests that build a Server by hand
	clientIO        clientIO
	started         time.Time
	codecs          sync.Map       // clustermap.ECProfile → *ec.Codec: building one computes its matrices
	staged          stageArea      // shards clients sent ahead of their puts (stage.go)
	shards          shardLocks     // erasure-coded shards' read-modify-writes (ecrollback.go)
	trims           chan shardTrim // trims of complete erasure-coded writes, bounded (ectrim.go)
	readRepairs     readRepairs    // rewrites of erasure-coded shards reads found corrupt, bounded (ecreadrepair.go)
}

// pgState is the in-memory state of a placement group on this OSD.
type pgState struct {
	mu      sync.Mutex
	loaded  bool
	version uint64 // the highest PG version written here that is known (pglog.go)

	// fence orders this copy's writes against listings by a (new)
	// primary's peering: writes hold it shared and check their epoch
	// inside; a listing takes it exclusively first, so no write from an
	// older interval lands after the listing saw the copy.
	fence sync.RWMutex

	// Primary only (see peering.go).
	phase    pgPhase
	changed  chan struct{} // closed and replaced on every phase change
	peering  bool          // a peering attempt is running
	prim     pg.Primary
	upHash   uint64 // when each member last came up, at peering (upHash)
	poolSize int
	nMissing atomic.Int64 // objects some member lacks; 0 lets the IO path skip the check
	// Recovery of this PG (an object copy or its record) failed: it is
	// tried again at retryAt, waiting twice as long after each failure.
	retryAt  time.Time
	backoff  time.Duration
	lastErr  string // logged once until it changes
	scrubDue time.Time
	deepDue  time.Time
	// Erasure-coded PGs: the trims peering found, sent once recovery
	// leaves the PG clean (ectrim.go).
	pendingTrims []pg.ShardTrim
	// Erasure-coded PGs: the snapshot sequence each head's state holds,
	// as the primary last found or set it (ecsnaps.go), and the version
	// and size every position holds of objects the primary wrote
	// (ecpartialknown.go), in the PG's current interval.
	snapSeqs intervalMemo[uint64]
	known    intervalMemo[knownVersion]
}

// Run starts the OSD and serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return fmt.Errorf("osd: data dir: %w", err)
	}
	if o.Flash = resolveFlash(o.Flash, o.MetaDir, o.DataDir); o.Flash != "" {
		o.Logf("osd: its index is on flash device %s: placement keeps OSDs that share it out of each other's PGs", o.Flash)
	}
	ms, err := meta.ConnectConf(ctx, o.Conf)
	if err != nil {
		return err
	}
	defer ms.Close()
	id, err := claimIdentity(ctx, ms, o)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, objstore.Options{Dir: o.DataDir, MetaDir: o.MetaDir, ReserveBytes: o.ReserveBytes, CacheBytes: o.CacheBytes, DataCacheBytes: o.DataCacheBytes, ReserveDataCache: o.ReserveDataCache, WritebackBytes: o.WritebackBytes, FlashCacheBytes: o.FlashCacheBytes, SequentialCutoff: sequentialCutoff(o.Class), StallTimeout: o.StallTimeout}, storeLockWait, func() {
		o.Logf("%s: the store in %s is locked by another process; waiting up to %v for it to exit", id, o.DataDir, storeLockWait)
	})
	if err != nil {
		return fmt.Errorf("%s: open store: %w", id, err)
	}
	defer st.Close()
	ln, err := listen(ctx, o.Listen, storeLockWait, func() {
		o.Logf("%s: %s is in use (the connections of an OSD that just exited may hold it); waiting up to %v", id, o.Listen, storeLockWait)
	})
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", id, o.Listen, err)
	}
	view, err := mapview.Follow(ctx, ms)
	if err != nil {
		ln.Close()
		return err
	}
	s := &Server{
		id: id, opts: o, store: st, meta: ms, view: view,
		peers: rpc.NewPoolWith(o.Conf.ClusterKey, rpc.DialOptions{Encrypt: o.Conf.Encrypt, Local: !o.Conf.NoLocalSockets}),
		logf:  o.Logf,
		pgs:   map[clustermap.PGID]*pgState{},
		seed:  maphash.MakeSeed(),
		kick:  make(chan struct{}, 1), recoveryWake: make(chan struct{}, 1), statsKick: make(chan struct{}, 1),
		suspected: map[clustermap.OSDID]clustermap.Epoch{}, started: time.Now().UTC(),
		trims:       make(chan shardTrim, maxQueuedTrims),
		readRepairs: readRepairs{queue: make(chan *readRepair, readRepairsQueued)},
	}
	s.metrics = newMetrics(s)
	defer s.peers.Close()
	if o.MetricsListen != "" {
		if err := s.serveMetrics(ctx, o.MetricsListen); err != nil {
			ln.Close()
			return fmt.Errorf("%s: %w", id, err)
		}
	}
	// Replication, peering and recovery calls waiting on an OSD the map
	// marks down (it may be frozen, its socket open) fail now.
	view.OnOSDDown(func(_ clustermap.OSDID, addr string) { s.peers.Drop(addr) })
	ctx, removed := stopWhenRemoved(ctx, view, id)
	ctx, stopStore := context.WithCancel(ctx)
	go func() {
		select {
		case <-st.Failed(): // see failErr: its PGs must go on without it
			stopStore()
		case <-ctx.Done():
		}
	}()
	srv := rpc.NewServer(o.Conf.ClusterKey, s, rpc.ServerOptions{Logf: o.Logf, Encrypt: o.Conf.Encrypt})
	go srv.Serve(ln)
	defer srv.Close()
	s.rpcSrv.Store(srv)
	s.serveLocal(srv, ln.Addr().String())
	if err := s.serve(ctx, ln.Addr().String()); err != nil {
		return err
	}
	return whyStopped(id, o.DataDir, removed(), st.Err())
}

// serveLocal serves srv on the local socket of the OSD's address too, so
// clients and OSDs on this host reach it without TCP (rpc/local.go),
// unless cairn.conf says local_sockets = false. Without the socket they
// use TCP: a warning, not a failure.
func (s *Server) serveLocal(srv *rpc.Server, addr string) {
	if s.opts.Conf.NoLocalSockets {
		return
	}
	ln, err := rpc.ListenLocal(addr)
	if err != nil {
		s.logf("%s: no local socket (%v); clients on this host reach it over TCP", s.id, err)
		return
	}
	go srv.Serve(ln)
}

// whyStopped is what an OSD that stopped serving tells its operator: nil
// for a plain stop.
func whyStopped(id clustermap.OSDID, dataDir string, removed bool, storeErr error) error {
	if removed {
		return fmt.Errorf("%s was removed from the cluster map (cairn osd rm), so it stopped; wipe %s to add it again as a new OSD", id, dataDir)
	}
	if storeErr != nil {
		return fmt.Errorf("%s stopped because its store failed (%v): its placement groups go on from the other copies; check the devices of %s and of its meta dir, then start it again (what reached them is replayed)", id, storeErr, dataDir)
	}
	return nil
}

// withDefaults fills in the options left zero and checks the device class.
func (o Options) withDefaults() (Options, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Class == "" {
		o.Class = clustermap.ClassHDD
	}
	if !clustermap.ValidClass(o.Class) {
		return o, fmt.Errorf("osd: unknown device class %q (want hdd, ssd or nvme)", o.Class)
	}
	if err := clustermap.ValidFlash(o.Flash); err != nil {
		return o, fmt.Errorf("osd: --flash-device: %w", err)
	}
	if o.Weight == 0 {
		o.Weight = 1
	}
	if o.RecoveryParallel <= 0 {
		o.RecoveryParallel = 4
	}
	if o.ScrubInterval == 0 {
		o.ScrubInterval = 24 * time.Hour
	}
	if o.DeepScrubInterval == 0 {
		o.DeepScrubInterval = 7 * 24 * time.Hour
	}
	if o.Host == "" {
		h, _ := os.Hostname()
		o.Host = h
	}
	return o, nil
}

// serve registers the OSD as alive and up at addr, starts its background
// workers, and keeps its lease until ctx ends; then it marks itself down.
func (s *Server) serve(ctx context.Context, addr string) error {
	o, ms, id := s.opts, s.meta, s.id
	lease, err := ms.RegisterAlive(ctx, id, addr, o.LeaseTTL)
	if err != nil {
		return err
	}
	if err := markUp(ctx, ms, id, addr, o, true); err != nil {
		return err
	}
	o.Logf("%s: serving on %s (data %s, commit log segments of %d KiB)", id, addr, o.DataDir, s.store.LogSegmentBytes()>>10)
	switch fc := s.store.FlashCache(); {
	case fc.RestoreErr != "":
		o.Logf("%s: flash read cache: %s", id, fc.RestoreErr)
	case fc.Restored > 0:
		o.Logf("%s: flash read cache: %d blocks (%d MiB) back from the index its last clean stop saved", id, fc.Restored, fc.Used>>20)
	}
	go ms.RunKeeper(ctx, id.String(), o.Logf)
	go s.peeringLoop(ctx)
	go s.recoveryLoop(ctx)
	go s.scrubLoop(ctx)
	go s.indexCheckLoop(ctx)
	go s.strayLoop(ctx)
	go s.trimLoop(ctx)
	for range readRepairsAtOnce {
		go s.readRepairLoop(ctx)
	}
	go s.watchFull(ctx)
	go s.followWriteback(ctx)
	for ctx.Err() == nil {
		sctx, stopStats := context.WithCancel(ctx)
		go s.publishStats(sctx, lease)
		select {
		case <-ctx.Done():
		case <-lease.Done():
		}
		stopStats()
		if ctx.Err() != nil {
			break
		}
		// etcd was unreachable or too slow for longer than the lease TTL,
		// so the keeper may have marked us down. Register again; until the
		// map says we are up, peers and clients with the newer map do not
		// send us work, and replicas refuse our writes from the older epoch.
		o.Logf("%s: lost its etcd lease (etcd unreachable or slower than --lease-ttl %s); registering again", id, o.LeaseTTL)
		lease = s.registerAgain(ctx, addr)
	}
	// Clean shutdown: say we are going before the lease runs out.
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ms.Update(sctx, func(m *clustermap.Map) error {
		osd, ok := m.OSD(id)
		if !ok || !osd.Up {
			return meta.ErrNoChange
		}
		osd.Up, osd.DownSince = false, time.Now().UTC()
		return nil
	})
	if lease != nil {
		lease.Revoke(sctx)
	}
	o.Logf("%s: stopped", id)
	return nil
}

// registerAgain takes a new lease and marks the OSD up, retrying until it
// can or ctx ends (then it returns nil).
func (s *Server) registerAgain(ctx context.Context, addr string) *meta.Lease {
	for ctx.Err() == nil {
		lease, err := s.meta.RegisterAlive(ctx, s.id, addr, s.opts.LeaseTTL)
		if err == nil {
			if err = markUp(ctx, s.meta, s.id, addr, s.opts, false); err == nil {
				s.logf("%s: registered again", s.id)
				return lease
			}
		}
		s.logf("%s: register: %v", s.id, err)
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

// stopWhenRemoved returns a context that ends when a map no longer lists
// the OSD (an operator removed it while it ran: it must not keep serving
// or take part in elections), and a func that says whether that happened.
func stopWhenRemoved(ctx context.Context, view *mapview.View, id clustermap.OSDID) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	var gone atomic.Bool
	check := func(m *clustermap.Map) {
		if _, ok := m.OSD(id); !ok && !gone.Swap(true) {
			cancel()
		}
	}
	view.OnMap(check)
	check(view.Map())
	return ctx, gone.Load
}

// markUp records the OSD's address and marks it up in the map, and in
// again if the keeper marked it out only because it had been down (an
// operator's `osd out` stays). A process that just started (started) gets
// a new up-since time even if the keeper never saw it down: the new map
// begins a new interval for each PG it serves, so its members refuse the
// messages of its previous life still on their way, which would otherwise
// land after the writes of its new one (the pool simulation in
// internal/pg found this).
func markUp(ctx context.Context, ms *meta.Store, id clustermap.OSDID, addr string, o Options, started bool) error {
	_, err := ms.Update(ctx, func(m *clustermap.Map) error {
		m.UpsertHost(o.Host, o.Rack)
		osd, ok := m.OSD(id)
		if !ok {
			return fmt.Errorf("%s was removed from the map", id)
		}
		back := osd.AutoOut && !osd.In // out only because it was down
		if osd.Up && !started && !back && osd.Addr == addr && osd.Host == o.Host && osd.Class == o.Class && osd.Flash == o.Flash {
			return meta.ErrNoChange
		}
		osd.Addr, osd.Host, osd.Class, osd.Flash = addr, o.Host, o.Class, o.Flash
		if !osd.Up || started {
			osd.Up, osd.UpSince, osd.DownSince = true, time.Now().UTC(), time.Time{}
		}
		if back {
			osd.In, osd.AutoOut = true, false
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: mark up: %w", id, err)
	}
	return nil
}

// claimIdentity reads the data dir's identity or creates one, adding the OSD
// to the map. An id given on the command line must match the stored one.
func claimIdentity(ctx context.Context, ms *meta.Store, o Options) (clustermap.OSDID, error) {
	path := filepath.Join(o.DataDir, identityFile)
	b, err := os.ReadFile(path)
	if err == nil {
		var idn identity
		if err := json.Unmarshal(b, &idn); err != nil {
			return 0, fmt.Errorf("osd: %s is damaged: %v", path, err)
		}
		if idn.FSID != o.Conf.FSID {
			return 0, fmt.Errorf("osd: %s belongs to cluster %s, not %s", o.DataDir, idn.FSID, o.Conf.FSID)
		}
		if o.ID >= 0 && o.ID != idn.ID {
			return 0, fmt.Errorf("osd: %s holds %s, not %s", o.DataDir, idn.ID, o.ID)
		}
		m, _, err := ms.Map(ctx)
		if err != nil {
			return 0, err
		}
		if _, ok := m.OSD(idn.ID); !ok {
			return 0, fmt.Errorf("osd: %s was removed from the cluster; wipe %s to add it again", idn.ID, o.DataDir)
		}
		return idn.ID, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("osd: %w", err)
	}
	var id clustermap.OSDID
	_, err = ms.Update(ctx, func(m *clustermap.Map) error {
		id = o.ID
		if id < 0 {
			id = m.NextOSDID
		} else if _, ok := m.OSD(id); ok {
			return fmt.Errorf("osd: %s already exists in the map but %s has no identity; pick another id or wipe it", id, o.DataDir)
		}
		m.UpsertHost(o.Host, o.Rack)
		m.UpsertOSD(clustermap.OSD{ID: id, Host: o.Host, Addr: o.Listen, Class: o.Class, Flash: o.Flash, Weight: o.Weight, In: true})
		return nil
	})
	if err != nil {
		return 0, err
	}
	nb, _ := json.Marshal(identity{FSID: o.Conf.FSID, ID: id})
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, nb, 0o644); err != nil {
		return 0, err
	}
	if f, err := os.Open(tmp); err == nil {
		f.Sync()
		f.Close()
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, err
	}
	if d, err := os.Open(o.DataDir); err == nil {
		d.Sync()
		d.Close()
	}
	return id, nil
}

// pg returns the state of a placement group, loading its version the first
// time: the newest delete's, or the newest entry's of a legacy PG log
// (pglog.go). Versions left on objects count when the PG peers.
func (s *Server) pg(id clustermap.PGID) (*pgState, error) {
	s.pgMu.Lock()
	p := s.pgs[id]
	if p == nil {
		p = &pgState{changed: make(chan struct{})}
		s.pgs[id] = p
	}
	s.pgMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loaded {
		return p, nil
	}
	coll := id.String()
	v, err := s.store.OmapGet(coll, pgMetaObject, keyDeleteVersion)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		ver, ok := decodeVersion(v)
		if !ok {
			return nil, fmt.Errorf("pg %s: its newest delete's version is %d bytes, not 8", id, len(v))
		}
		p.version = max(p.version, ver)
	}
	var start []byte
	for {
		kvs, more, err := s.store.OmapList(coll, pgMetaObject, start, legacyLogEnd, 1024)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return nil, err
		}
		if len(kvs) > 0 {
			last := kvs[len(kvs)-1].Key
			if ver, ok := decodeVersion(last); ok {
				p.version = max(p.version, ver)
			}
			start = append(append([]byte(nil), last...), 0)
		}
		if !more {
			break
		}
	}
	p.loaded = true
	return p, nil
}

// nextVersion reserves the next PG version for a write.
func (p *pgState) nextVersion() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	return p.version
}

// noteVersion records a version applied as a replica.
func (p *pgState) noteVersion(v uint64) {
	p.mu.Lock()
	if v > p.version {
		p.version = v
	}
	p.mu.Unlock()
}

// apply applies txn to the store, counted in Options.WriteLoad.
func (s *Server) apply(txn *objstore.Txn) error {
	if l := s.opts.WriteLoad; l != nil {
		l.Begin()
		defer l.End()
	}
	return s.store.Apply(txn)
}

// lock returns the lock of an object; writes hold it across local apply and
// replication so that replicas see the writes to one object in one order.
func (s *Server) lock(pg clustermap.PGID, name string) *sync.RWMutex {
	return &s.locks[s.lockIndex(pg, name)]
}

// lockIndex is the stripe of s.locks that guards name in pg.
func (s *Server) lockIndex(pg clustermap.PGID, name string) int {
	h := maphash.String(s.seed, name) ^ (uint64(pg.Pool)<<32|uint64(pg.Seed))*0x9e3779b97f4a7c15
	return int(h % uint64(len(s.locks)))
}

// storeLockWait is how long an OSD waits for its store's lock: an OSD
// restarted right after it was killed may find its predecessor still
// exiting (unmapping a gigabyte of cache takes a moment), and should not
// fail for that.
const storeLockWait = 30 * time.Second

// openStore opens the store, retrying while another process holds its
// lock, for at most wait; waiting is called once, when it first does.
func openStore(ctx context.Context, o objstore.Options, wait time.Duration, waiting func()) (*objstore.Store, error) {
	st, err := whileBusy(ctx, wait, syscall.EAGAIN, func() (*objstore.Store, error) { return objstore.Open(o) }, waiting)
	if errors.Is(err, syscall.EAGAIN) {
		return nil, fmt.Errorf("the store in %s is still locked by another process after %v (is another OSD running on it?): %w", o.Dir, wait, err)
	}
	return st, err
}

// listen listens on addr, retrying while it is in use, for at most wait:
// an OSD restarted right after it was killed finds its port held by its
// predecessor's connections until the peers have closed their ends.
// waiting is called once, when it first waits.
func listen(ctx context.Context, addr string, wait time.Duration, waiting func()) (net.Listener, error) {
	return whileBusy(ctx, wait, syscall.EADDRINUSE, func() (net.Listener, error) { return net.Listen("tcp", addr) }, waiting)
}

// whileBusy calls open until it returns anything but busy, or wait has
// passed (then busy's error), or ctx ends; waiting is called once, at the
// first busy.
func whileBusy[T any](ctx context.Context, wait time.Duration, busy error, open func() (T, error), waiting func()) (T, error) {
	deadline := time.Now().Add(wait)
	for first := true; ; first = false {
		v, err := open()
		if err == nil || !errors.Is(err, busy) || time.Now().After(deadline) {
			return v, err
		}
		if first {
			waiting()
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// flashCacheStats is what an OSD publishes of its store's flash read cache.
// flashCache returns the flash read cache's stats to publish, and logs its
// failure the first time it sees one.
func (s *Server) flashCache() meta.FlashCacheStats {
	st := s.store.FlashCache()
	if st.Failed != "" && s.flashFailLogged.CompareAndSwap(false, true) {
		s.logf("%s: the flash read cache turned itself off after a flash IO error (%s): its data disk serves every read, correctly but slower; check or replace the meta device, then restart the OSD to use the cache again", s.id, st.Failed)
	}
	return meta.FlashCacheStats{Size: st.Bytes, Used: st.Used, Hits: st.Hits, Misses: st.Misses, Failed: st.Failed}
}
