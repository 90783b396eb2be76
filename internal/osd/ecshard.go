package osd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Erasure-coded PGs keep each position's shards in a collection of their
// own, "<pg>s<position>" ("2.1as0"), so an OSD that holds two positions of
// one PG (an old one and a new one, once placement moves them) never mixes
// them. Every shard object carries pg.ShardMeta (the object's version,
// logical size and the shard's position) in shardMetaXattr, and its
// version in versionXattr as every object does, which listings read.
//
// A member learns which position it serves from the map of the request,
// which is the sender's (checkEpoch): in one acting set an OSD holds at
// most one position, since positions draw distinct failure domains.

// shardMetaXattr holds an erasure-coded shard's pg.ShardMeta.
const shardMetaXattr = proto.ReservedPrefix + "ec"

// shardColl names the collection of position pos of PG id.
func shardColl(id clustermap.PGID, pos int) string { return id.String() + "s" + strconv.Itoa(pos) }

// parseShardColl reads what shardColl wrote.
func parseShardColl(coll string) (clustermap.PGID, int, bool) {
	i := strings.LastIndexByte(coll, 's')
	if i < 0 {
		return clustermap.PGID{}, 0, false
	}
	id, err := clustermap.ParsePGID(coll[:i])
	if err != nil {
		return clustermap.PGID{}, 0, false
	}
	pos, err := strconv.Atoi(coll[i+1:])
	if err != nil || pos < 0 || shardColl(id, pos) != coll {
		return clustermap.PGID{}, 0, false
	}
	return id, pos, true
}

// positionIn returns the position this OSD serves in an erasure-coded PG's
// acting set at t, or -1.
func (s *Server) positionIn(t *placement.Table, pool *clustermap.Pool, id clustermap.PGID) int {
	_, acting := t.Positions(pool, id)
	for i, o := range acting {
		if o == s.id {
			return i
		}
	}
	return -1
}

// collFor returns the collection this OSD keeps its part of PG id in at
// t: the PG's own, or for an erasure-coded pool its position's.
func (s *Server) collFor(t *placement.Table, id clustermap.PGID) (string, *proto.Response) {
	pool, ok := t.Map().Pool(id.Pool)
	if !ok || !pool.Erasure() {
		return id.String(), nil
	}
	pos := s.positionIn(t, pool, id)
	if pos < 0 {
		return "", s.fail(proto.StatusWrongEpoch, "%s holds no position of pg %s at epoch %d", s.id, id, t.Map().Epoch)
	}
	return shardColl(id, pos), nil
}

// heldColl is the collection of position req.Limit of req's PG on this
// OSD, wherever placement puts the position now (proto.FlagPosition).
func (s *Server) heldColl(t *placement.Table, req *proto.Request) (string, *proto.Response) {
	pool, ok := t.Map().Pool(req.PG.Pool)
	switch {
	case !ok || !pool.Erasure():
		return "", s.fail(proto.StatusInvalid, "pg %s is not of an erasure-coded pool", req.PG)
	case req.Limit >= uint32(pool.Size):
		return "", s.fail(proto.StatusInvalid, "pg %s has %d positions, not %d", req.PG, pool.Size, req.Limit+1)
	case req.Flags&(proto.FlagPrevShard|proto.FlagFold) != 0:
		return "", s.fail(proto.StatusInvalid, "a read of a position's held shard takes no other flag")
	}
	return shardColl(req.PG, int(req.Limit)), nil
}

