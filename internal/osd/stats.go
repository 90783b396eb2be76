package osd

import (
	"context"
	"reflect"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
)

// How often an OSD looks at its stats, and how often it publishes them
// when nothing a reader needs has changed. Every publish is an etcd write
// (a raft entry and a sync of etcd's log): an idle cluster of many OSDs
// should not keep etcd and its disk busy saying nothing new.
var (
	statsEvery   = 2 * time.Second
	statsRefresh = 30 * time.Second
)

// The changes in used bytes and in the used ratio below which stats count
// as the same: a filesystem the OSD shares moves by a little all the time.
const (
	usageSlack = 1 << 20
	ratioSlack = 0.001
)

// publishStats publishes the OSD's stats under lease: at once, then when
// they change (looked at every statsEvery, or when kicked), and at least
// every statsRefresh.
func (s *Server) publishStats(ctx context.Context, lease *meta.Lease) {
	t := time.NewTicker(statsEvery)
	defer t.Stop()
	fs := filesystemID(s.opts.DataDir)
	var last meta.OSDStats
	var lastAt time.Time
	for {
		if st, ok := s.stats(fs); ok && (lastAt.IsZero() || time.Since(lastAt) >= statsRefresh || !sameStats(last, st)) {
			if lease.PublishStats(ctx, st) == nil {
				last, lastAt = st, time.Now()
			}
		}
		select {
		case <-s.statsKick:
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stats gathers what the OSD publishes about itself; false if its store
// cannot say how full it is.
func (s *Server) stats(fs string) (meta.OSDStats, bool) {
	u, err := s.store.Usage()
	if err != nil {
		return meta.OSDStats{}, false
	}
	states, down, unfound := s.pgReport()
	c := s.store.Counters()
	wb := s.store.Writeback()
	return meta.OSDStats{
		TotalBytes: u.TotalBytes, FreeBytes: u.FreeBytes, UsedBytes: u.TotalBytes - u.FreeBytes,
		UsedRatio: usedRatio(u), Filesystem: fs,
		Objects: u.Objects, Updated: time.Now().UTC(), Epoch: clustermap.Epoch(s.checkedEpoch.Load()),
		PGStates: states, DownPGs: down, UnfoundPGs: unfound, Work: s.workProgress(),
		ClientIO: s.clientIO.snapshot(), Started: s.started,
		Unsynced: c.Unsynced, SyncRate: c.SyncRate,
		WritebackArea: wb.AreaBytes, WritebackDirty: wb.DirtyBytes, DestageRate: int64(wb.DestageRate),
		WritebackOff: wb.AreaBytes > 0 && !wb.On,
		FlashCache:   s.flashCache(),
	}, true
}

// sameStats reports whether b tells a reader nothing a did not: equal but
// for the time, with used bytes within usageSlack and the used ratio (of
// the fuller of data and meta device) within ratioSlack.
func sameStats(a, b meta.OSDStats) bool {
	if d := a.UsedBytes - b.UsedBytes; d > usageSlack || d < -usageSlack {
		return false
	}
	if d := a.UsedRatio - b.UsedRatio; d > ratioSlack || d < -ratioSlack {
		return false
	}
	a.Updated, a.UsedBytes, a.FreeBytes, a.UsedRatio = b.Updated, b.UsedBytes, b.FreeBytes, b.UsedRatio
	return reflect.DeepEqual(a, b)
}
