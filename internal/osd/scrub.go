package osd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Scrub compares the copies of every object of a PG across its acting
// members: light scrub the names, versions, sizes and a digest of xattrs and
// omap; deep scrub also reads every byte (verifying each block's checksum)
// and compares data digests. Every inconsistency is repaired at once from
// the copy most members agree on (a copy that fails its checksums never
// counts), and reported; one with no good copy left is reported as
// corruption, which `cairn status` shows as HEALTH_ERR.

// scrubStats is the scrub running now, for status.
type scrubStats struct {
	mu      sync.Mutex
	kind    string // "" when idle
	pg      string
	done    int64
	left    int64
	bytes   atomic.Int64
	started time.Time
}

// scrubResult counts what one PG scrub found.
type scrubResult struct {
	Objects, Bytes, Errors, Repaired int64
	Unrepaired                       []string
}

// Omap keys of the PG metadata object that hold the last scrub times (see
// pglog.go for the others).
var (
	keyLastScrub     = []byte{0xff, 's'}
	keyLastDeepScrub = []byte{0xff, 'd'}
)

// scrub serves OpScrub on the primary.
func (s *Server) scrub(ctx context.Context, p *pgState, req *proto.Request) *proto.Response {
	res, err := s.scrubPG(ctx, req.PG, p, req.Flags&proto.FlagDeep != 0)
	if err != nil {
		return s.fail(proto.StatusUnavailable, "scrub pg %s: %v", req.PG, err)
	}
	r := s.ok()
	for _, kv := range [][2]string{
		{proto.ScrubKeyObjects, strconv.FormatInt(res.Objects, 10)},
		{proto.ScrubKeyBytes, strconv.FormatInt(res.Bytes, 10)},
		{proto.ScrubKeyErrors, strconv.FormatInt(res.Errors, 10)},
		{proto.ScrubKeyRepaired, strconv.FormatInt(res.Repaired, 10)},
	} {
		r.KVs = append(r.KVs, proto.KV{Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	if len(res.Unrepaired) > 0 {
		r.Message = fmt.Sprintf("no good copy of %d object(s): %v", len(res.Unrepaired), res.Unrepaired)
	}
	return r
}

func (s *Server) scrubPG(ctx context.Context, id clustermap.PGID, p *pgState, deep bool) (scrubResult, error) {
	var res scrubResult
	if p.nMissing.Load() > 0 {
		return res, errors.New("it is recovering; scrub runs when recovery is done")
	}
	sc, err := s.pgScrubOf(id, p, deep)
	if err != nil {
		return res, err
	}
	kind := "scrub"
	if deep {
		kind = "deep-scrub"
	}
	s.scrubs.mu.Lock()
	s.scrubs.kind, s.scrubs.pg, s.scrubs.done, s.scrubs.left, s.scrubs.started = kind, id.String(), 0, 0, time.Now()
	s.scrubs.mu.Unlock()
	defer func() {
		s.scrubs.mu.Lock()
		s.scrubs.kind = ""
		s.scrubs.mu.Unlock()
	}()

	lists, err := s.listMembers(ctx, id, sc.members, sc.listFlags)
	if err != nil {
		return res, err
	}
	names := map[string]struct{}{}
	for _, l := range lists {
		for n := range l.Objs {
			names[n] = struct{}{}
		}
	}
	s.scrubs.mu.Lock()
	s.scrubs.left = int64(len(names))
	s.scrubs.mu.Unlock()
	for _, n := range sortedNames(names) {
		res.Objects++
		if st, ok := lists[0].Objs[n]; ok {
			res.Bytes += int64(st.Size)
		}
		s.scrubs.mu.Lock()
		s.scrubs.done++
		s.scrubs.left--
		s.scrubs.mu.Unlock()
		var found, repaired bool
		switch {
		case !sc.consistent(lists, n):
			// Look again under the object's lock: a write may have raced the listing.
			found, repaired, err = sc.object(ctx, n)
		case sc.parity != nil:
			found, repaired, err = sc.parity(ctx, n)
		}
		if err != nil {
			return res, err
		}
		res.note(n, found, repaired)
	}
	if deep {
		s.scrubs.bytes.Add(res.Bytes)
	}
	s.recordScrub(id, deep)
	if res.Errors > 0 {
		s.logf("%s: pg %s %s: %d objects, %d inconsistent, %d repaired", s.id, id, kind, res.Objects, res.Errors, res.Repaired)
	}
	s.metrics.noteScrub(kind, res)
	return res, nil
}

// recordScrub keeps the time of the PG's scrub in its metadata object.
func (s *Server) recordScrub(id clustermap.PGID, deep bool) {
	txn := &objstore.Txn{}
	var stamp [8]byte
	binary.BigEndian.PutUint64(stamp[:], uint64(time.Now().Unix()))
	txn.OmapSet(id.String(), pgMetaObject, keyLastScrub, stamp[:])
	if deep {
		txn.OmapSet(id.String(), pgMetaObject, keyLastDeepScrub, stamp[:])
	}
	if err := s.apply(txn); err != nil {
		s.logf("%s: pg %s: recording the scrub time: %v", s.id, id, err)
	}
}

// pgScrub is how a scrub compares one PG's objects: its members (by
// position for an erasure-coded PG), how they list them (listFlags),
// whether their listings show an object consistent, how one that is not
// is scrubbed under its lock, and, for a deep scrub of an erasure-coded
// PG, how one that is has its parity checked. That check reads every
// shard (its folds), so the listing of a deep scrub of an erasure-coded
// PG reads no data: each shard is read once.
type pgScrub struct {
	members        []clustermap.OSDID
	listFlags      uint32
	consistent     func(lists []*pg.Listing, name string) bool
	object, parity func(ctx context.Context, name string) (found, repaired bool, err error)
}

// pgScrubOf returns the pgScrub of PG id as it is served now.
func (s *Server) pgScrubOf(id clustermap.PGID, p *pgState, deep bool) (pgScrub, error) {
	p.mu.Lock()
	members, epoch := slices.Clone(p.prim.Acting), p.prim.Epoch
	p.mu.Unlock()
	pool, _ := s.view.Map().Pool(id.Pool)
	if pool == nil || !pool.Erasure() {
		return pgScrub{members: members, listFlags: scrubFlags(deep), consistent: pg.Consistent, object: func(ctx context.Context, name string) (bool, bool, error) {
			return s.scrubObject(ctx, id, p, epoch, members, name, deep)
		}}, nil
	}
	positions, err := s.scrubPositions(pool, id)
	if err != nil {
		return pgScrub{}, err
	}
	sc := pgScrub{members: positions, listFlags: scrubFlags(false), consistent: pg.ShardsConsistent, object: func(ctx context.Context, name string) (bool, bool, error) {
		return s.scrubShardObject(ctx, pool.EC.K, id, p, epoch, positions, name, deep)
	}}
	if deep {
		sc.parity = func(ctx context.Context, name string) (bool, bool, error) {
			return s.scrubParity(ctx, pool, id, p, epoch, positions, name)
		}
	}
	return sc, nil
}

// note counts what scrubbing one object found.
func (r *scrubResult) note(name string, found, repaired bool) {
	if !found {
		return
	}
	r.Errors++
	if repaired {
		r.Repaired++
	} else {
		r.Unrepaired = append(r.Unrepaired, name)
	}
}

// listMembers lists the copy of the PG on every member, in parallel.
func (s *Server) listMembers(ctx context.Context, id clustermap.PGID, members []clustermap.OSDID, flags uint32) ([]*pg.Listing, error) {
	t := s.view.Table()
	lists := make([]*pg.Listing, len(members))
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, o := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = s.listPG(ctx, t, o, id, flags)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", members[i], err)
		}
	}
	return lists, nil
}

func scrubFlags(deep bool) uint32 {
	if deep {
		return proto.FlagDeep
	}
	return proto.FlagDigest
}

// scrubObject compares the copies of one object under its lock and repairs
// the ones that differ from the copy most members agree on.
func (s *Server) scrubObject(ctx context.Context, id clustermap.PGID, p *pgState, epoch clustermap.Epoch, members []clustermap.OSDID, name string, deep bool) (found, repaired bool, err error) {
	l := s.lock(id, name)
	l.Lock()
	defer l.Unlock()
	t := s.view.Table()
	copies := make([]pg.Copy, 0, len(members))
	for _, o := range members {
		st, present, err := s.objectState(ctx, t, o, id, name, deep)
		if err != nil {
			return false, false, fmt.Errorf("reading %q on %s: %w", name, o, err)
		}
		copies = append(copies, pg.Copy{Present: present, State: st})
	}
	good, same, ok := pg.Choose(copies)
	if same {
		return false, false, nil // it was a write racing the listing
	}
	detail := describeCopies(members, func(i int) string {
		c := copies[i]
		switch {
		case !c.Present:
			return "absent"
		case c.State.Corrupt:
			return "checksum error"
		}
		return fmt.Sprintf("v%s size %d", c.State.Ver, c.State.Size)
	})
	if !ok {
		s.report(id, name, "corruption", "scrub: no copy passes its checksums: "+detail)
		return true, false, nil
	}
	src := members[good[0]]
	for i, o := range members {
		if slices.Contains(good, i) {
			continue
		}
		if err := s.copyObject(ctx, id, name, src, o, false); err != nil {
			s.report(id, name, "inconsistent", fmt.Sprintf("scrub: %s; repair of %s from %s failed: %v", detail, o, src, err))
			return true, false, nil
		}
	}
	s.report(id, name, "scrub-repaired", fmt.Sprintf("%s; repaired from %s", detail, src))
	return true, true, nil
}

// scrubPositions returns the OSD of every position of an erasure-coded
// PG, in position order; a position without one waits for recovery.
func (s *Server) scrubPositions(pool *clustermap.Pool, id clustermap.PGID) ([]clustermap.OSDID, error) {
	_, positions := s.view.Table().Positions(pool, id)
	if i := slices.Index(positions, placement.NoOSD); i >= 0 {
		return nil, fmt.Errorf("position %d has no OSD up; scrub runs when every position is", i)
	}
	return positions, nil
}

// scrubShardObject reads the state of one erasure-coded object's shards
// under its lock (deep: every byte, each block's checksum verified) and
// rebuilds those that fail their checksums or differ from the others
// (repairShards).
func (s *Server) scrubShardObject(ctx context.Context, k int, id clustermap.PGID, p *pgState, epoch clustermap.Epoch, positions []clustermap.OSDID, name string, deep bool) (found, repaired bool, err error) {
	l := s.lock(id, name)
	l.Lock()
	defer l.Unlock()
	t := s.view.Table()
	copies := make([]pg.Copy, len(positions))
	for i, o := range positions {
		st, present, err := s.objectState(ctx, t, o, id, name, deep)
		if err != nil {
			return false, false, fmt.Errorf("reading the shard of %q on %s: %w", name, o, err)
		}
		copies[i] = pg.Copy{Present: present, State: st}
	}
	return s.repairShards(ctx, k, id, p, epoch, positions, name, copies)
}

// repairShards rebuilds the shards of one erasure-coded object that
// pg.BadShards picks from copies (rebuildBadShards), and reports them by
// position. The caller holds the object's lock.
func (s *Server) repairShards(ctx context.Context, k int, id clustermap.PGID, p *pgState, epoch clustermap.Epoch, positions []clustermap.OSDID, name string, copies []pg.Copy) (found, repaired bool, err error) {
	bad, err := s.rebuildBadShards(ctx, k, id, p, epoch, positions, name, copies)
	if err == nil && len(bad) == 0 {
		return false, false, nil // it was a write racing the listing
	}
	detail := describeCopies(positions, func(i int) string {
		c := copies[i]
		switch {
		case !c.Present:
			return fmt.Sprintf("position %d absent", i)
		case c.State.Corrupt:
			return fmt.Sprintf("position %d checksum error", i)
		}
		return fmt.Sprintf("position %d v%s", i, c.State.Ver)
	})
	switch {
	case errors.Is(err, errFewGoodShards):
		s.report(id, name, "corruption", fmt.Sprintf("scrub: fewer than %d good shards: %s", k, detail))
		return true, false, nil
	case err != nil:
		s.report(id, name, "inconsistent", fmt.Sprintf("scrub: %s; rebuilding positions %v failed: %v", detail, bad, err))
		return true, false, nil
	}
	s.report(id, name, "scrub-repaired", fmt.Sprintf("%s; rebuilt positions %v", detail, bad))
	return true, true, nil
}

// errFewGoodShards: the group of equal shards most positions hold is of
// fewer than K, too few to rebuild the others from.
var errFewGoodShards = errors.New("fewer than K good shards")

// rebuildBadShards rebuilds, as recovery does (marked missing, then
// rebuilt from k good shards), the shards of one erasure-coded object
// that pg.BadShards picks from copies, and returns their positions (none:
// the shards agree). Scrub and a read that met a corrupt shard
// (ecreadrepair.go) repair through it. The caller holds the object's
// lock.
func (s *Server) rebuildBadShards(ctx context.Context, k int, id clustermap.PGID, p *pgState, epoch clustermap.Epoch, positions []clustermap.OSDID, name string, copies []pg.Copy) ([]int, error) {
	bad, ok := pg.BadShards(k, copies)
	if !ok {
		return bad, errFewGoodShards
	}
	if len(bad) == 0 {
		return nil, nil
	}
	for _, i := range bad {
		p.markMissing(positions[i], name, epoch)
	}
	if err := s.ensureObject(ctx, id, p, name, ensureAll); err != nil {
		return bad, err
	}
	if !p.activeIn(epoch) {
		// markMissing did nothing outside its interval: nothing was rebuilt.
		return bad, errors.New("the PG peered again meanwhile")
	}
	return bad, nil
}

func describeCopies(members []clustermap.OSDID, f func(int) string) string {
	out := ""
	for i, o := range members {
		if i > 0 {
			out += ", "
		}
		out += o.String() + ": " + f(i)
	}
	return out
}

// objectState returns the state of one object's copy on osd.
func (s *Server) objectState(ctx context.Context, t interface {
	Map() *clustermap.Map
}, osd clustermap.OSDID, id clustermap.PGID, name string, deep bool) (pg.ObjState, bool, error) {
	req := &proto.Request{Op: proto.OpPGList, Flags: scrubFlags(deep), Epoch: t.Map().Epoch, PG: id, Object: name}
	var resp *proto.Response
	if osd == s.id {
		resp = s.pgList(req)
	} else {
		o, ok := t.Map().OSD(osd)
		if !ok {
			return pg.ObjState{}, false, fmt.Errorf("%s is not in the map", osd)
		}
		var err error
		if resp, err = s.peers.Call(ctx, o.Addr, req); err != nil {
			return pg.ObjState{}, false, err
		}
	}
	if resp.Status != proto.StatusOK {
		return pg.ObjState{}, false, fmt.Errorf("%s: %s", resp.Status, resp.Message)
	}
	if len(resp.KVs) == 0 {
		return pg.ObjState{}, false, nil
	}
	st, err := pg.DecodeObjState(resp.KVs[0].Value)
	return st, true, err
}

// report records a health event in etcd.
func (s *Server) report(id clustermap.PGID, name, kind, detail string) {
	s.logf("%s: pg %s object %q: %s: %s", s.id, id, name, kind, detail)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.meta.AddReport(ctx, meta.Report{Kind: kind, OSD: s.id, PG: id.String(), Object: name, Detail: detail, Time: time.Now().UTC()}); err != nil {
		s.logf("%s: could not report: %v", s.id, err)
	}
}

// scrubLoop scrubs this OSD's primary PGs when they are due, one at a time.
// Each PG's first due time is spread over the interval so that a new
// cluster does not scrub everything at once.
func (s *Server) scrubLoop(ctx context.Context) {
	if s.opts.ScrubInterval < 0 && s.opts.DeepScrubInterval < 0 {
		return
	}
	tick := min(time.Minute, max(time.Second, s.opts.ScrubInterval/10))
	if s.opts.ScrubInterval < 0 {
		tick = min(time.Minute, max(time.Second, s.opts.DeepScrubInterval/10))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
		id, p, deep := s.dueScrub()
		if p == nil {
			continue
		}
		if _, err := s.scrubPG(ctx, id, p, deep); err != nil && ctx.Err() == nil {
			s.logf("%s: scheduled scrub of pg %s: %v", s.id, id, err)
		}
	}
}

// dueScrub picks an active, clean primary PG whose scrub is due.
func (s *Server) dueScrub() (clustermap.PGID, *pgState, bool) {
	now := time.Now()
	s.pgMu.Lock()
	defer s.pgMu.Unlock()
	for id, p := range s.pgs {
		p.mu.Lock()
		ok := p.phase == phaseActive && p.nMissing.Load() == 0
		if ok && p.scrubDue.IsZero() {
			p.scrubDue, p.deepDue = s.loadScrubTimes(id)
		}
		scrubDue, deepDue := p.scrubDue, p.deepDue
		p.mu.Unlock()
		if !ok {
			continue
		}
		if s.opts.DeepScrubInterval > 0 && now.After(deepDue) {
			p.mu.Lock()
			p.deepDue, p.scrubDue = now.Add(s.opts.DeepScrubInterval), now.Add(s.opts.ScrubInterval)
			p.mu.Unlock()
			return id, p, true
		}
		if s.opts.ScrubInterval > 0 && now.After(scrubDue) {
			p.mu.Lock()
			p.scrubDue = now.Add(s.opts.ScrubInterval)
			p.mu.Unlock()
			return id, p, false
		}
	}
	return clustermap.PGID{}, nil, false
}

// loadScrubTimes returns when a PG is next due for scrub and deep scrub:
// its last times plus the intervals, or a random point within the
// interval if it was never scrubbed here.
func (s *Server) loadScrubTimes(id clustermap.PGID) (time.Time, time.Time) {
	due := func(key []byte, every time.Duration) time.Time {
		if every <= 0 {
			return time.Time{}
		}
		v, err := s.store.OmapGet(id.String(), pgMetaObject, key)
		if err == nil && len(v) == 8 {
			return time.Unix(int64(binary.BigEndian.Uint64(v)), 0).Add(every)
		}
		return time.Now().Add(time.Duration(rand.Int64N(int64(every))))
	}
	return due(keyLastScrub, s.opts.ScrubInterval), due(keyLastDeepScrub, s.opts.DeepScrubInterval)
}

// workProgress reports the background work running now.
func (s *Server) workProgress() []meta.WorkProgress {
	var out []meta.WorkProgress
	left := int64(0)
	s.pgMu.Lock()
	for _, p := range s.pgs {
		left += p.nMissing.Load()
	}
	s.pgMu.Unlock()
	if st := s.recovery.started.Load(); st != 0 || left > 0 {
		if st == 0 {
			st = time.Now().UnixNano() // about to start
		}
		w := meta.WorkProgress{
			Kind: "recovery", ObjectsDone: s.recovery.objects.Load(), ObjectsLeft: left,
			BytesDone: s.recovery.bytes.Load(), Started: time.Unix(0, st).UTC(),
		}
		if pr := s.recovery.progress.Load(); pr != 0 {
			w.Progress = time.Unix(0, pr).UTC()
		}
		s.recovery.errMu.Lock()
		w.LastError = s.recovery.lastErr
		s.recovery.errMu.Unlock()
		out = append(out, w)
	}
	s.scrubs.mu.Lock()
	if s.scrubs.kind != "" {
		out = append(out, meta.WorkProgress{
			Kind: s.scrubs.kind + " " + s.scrubs.pg, ObjectsDone: s.scrubs.done, ObjectsLeft: s.scrubs.left,
			Started: s.scrubs.started.UTC(),
		})
	}
	s.scrubs.mu.Unlock()
	return out
}

// scrubParity is a deep scrub's read of an erasure-coded object whose
// positions' listings agree: under the object's lock, every position
// reads its whole shard through the store's checked reads and folds it
// (proto.FlagFold), and the folds must code together (ec.Codec.CheckFolds);
// no shard's bytes leave its OSD. A shard failing its checksums (or whose
// meta is damaged) is rebuilt from the others and reported by position,
// as a shard found so by a listing is (repairShards). A shard that
// passes them but does not code with the others is rebuilt when the folds
// place it (M ≥ 2); a mismatch they cannot place (M = 1) is reported as
// inconsistent. A shard missing, a tombstone or positions at different
// versions are left to the next scrub's listing.
func (s *Server) scrubParity(ctx context.Context, pool *clustermap.Pool, id clustermap.PGID, p *pgState, epoch clustermap.Epoch, positions []clustermap.OSDID, name string) (found, repaired bool, err error) {
	c, err := s.codecOf(pool)
	if err != nil {
		return false, false, err
	}
	l := s.lock(id, name)
	l.Lock()
	defer l.Unlock()
	metas, folds, errs := s.foldShards(ctx, positions, id, name)
	copies, corrupt, err := foldCopies(positions, name, metas, errs)
	switch {
	case err != nil || copies == nil:
		return false, false, err
	case corrupt:
		return s.repairShards(ctx, pool.EC.K, id, p, epoch, positions, name, copies)
	}
	ok, bad, err := c.CheckFolds(folds)
	if ok || err != nil {
		return false, false, err
	}
	if bad < 0 {
		s.report(id, name, "inconsistent", fmt.Sprintf("deep scrub: its parity does not match its data, and a %s code cannot tell which shard is wrong", pool.EC))
		return true, false, nil
	}
	p.markMissing(positions[bad], name, epoch)
	if err := s.ensureObject(ctx, id, p, name, ensureAll); err != nil {
		s.report(id, name, "inconsistent", fmt.Sprintf("deep scrub: the shard at position %d does not code with the others; rebuilding it failed: %v", bad, err))
		return true, false, nil
	}
	s.report(id, name, "scrub-repaired", fmt.Sprintf("deep scrub: the shard at position %d passed its checksums but did not code with the others; rebuilt", bad))
	return true, true, nil
}

// foldShards asks every position, in parallel, for the fold of its shard
// of name and its meta.
func (s *Server) foldShards(ctx context.Context, positions []clustermap.OSDID, id clustermap.PGID, name string) ([]*pg.ShardMeta, [][]byte, []error) {
	t := s.view.Table()
	folds, metas, errs := make([][]byte, len(positions)), make([]*pg.ShardMeta, len(positions)), make([]error, len(positions))
	var wg sync.WaitGroup
	for i, o := range positions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			metas[i], folds[i], errs[i] = s.readShardFrom(ctx, t, o, id, name, 0, 0, proto.FlagFold)
		}()
	}
	wg.Wait()
	return metas, folds, errs
}

