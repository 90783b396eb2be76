package osd

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
)

// Staged puts. A client that sends the primary a whole erasure-coded
// object makes most of its bytes cross the network twice: to the primary,
// which codes it, then as shards to the other positions. A client may
// instead code the object itself and send each position its shard
// (proto.OpStage), then ask the primary for the put with proto.FlagStaged.
// The primary plans, numbers and commits that put as any other, except
// that each position's transaction names the staged shard instead of
// carrying it: the position takes the shard from here and puts it in the
// same transaction. What decides a write's fate (the primary's plan, each
// position's rollback state, peering) is unchanged.
//
// Staged shards are held in memory only, bounded in bytes and in time: a
// shard no put takes (its client died, its put failed first) expires. A
// put that finds a position's shard gone (expired, taken by an earlier
// attempt, staged on an OSD that no longer holds the position) is refused
// with proto.StatusNoStage, unacknowledged, and the client sends the
// object whole instead.

const (
	// stageTTL bounds how long a staged shard waits for its put. A put
	// normally follows within a round trip; this covers a primary that
	// waits for the object's lock or rebuilds a position first.
	stageTTL = 20 * time.Second
	// maxStagedBytes bounds the memory staged shards hold on one OSD; a
	// stage past it is refused and its client sends the object whole.
	maxStagedBytes = 128 << 20
	// maxStageToken bounds a stage's token (proto.Request.Key).
	maxStageToken = 64
)

// stageKey names one staged shard: a client's token for one put, and
// the object and position it is the shard of.
type stageKey struct {
	token  string
	pg     clustermap.PGID
	object string
	pos    int
}

// stagedShard is one shard a client sent ahead of its put.
type stagedShard struct {
	data  []byte
	sums  []uint32 // crc32c of data's blocks, taken as it arrived (may be nil)
	frame []byte   // the pooled request frame data lies in; nil: data is its own
	at    time.Time
}

// held is the memory the shard keeps from the pool.
func (sh *stagedShard) held() int {
	if sh.frame != nil {
		return cap(sh.frame)
	}
	return len(sh.data)
}

// release gives the shard's frame back to the pool; the shard's data must
// not be used after.
func (sh *stagedShard) release() {
	if sh.frame != nil {
		bufpool.Put(sh.frame)
		sh.frame = nil
	}
	sh.data, sh.sums = nil, nil
}

// stageArea holds an OSD's staged shards.
type stageArea struct {
	mu     sync.Mutex
	shards map[stageKey]*stagedShard
	bytes  int
	timer  *time.Timer // sweeps expired shards while any are held
}

// put keeps sh under k, or refuses it when the area is full or k is
// taken (a client sent the same stage twice: the first stands).
func (a *stageArea) put(k stageKey, sh *stagedShard) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(sh.at)
	switch {
	case a.shards[k] != nil:
		return fmt.Errorf("shard %d of %q is staged under that token already", k.pos, k.object)
	case a.bytes+sh.held() > maxStagedBytes:
		return fmt.Errorf("%d MiB of shards are staged already, waiting for their puts", a.bytes>>20)
	}
	if a.shards == nil {
		a.shards = make(map[stageKey]*stagedShard)
	}
	a.shards[k] = sh
	a.bytes += sh.held()
	if a.timer == nil {
		a.timer = time.AfterFunc(stageTTL, a.sweep)
	}
	return nil
}

// take removes and returns the shard staged under k, nil if there is none.
func (a *stageArea) take(k stageKey) *stagedShard {
	a.mu.Lock()
	defer a.mu.Unlock()
	sh := a.shards[k]
	if sh != nil {
		delete(a.shards, k)
		a.bytes -= sh.held()
	}
	return sh
}

// sweep drops the expired shards, and comes back while any remain.
func (a *stageArea) sweep() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked(time.Now())
	a.timer = nil
	if len(a.shards) > 0 {
		a.timer = time.AfterFunc(stageTTL/2, a.sweep)
	}
}

func (a *stageArea) expireLocked(now time.Time) {
	for k, sh := range a.shards {
		if now.Sub(sh.at) >= stageTTL {
			delete(a.shards, k)
			a.bytes -= sh.held()
			sh.release()
		}
	}
}

// stage keeps the shard a client sends ahead of a staged put (OpStage).
// It must be for the position this OSD holds in the client's map; the
// put checks its length against the object's size.
func (s *Server) stage(t *placement.Table, req *proto.Request) *proto.Response {
	pool, ok := t.Map().Pool(req.PG.Pool)
	switch {
	case !ok:
		return s.fail(proto.StatusNotFound, "pool %d does not exist", req.PG.Pool)
	case !pool.Erasure():
		return s.fail(proto.StatusInvalid, "pool %q is replicated: only erasure-coded pools take staged shards", pool.Name)
	case req.Key == "" || len(req.Key) > maxStageToken:
		return s.fail(proto.StatusInvalid, "stage of %q: its token must have 1 to %d bytes, not %d", req.Object, maxStageToken, len(req.Key))
	case proto.ValidateObjectName(req.Object) != nil || placement.PGOf(pool, req.Object) != req.PG:
		return s.fail(proto.StatusInvalid, "stage of %q: not a valid object of pg %s", req.Object, req.PG)
	case s.positionIn(t, pool, req.PG) != int(req.Limit):
		return s.fail(proto.StatusNoStage, "%s does not hold position %d of pg %s at epoch %d", s.id, req.Limit, req.PG, t.Map().Epoch)
	}
	sh := &stagedShard{data: req.Data, sums: req.DataSums, at: time.Now()}
	kept := bufpool.Contains(req.Frame, req.Data)
	if kept {
		sh.frame = req.Frame
	} else {
		sh.data = bytes.Clone(req.Data)
	}
	if err := s.staged.put(stageKey{req.Key, req.PG, req.Object, int(req.Limit)}, sh); err != nil {
		return s.fail(proto.StatusUnavailable, "%s: %v", s.id, err)
	}
	req.Kept = kept
	return s.ok()
}

// takeStaged takes the shard of position meta.Position of a staged put,
// checked against the length the object's size gives that position.
func (s *Server) takeStaged(pool *clustermap.Pool, token string, id clustermap.PGID, name string, meta pg.ShardMeta) (*stagedShard, *proto.Response) {
	sh := s.staged.take(stageKey{token, id, name, meta.Position})
	if sh == nil {
		return nil, s.fail(proto.StatusNoStage, "%s: shard %d of %q is not staged here under that token (it expired, an earlier attempt took it, or it went to another OSD)", s.id, meta.Position, name)
	}
	if want := ec.LayoutOf(*pool.EC).ShardLen(int64(meta.Size), meta.Position); int64(len(sh.data)) != want {
		sh.release()
		return nil, s.fail(proto.StatusInvalid, "%s: staged shard %d of %q has %d bytes; an object of %d bytes gives it %d", s.id, meta.Position, name, len(sh.data), meta.Size, want)
	}
	return sh, nil
}

// refuseStaged refuses a request that names staged shards where none can
// be: only a whole put of an erasure-coded object, without snapshots, can.
func (s *Server) refuseStaged(pool *clustermap.Pool, req *proto.Request) *proto.Response {
	if req.Flags&proto.FlagStaged == 0 {
		return nil
	}
	if !pool.Erasure() || req.Op != proto.OpPut || len(req.Data) > 0 || req.SnapSeq != 0 || req.Key == "" || len(req.Key) > maxStageToken {
		return s.fail(proto.StatusInvalid, "%s of %q: only a put of an erasure-coded object without snapshots, with a token and no data, names staged shards", req.Op, req.Object)
	}
	return nil
}
