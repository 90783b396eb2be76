package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/bufpool"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// Staged puts of erasure-coded objects: the client codes the object and
// sends each position of its PG its shard (proto.OpStage), all at once,
// then asks the primary for the put (proto.FlagStaged), which commits it
// as any other with small messages naming the shards. Sent whole, most of
// the object's bytes would cross the network twice: to the primary, then
// as shards to the other positions. The OSD side, and why nothing that
// decides a write's fate changes, is in internal/osd/stage.go.

// MinStaged is the smallest put a client stages: below it, the messages
// to every position cost more than the bytes they save.
const MinStaged = 1 << 20

// errNoStage: a staged put found a position's shard gone
// (proto.StatusNoStage); it was not acknowledged.
var errNoStage = errors.New("a position's staged shard is gone")

// putStaged puts data as the whole object name by staging its shards, if
// its pool is erasure-coded and data is large enough. done is false when
// the put was not made (or was refused unacknowledged): the caller sends
// data whole.
func (p *Pool) putStaged(ctx context.Context, name string, data []byte) (done bool, err error) {
	if len(data) < MinStaged || len(data) > MaxChunk || p.snapSeq != 0 || p.snap != 0 || proto.ValidateObjectName(name) != nil {
		return false, nil
	}
	t := p.c.view.Table()
	pool, ok := t.Map().Pool(p.id)
	if !ok || !pool.Erasure() {
		return false, nil
	}
	c, err := p.c.codec(*pool.EC)
	if err != nil {
		return false, nil
	}
	pieces, parity, err := c.EncodePieces(data, bufpool.Get)
	defer func() {
		for _, b := range parity {
			bufpool.Put(b)
		}
	}()
	if err != nil {
		return false, nil
	}
	id, _ := t.Locate(pool, name)
	token := newStageToken()
	if !p.stageShards(ctx, t, id, name, token, pieces) {
		return false, nil
	}
	_, err = p.do(ctx, &proto.Request{Op: proto.OpPut, Flags: proto.FlagStaged, Object: name, Key: token, Length: uint64(len(data))})
	if errors.Is(err, errNoStage) {
		return false, nil
	}
	return true, err
}

// stageShards sends each position of pg id at t its shard, at once, from
// the pieces it lies in (ec.Codec.EncodePieces); ok when every position
// with an OSD up took it. It returns once no frame needs the pieces.
func (p *Pool) stageShards(ctx context.Context, t *placement.Table, id clustermap.PGID, name, token string, shards [][][]byte) bool {
	pool, _ := t.Map().Pool(id.Pool)
	_, osds := t.Positions(pool, id)
	if len(osds) != len(shards) {
		return false
	}
	var wg, sent sync.WaitGroup
	defer sent.Wait() // the caller then reuses what the pieces point into
	var failed atomic.Bool
	for i, osd := range osds {
		o, up := t.Map().OSD(osd)
		if osd == placement.NoOSD || !up || !o.Up {
			continue // a hole: the primary writes no shard there either
		}
		parts := make([]rpc.Part, len(shards[i]))
		for j, b := range shards[i] {
			parts[j] = rpc.Part{Bytes: b}
		}
		req := &proto.Request{Op: proto.OpStage, Epoch: t.Map().Epoch, PG: id, Object: name, Key: token, Limit: uint32(i)}
		sent.Add(1)
		sh, err := rpc.ShareData(req, parts, sent.Done)
		if err != nil {
			failed.Store(true)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sh.Release()
			resp, err := p.c.peers.CallShared(ctx, o.Addr, sh)
			took := err == nil && resp.Status == proto.StatusOK
			if err == nil {
				resp.Release()
			}
			if !took {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	return !failed.Load()
}

// newStageToken names one staged put's shards: random, so no two puts'
// shards meet.
func newStageToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// codec is the erasure code of profile, built once per client.
func (c *Client) codec(profile clustermap.ECProfile) (*ec.Codec, error) {
	if v, ok := c.codecs.Load(profile); ok {
		return v.(*ec.Codec), nil
	}
	cd, err := ec.New(ec.LayoutOf(profile))
	if err != nil {
		return nil, err
	}
	c.codecs.Store(profile, cd)
	return cd, nil
}
