package osd

import (
	"sync"
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/report"
)

// clientIO counts the client requests this OSD served as primary, for the
// stats it publishes (the dashboard's IOPS and throughput come from their
// sum over OSDs) and, per pool, for its metrics. Requests between OSDs
// (replication, listings for peering, repair reads) and failed requests do
// not count: they are not what clients asked of the cluster.
type clientIO struct {
	ioCounters
	pools sync.Map // clustermap.PoolID → *ioCounters
}

type ioCounters struct {
	readOps, writeOps, readBytes, writeBytes atomic.Uint64
}

// count adds one request if it was a client's and succeeded.
func (c *clientIO) count(req *proto.Request, resp *proto.Response) {
	if resp == nil || resp.Status != proto.StatusOK || req.Flags&proto.FlagLocal != 0 {
		return
	}
	write := isWrite(req.Op)
	if !write && !isClientRead(req.Op) {
		return
	}
	pc, ok := c.pools.Load(req.PG.Pool)
	if !ok {
		pc, _ = c.pools.LoadOrStore(req.PG.Pool, &ioCounters{})
	}
	for _, k := range []*ioCounters{&c.ioCounters, pc.(*ioCounters)} {
		if write {
			k.writeOps.Add(1)
			k.writeBytes.Add(writtenBytes(req))
		} else {
			k.readOps.Add(1)
			k.readBytes.Add(uint64(len(resp.Data)))
		}
	}
}

func isClientRead(op proto.Op) bool {
	switch op {
	case proto.OpRead, proto.OpStat, proto.OpGetXattr, proto.OpListXattrs, proto.OpOmapGet, proto.OpOmapList,
		proto.OpOmapListDelim, proto.OpList, proto.OpSnaps:
		return true
	}
	return false
}

func (k *ioCounters) snapshot() report.IOCounters {
	return report.IOCounters{ReadOps: k.readOps.Load(), WriteOps: k.writeOps.Load(),
		ReadBytes: k.readBytes.Load(), WriteBytes: k.writeBytes.Load()}
}

// byPool returns each pool's counters.
func (c *clientIO) byPool() map[clustermap.PoolID]report.IOCounters {
	out := map[clustermap.PoolID]report.IOCounters{}
	c.pools.Range(func(k, v any) bool {
		out[k.(clustermap.PoolID)] = v.(*ioCounters).snapshot()
		return true
	})
	return out
}

// writtenBytes is how many bytes a client write carries: a staged put's
// came to the positions ahead of it (stage.go).
func writtenBytes(req *proto.Request) uint64 {
	if req.Flags&proto.FlagStaged != 0 {
		return req.Length
	}
	return uint64(len(req.Data))
}