// foldCopies turns the answers of foldShards into the copies
// repairShards weighs, and says whether a position failed its checksums
// (answered StatusCorrupt). It returns no copies when a shard is missing,
// a tombstone or at another version than the others: the next scrub's
// listing sees to those.
func foldCopies(positions []clustermap.OSDID, name string, metas []*pg.ShardMeta, errs []error) (copies []pg.Copy, corrupt bool, err error) {
	copies = make([]pg.Copy, len(positions))
	for i, err := range errs {
		var se *shardError
		switch {
		case errors.As(err, &se) && se.status == proto.StatusCorrupt:
			copies[i], corrupt = pg.Copy{Present: true, State: pg.ObjState{Corrupt: true}}, true
			continue
		case errors.Is(err, objstore.ErrNotFound):
			return nil, false, nil
		case err != nil:
			return nil, false, fmt.Errorf("folding the shard of %q on %s: %w", name, positions[i], err)
		case metas[i].Tombstone:
			return nil, false, nil
		}
		copies[i] = pg.Copy{Present: true, State: pg.ObjState{Ver: metas[i].Ver, Held: metas[i].Held}}
	}
	// Positions a partial write skipped hold its version's shards too.
	copies = pg.ShardsAtNewest(copies)
	var ver *pg.EVersion
	for _, c := range copies {
		switch {
		case c.State.Corrupt:
		case ver != nil && c.State.Ver != *ver:
			return nil, false, nil
		default:
			ver = &c.State.Ver
		}
	}
	return copies, corrupt, nil
}