// readShard serves OpReadReplica of an erasure-coded PG: this OSD's shard
// of the object, Length bytes at Offset (none when Length is 0), and its
// pg.ShardMeta in the reply's KVs; Size is the object's logical size.
// With FlagPrevShard it reads the shard the newest write rolls back to
// instead (NotFound if it rolls back to nothing); with FlagSettled, meta
// and bytes under the shard's lock. Its bytes may be the
// store's read cache's: the reply's Release hands them back. A shard whose meta does
// not decode, or names another position, is answered StatusCorrupt, as
// bytes failing their checksums are.
func (s *Server) readShard(t *placement.Table, req *proto.Request) *proto.Response {
	coll, bad := s.collFor(t, req.PG)
	if req.Flags&proto.FlagPosition != 0 {
		coll, bad = s.heldColl(t, req)
	}
	if bad != nil {
		return bad
	}
	if bad := s.vouchSettled(t, req); bad != nil {
		return bad
	}
	_, pos, _ := parseShardColl(coll)
	name := req.Object
	if req.Flags&(proto.FlagPrevShard|proto.FlagSettled) != 0 {
		// An undo record laid over the shard's bytes, or a client's
		// read of meta and bytes together: no write between the reads.
		defer s.shards.lockAll(s.seed, coll, []string{name})()
	}
	meta, found, err := s.shardMeta(coll, name)
	var kept *keptShard
	if err == nil && found && req.Flags&proto.FlagPrevShard != 0 {
		if !meta.CanRollBack || meta.Prev == (pg.EVersion{}) {
			return s.fail(proto.StatusNotFound, "%s keeps no earlier shard of %q", s.id, name)
		}
		prev := meta.Prev
		k, kerr := s.keptOf(coll, name)
		meta, found, err, kept = k.meta, k.found, kerr, &k
		if err == nil && found && meta.Ver != prev {
			err = fmt.Errorf("the shard it keeps is at %s, not %s", meta.Ver, prev)
		}
	}
	switch {
	case err != nil && !objstore.IsCorruption(err) && !errors.Is(err, pg.ErrBadShardMeta):
		return s.failErr(err)
	case err != nil || found && meta.Position != pos:
		return s.fail(proto.StatusCorrupt, "%s: shard %d of %q in pg %s: its meta is damaged or names another position", s.id, pos, req.Object, req.PG)
	case !found:
		return s.fail(proto.StatusNotFound, proto.MsgNoSuchObject)
	}
	r := s.ok()
	r.Size = meta.Size
	r.KVs = []proto.KV{{Key: []byte(shardMetaXattr), Value: meta.Encode()}}
	if req.Flags&proto.FlagFold != 0 && kept == nil && !meta.Tombstone {
		return s.foldShard(t, r, coll, req)
	}
	if req.Length > 0 && !meta.Tombstone {
		if kept != nil {
			return s.readPrevShard(r, coll, req, *kept)
		}
		read := s.store.ReadShared
		if req.Flags&proto.FlagForWrite != 0 {
			read = s.store.ReadSharedNoFill
		}
		data, _, sums, release, err := read(coll, name, req.Offset, req.Length)
		if err != nil {
			return s.failErr(err)
		}
		r.Data, r.Free, r.DataSums = data, release, sums
	}
	return r
}

// vouchSettled refuses a client's read of the positions (FlagSettled) at
// the PG's primary unless the PG is active and clean. The positions'
// agreement shows that no newer write reached them, but only peering
// knows that they hold every acknowledged one (all of them could be OSDs
// back with older shards), so the primary's answer vouches for the rest.
func (s *Server) vouchSettled(t *placement.Table, req *proto.Request) *proto.Response {
	if req.Flags&proto.FlagSettled == 0 {
		return nil
	}
	pool, _ := t.Map().Pool(req.PG.Pool)
	if acting := t.Acting(pool, req.PG); len(acting) == 0 || acting[0] != s.id {
		return nil
	}
	s.pgMu.Lock()
	p := s.pgs[req.PG]
	s.pgMu.Unlock()
	if _, positions := t.Positions(pool, req.PG); p == nil || !p.settled(positions) {
		return s.fail(proto.StatusUnavailable, "pg %s is not active and clean: read through its primary", req.PG)
	}
	return nil
}

// readPrevShard reads req's range of the shard kept to roll back to: the
// whole old shard, or the shard with an undo record laid over it.
func (s *Server) readPrevShard(r *proto.Response, coll string, req *proto.Request, k keptShard) *proto.Response {
	var err error
	switch {
	case k.isUndo:
		r.Data, err = s.prevShardRange(coll, req.Object, k.undo, k.old, req.Offset, req.Length)
	default:
		r.Data, _, r.DataSums, r.Free, err = s.store.ReadShared(coll, rollbackName(req.Object), req.Offset, req.Length)
	}
	if err != nil {
		return s.failErr(err)
	}
	return r
}

// shardState is an erasure-coded shard's state for peering: its version
// and what it can roll back to, from its meta (the version xattr for a
// shard whose meta is damaged: it then cannot roll back).
func (s *Server) shardState(coll, name string) (pg.ObjState, error) {
	info, err := s.store.Stat(coll, name)
	if err != nil {
		return pg.ObjState{}, err
	}
	m, found, err := s.shardMeta(coll, name)
	if err != nil || !found {
		st, _, err := s.localState(coll, name, stateVersion)
		return st, err
	}
	return pg.ObjState{Ver: m.Ver, Size: info.Size, Prev: m.Prev, CanRollBack: m.CanRollBack, Tombstone: m.Tombstone, Held: m.Held, PrevHeld: m.PrevHeld}, nil
}

// listShards lists the client objects of a shard collection: a tombstone
// is an absent object.
func (s *Server) listShards(coll string, req *proto.Request) *proto.Response {
	r := s.listColl(coll, req)
	if r.Status != proto.StatusOK {
		return r
	}
	out := r.Names[:0]
	for _, n := range r.Names {
		m, found, err := s.shardMeta(coll, n)
		if err == nil && found && m.Tombstone {
			continue
		}
		out = append(out, n)
	}
	r.Names = out
	return r
}

