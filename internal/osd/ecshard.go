package osd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
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

// readShard serves OpReadReplica of an erasure-coded PG: this OSD's shard
// of the object, Length bytes at Offset (none when Length is 0), and its
// pg.ShardMeta in the reply's KVs; Size is the object's logical size. A
// shard whose meta does not decode, or names another position, is
// answered StatusCorrupt, as bytes failing their checksums are.
func (s *Server) readShard(t *placement.Table, req *proto.Request) *proto.Response {
	coll, bad := s.collFor(t, req.PG)
	if bad != nil {
		return bad
	}
	_, pos, _ := parseShardColl(coll)
	raw, err := s.store.GetXattr(coll, req.Object, shardMetaXattr)
	if err != nil {
		return s.failErr(err)
	}
	meta, err := pg.DecodeShardMeta(raw)
	if err != nil || meta.Position != pos {
		return s.fail(proto.StatusCorrupt, "%s: shard %d of %q in pg %s: its meta is damaged or names another position", s.id, pos, req.Object, req.PG)
	}
	r := s.ok()
	r.Size = meta.Size
	r.KVs = []proto.KV{{Key: []byte(shardMetaXattr), Value: raw}}
	if req.Length > 0 {
		data, err := s.store.Read(coll, req.Object, req.Offset, req.Length)
		if err != nil {
			return s.failErr(err)
		}
		r.Data = data
	}
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

// doPeerEC peers an erasure-coded PG, minimally for now: it lists every
// position of the acting set (which fences off the writes of older
// intervals on each, and gives the PG's newest version), needs at least
// K of them up, and goes active without rebuilding what positions lack:
// reads rebuild it from K shards, and health says such pools have no
// recovery yet. Nothing is recorded in etcd: no record names complete
// positions yet.
func (s *Server) doPeerEC(ctx context.Context, t *placement.Table, pool *clustermap.Pool, id clustermap.PGID, acting []clustermap.OSDID) (pg.Peered, error) {
	res := pg.Peered{Primary: pg.Primary{Epoch: t.Map().Epoch, Acting: acting}}
	if len(acting) < pool.EC.K {
		return res, fmt.Errorf("only %d of its %d positions are up, fewer than the %d that rebuild an object", len(acting), pool.Size, pool.EC.K)
	}
	lists := make([]*pg.Listing, len(acting))
	errs := make([]error, len(acting))
	var wg sync.WaitGroup
	for i, o := range acting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], errs[i] = s.listPG(ctx, t, o, id, 0)
		}()
	}
	wg.Wait()
	for i, o := range acting {
		if errs[i] != nil {
			return res, fmt.Errorf("acting member %s did not answer: %v", o, errs[i])
		}
		res.LastUpdate = max(res.LastUpdate, lists[i].LastUpdate)
		for _, st := range lists[i].Objs {
			res.LastUpdate = max(res.LastUpdate, st.Ver.Version)
		}
	}
	res.WriteSet, res.Complete, res.Auth = acting, acting, s.id
	return res, nil
}
