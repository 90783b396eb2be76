package osd

import (
	"sync/atomic"

	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/report"
)

// clientIO counts the client requests this OSD served as primary, for the
// stats it publishes (the dashboard's IOPS and throughput come from their
// sum over OSDs). Requests between OSDs (replication, listings for
// peering, repair reads) and failed requests do not count: they are not
// what clients asked of the cluster.
type clientIO struct {
	readOps, writeOps, readBytes, writeBytes atomic.Uint64
}

// count adds one request if it was a client's and succeeded.
func (c *clientIO) count(req *proto.Request, resp *proto.Response) {
	if resp == nil || resp.Status != proto.StatusOK || req.Flags&proto.FlagLocal != 0 {
		return
	}
	switch {
	case isWrite(req.Op):
		c.writeOps.Add(1)
		c.writeBytes.Add(uint64(len(req.Data)))
	case isClientRead(req.Op):
		c.readOps.Add(1)
		c.readBytes.Add(uint64(len(resp.Data)))
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

func (c *clientIO) snapshot() report.IOCounters {
	return report.IOCounters{ReadOps: c.readOps.Load(), WriteOps: c.writeOps.Load(),
		ReadBytes: c.readBytes.Load(), WriteBytes: c.writeBytes.Load()}
}