// codecOf returns the codec of an erasure-coded pool.
func (s *Server) codecOf(pool *clustermap.Pool) (*ec.Codec, error) {
	if c, ok := s.codecs.Load(*pool.EC); ok {
		return c.(*ec.Codec), nil
	}
	c, err := ec.New(ec.LayoutOf(*pool.EC))
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", pool.Name, err)
	}
	s.codecs.Store(*pool.EC, c)
	return c, nil
}

// doPeerEC peers an erasure-coded PG: it lists every position of the
// acting set (which fences off the writes of older intervals on each, and
// gives the PG's newest version), and pg.DecideShardsPG decides from them
// and the PG's record which version of each object stands, which shards
// each position must have rebuilt (or deleted) and which objects are
// unfound; the new record, naming the positions complete, is written
// before the PG goes active. Recovery (ensureShards) then rebuilds what
// positions lack.
func (s *Server) doPeerEC(ctx context.Context, t *placement.Table, pool *clustermap.Pool, id clustermap.PGID, acting []clustermap.OSDID) (pg.Peered, error) {
	m := t.Map()
	res := pg.Peered{Primary: pg.Primary{Epoch: m.Epoch, Acting: acting}}
	if len(acting) < pool.EC.K {
		return res, fmt.Errorf("only %d of its %d positions are up, fewer than the %d that rebuild an object", len(acting), pool.Size, pool.EC.K)
	}
	rec, rev, err := s.meta.PGRecord(ctx, id.String())
	if err != nil {
		return res, err
	}
	if err := pg.Replaces(rec, m.Epoch); err != nil {
		return res, err
	}
	_, positions := t.Positions(pool, id)
	lists := make([]*pg.Listing, len(positions))
	errs := make([]error, len(positions))
	var wg sync.WaitGroup
	for i, o := range positions {
		if o == placement.NoOSD {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = s.listPG(ctx, t, o, id, 0)
		}()
	}
	wg.Wait()
	for i, o := range positions {
		if errs[i] != nil {
			return res, fmt.Errorf("acting member %s (position %d) did not answer: %v", o, i, errs[i])
		}
	}
	res, err = pg.DecideShardsPG(s.id, m.Epoch, pool.EC.K, positions, rec, lists)
	if err != nil {
		return res, err
	}
	if err := s.rollBackShards(ctx, t, id, res.RollBacks); err != nil {
		return res, err
	}
	if !slices.Equal(res.Acting, acting) {
		panic(fmt.Sprintf("pg %s: positions %v give acting set %v, the map %v", id, positions, res.Acting, acting))
	}
	newRec := pg.Record{Epoch: m.Epoch, Acting: acting, Complete: res.Complete, Positions: res.Positions, Sources: res.Sources}
	if res.RecRev, err = s.meta.PutPGRecord(ctx, id.String(), newRec, rev); err != nil {
		return res, err
	}
	if n := len(res.Unfound); n > 0 {
		s.logf("%s: pg %s: %d object(s) unfound (no version on %d positions that hold every write), e.g. %q; they are not served until their positions return",
			s.id, id, n, pool.EC.K, slices.Sorted(maps.Keys(res.Unfound))[0])
	}
	return res, nil
}

// foldShard answers the fold of req's shard (proto.FlagFold), reading it
// a megabyte at a time through the store's checked reads: this is a deep
// scrub's one read of the shard, so a block failing its checksum is
// answered StatusCorrupt, and while clients work it reads at most half
// the time, as a deep listing does.
func (s *Server) foldShard(t *placement.Table, r *proto.Response, coll string, req *proto.Request) *proto.Response {
	pool, ok := t.Map().Pool(req.PG.Pool)
	if !ok || !pool.Erasure() {
		return s.fail(proto.StatusInvalid, "pg %s is not of an erasure-coded pool", req.PG)
	}
	l := ec.LayoutOf(*pool.EC)
	fold := make([]byte, l.Unit)
	for at := uint64(0); ; {
		start := time.Now()
		b, err := s.store.Read(coll, req.Object, at, foldPiece)
		if err != nil {
			return s.failErr(err)
		}
		l.FoldInto(fold, b, int64(at))
		if s.clientBusy() {
			time.Sleep(time.Since(start))
		}
		if at += uint64(len(b)); len(b) < foldPiece {
			break
		}
	}
	r.Data = fold
	return r
}

// foldPiece is how much of a shard a fold reads at once.
const foldPiece = 1 << 20
