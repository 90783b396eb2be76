package osd

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/proto"
)

// TestClientIOCountsOnlyClientSuccesses: the published counters are what
// clients asked of the cluster: replication between OSDs, local reads and
// failures do not count.
func TestClientIOCountsOnlyClientSuccesses(t *testing.T) {
	var c clientIO
	ok := &proto.Response{Status: proto.StatusOK, Data: make([]byte, 100)}
	c.count(&proto.Request{Op: proto.OpPut, Data: make([]byte, 4096), PG: clustermap.PGID{Pool: 1}}, ok)
	c.count(&proto.Request{Op: proto.OpWrite, Data: make([]byte, 512), PG: clustermap.PGID{Pool: 2}}, ok)
	c.count(&proto.Request{Op: proto.OpRead}, ok)
	c.count(&proto.Request{Op: proto.OpReplicate, Txn: make([]byte, 4096)}, ok)
	c.count(&proto.Request{Op: proto.OpReadReplica}, ok)
	c.count(&proto.Request{Op: proto.OpRead, Flags: proto.FlagLocal}, ok)
	c.count(&proto.Request{Op: proto.OpPut, Data: make([]byte, 4096)}, &proto.Response{Status: proto.StatusNoSpace})
	c.count(&proto.Request{Op: proto.OpPut}, nil)
	got := c.snapshot()
	if got.WriteOps != 2 || got.WriteBytes != 4096+512 || got.ReadOps != 1 || got.ReadBytes != 100 {
		t.Fatalf("counters %+v, want 2 writes of 4608 bytes and 1 read of 100", got)
	}
	pools := c.byPool()
	if pools[1].WriteBytes != 4096 || pools[2].WriteOps != 1 || pools[2].WriteBytes != 512 {
		t.Fatalf("by pool: %+v", pools)
	}
}
