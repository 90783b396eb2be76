package osd

import (
	"maps"
	"slices"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/proto"
)

// TestQueueReadRepair: the queue of repairs on read takes an object once
// (a second read of it adds its positions while the repair waits, nothing
// once it runs) and refuses what does not fit.
func TestQueueReadRepair(t *testing.T) {
	s := &Server{readRepairs: readRepairs{queue: make(chan *readRepair, 2)}}
	p := &pgState{}
	id := clustermap.PGID{Pool: 1, Seed: 3}
	at := func(pos ...int) map[int]*shardError {
		out := map[int]*shardError{}
		for _, i := range pos {
			out[i] = &shardError{osd: clustermap.OSDID(i), status: proto.StatusCorrupt, msg: "checksum mismatch"}
		}
		return out
	}
	if !s.queueReadRepair(p, id, "a", at(0)) || !s.queueReadRepair(p, id, "a", at(1)) {
		t.Fatal("queueing a twice: refused")
	}
	if len(s.readRepairs.queue) != 1 {
		t.Fatalf("a queued %d times, want once", len(s.readRepairs.queue))
	}
	if !s.queueReadRepair(p, id, "b", at(0)) {
		t.Fatal("queueing b: refused with room left")
	}
	if s.queueReadRepair(p, id, "c", at(0)) {
		t.Fatal("queueing c: taken past the queue's bound")
	}
	r := <-s.readRepairs.queue
	if r.key.name != "a" || !slices.Equal(slices.Sorted(maps.Keys(r.found)), []int{0, 1}) {
		t.Fatalf("first repair: %q at positions %v, want a at [0 1]", r.key.name, slices.Sorted(maps.Keys(r.found)))
	}
	r.started = true
	if !s.queueReadRepair(p, id, "a", at(2)) || len(s.readRepairs.queue) != 1 || r.found[2] != nil {
		t.Fatal("a read of an object being repaired: queued again or added to the running repair")
	}
	s.readRepairs.pending = nil // the repairs ended
	if !s.queueReadRepair(p, id, "c", at(0)) {
		t.Fatal("queueing c once there is room: refused")
	}
}
