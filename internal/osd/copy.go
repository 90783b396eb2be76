package osd

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
)

// copyObject makes dst's copy of name equal to src's: the data, xattrs and
// omap, and the version last, so a copy cut short by a crash still differs
// from the source at the next peering. src or dst may be this OSD. A
// background copy is refused by a dst past its backfill-full mark.
func (s *Server) copyObject(ctx context.Context, id clustermap.PGID, name string, src, dst clustermap.OSDID, background bool) error {
	if src == dst {
		return nil
	}
	c := &objectCopy{s: s, ctx: ctx, m: s.view.Map(), id: id, coll: id.String(), name: name, src: src, dst: dst, background: background}
	xr, err := c.read(&proto.Request{Op: proto.OpListXattrs})
	if err != nil {
		return err
	}
	txn := &objstore.Txn{}
	txn.Delete(c.coll, name)
	if xr.Status == proto.StatusNotFound {
		return c.apply(txn)
	}
	var version []byte
	txn.Create(c.coll, name)
	for _, kv := range xr.KVs {
		if string(kv.Key) == versionXattr {
			version = kv.Value
			continue
		}
		txn.SetXattr(c.coll, name, string(kv.Key), kv.Value)
	}
	size, copied, err := c.copyData(txn)
	if err != nil {
		return err
	}
	txn, err = c.copyOmap()
	if err != nil {
		return err
	}
	txn.Truncate(c.coll, name, size)
	if version != nil {
		txn.SetXattr(c.coll, name, versionXattr, version)
	}
	if err := c.apply(txn); err != nil {
		return err
	}
	s.recovery.objects.Add(1)
	s.recovery.bytes.Add(copied)
	return nil
}

// objectCopy is one copyObject under way, at one map.
type objectCopy struct {
	s          *Server
	ctx        context.Context
	m          *clustermap.Map
	id         clustermap.PGID
	coll, name string
	src, dst   clustermap.OSDID
	background bool
}

func (c *objectCopy) addr(o clustermap.OSDID) string {
	if osd, ok := c.m.OSD(o); ok {
		return osd.Addr
	}
	return ""
}

// read sends req about the object to the source copy.
func (c *objectCopy) read(req *proto.Request) (*proto.Response, error) {
	req.Epoch, req.PG, req.Object = c.m.Epoch, c.id, c.name
	req.Flags |= proto.FlagLocal
	var r *proto.Response
	if c.src == c.s.id {
		r = c.s.readObject(c.coll, req)
	} else {
		var err error
		if r, err = c.s.peers.Call(c.ctx, c.addr(c.src), req); err != nil {
			return nil, err
		}
	}
	if r.Status != proto.StatusOK && r.Status != proto.StatusNotFound {
		return nil, fmt.Errorf("%s: %s", r.Status, r.Message)
	}
	return r, nil
}

// apply applies txn to the destination copy.
func (c *objectCopy) apply(txn *objstore.Txn) error {
	if c.dst == c.s.id {
		if c.background {
			if err := c.s.admitBackground(int64(txn.Size())); err != nil {
				return err
			}
		}
		if _, _, ec := parseShardColl(c.coll); ec {
			defer c.s.shards.lockAll(c.s.seed, c.coll, []string{c.name})()
		}
		return c.s.apply(txn)
	}
	var flags uint32
	if c.background {
		flags = proto.FlagBackground
	}
	resp, err := c.s.peers.Call(c.ctx, c.addr(c.dst), &proto.Request{Op: proto.OpReplicate, Flags: flags, Epoch: c.m.Epoch, PG: c.id, Object: c.name, Txn: txn.Marshal()})
	if err != nil {
		return err
	}
	switch resp.Status {
	case proto.StatusOK:
		return nil
	case proto.StatusNoSpace:
		return fmt.Errorf("%w: %s", objstore.ErrNoSpace, resp.Message)
	}
	return fmt.Errorf("%s: %s", resp.Status, resp.Message)
}

// copyData copies the data a chunk at a time, the first chunk in txn (which
// holds the delete, create and xattrs), and returns the source's size and
// the bytes copied.
func (c *objectCopy) copyData(txn *objstore.Txn) (size uint64, copied int64, err error) {
	for off := uint64(0); ; {
		r, err := c.read(&proto.Request{Op: proto.OpRead, Offset: off, Length: copyChunk})
		if err != nil {
			return 0, 0, err
		}
		if r.Status == proto.StatusNotFound {
			return 0, 0, errors.New("the source copy vanished during the copy")
		}
		size = r.Size
		n := len(r.Data)
		if n > 0 {
			txn.Write(c.coll, c.name, off, r.Data)
			copied += int64(n)
			off += uint64(n)
		}
		err = c.apply(txn)
		r.Release() // a local read's data may be the store's read cache's
		if err != nil {
			return 0, 0, err
		}
		txn = &objstore.Txn{}
		if off >= size || n == 0 {
			return size, copied, nil
		}
	}
}

// copyOmap copies the omap a page at a time and returns a transaction
// holding the last page, for the final apply.
func (c *objectCopy) copyOmap() (*objstore.Txn, error) {
	txn := &objstore.Txn{}
	var start []byte
	for {
		r, err := c.read(&proto.Request{Op: proto.OpOmapList, Start: start, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, kv := range r.KVs {
			txn.OmapSet(c.coll, c.name, kv.Key, kv.Value)
		}
		if !r.More || len(r.KVs) == 0 {
			return txn, nil
		}
		if err := c.apply(txn); err != nil {
			return nil, err
		}
		txn = &objstore.Txn{}
		start = append(append([]byte(nil), r.KVs[len(r.KVs)-1].Key...), 0)
	}
}
