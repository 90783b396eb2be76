// Package mapview follows the cluster map in etcd and keeps the newest one,
// with its placement table, ready for the IO path: reading it is one atomic
// load. Clients and OSDs both use it.
package mapview

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/placement"
)

// View holds the newest map known to this process.
type View struct {
	cur atomic.Pointer[placement.Table]
	// setMu makes each new map's step one at a time: the watch and Offer
	// may bring maps at once, and the older must never replace the newer.
	setMu sync.Mutex

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every new map
	onMap   []func(*clustermap.Map)
}

// Follow starts watching the map and returns once the first one arrived.
func Follow(ctx context.Context, st *meta.Store) (*View, error) {
	v := &View{changed: make(chan struct{})}
	go st.Watch(ctx, v.set)
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	for v.cur.Load() == nil {
		select {
		case <-v.Changed():
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("no cluster map arrived from etcd in 15 s: %w", meta.ErrNoMap)
		}
	}
	return v, nil
}

// Static returns a view of one fixed map (tests, tools).
func Static(m *clustermap.Map) *View {
	v := &View{changed: make(chan struct{})}
	v.set(m)
	return v
}

// Offer gives the view a map read apart from its watch (the newest one
// in etcd, say); it is taken if it is newer than the view's, as if the
// watch had delivered it.
func (v *View) Offer(m *clustermap.Map) { v.set(m) }

func (v *View) set(m *clustermap.Map) {
	v.setMu.Lock()
	defer v.setMu.Unlock()
	old := v.cur.Load()
	if old != nil && old.Map().Epoch >= m.Epoch {
		return
	}
	if old != nil {
		v.cur.Store(old.Next(m)) // keeps the placements the change did not move
	} else {
		v.cur.Store(placement.NewTable(m))
	}
	v.mu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	hooks := v.onMap
	v.mu.Unlock()
	for _, fn := range hooks {
		fn(m)
	}
}

// OnMap registers fn to run (synchronously, in the watch goroutine) for every later map.
func (v *View) OnMap(fn func(*clustermap.Map)) {
	v.mu.Lock()
	v.onMap = append(v.onMap, fn)
	v.mu.Unlock()
}

// OnOSDDown registers fn to run (synchronously, in the watch goroutine)
// for every OSD that a later map marks down, or moves to another address,
// with the address it had.
func (v *View) OnOSDDown(fn func(id clustermap.OSDID, addr string)) {
	prev := upAddrs(v.Map())
	v.OnMap(func(m *clustermap.Map) {
		now := upAddrs(m)
		for id, addr := range prev {
			if now[id] != addr {
				fn(id, addr)
			}
		}
		prev = now
	})
}

// upAddrs maps the OSDs marked up to their addresses.
func upAddrs(m *clustermap.Map) map[clustermap.OSDID]string {
	out := make(map[clustermap.OSDID]string, len(m.OSDs))
	for _, o := range m.OSDs {
		if o.Up {
			out[o.ID] = o.Addr
		}
	}
	return out
}

// Changed returns a channel closed when the next map arrives.
func (v *View) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

// Table returns the newest placement table.
func (v *View) Table() *placement.Table { return v.cur.Load() }

// Map returns the newest map.
func (v *View) Map() *clustermap.Map { return v.cur.Load().Map() }

// Epoch returns the newest map's epoch.
func (v *View) Epoch() clustermap.Epoch { return v.cur.Load().Map().Epoch }

// WaitFor waits until the view's epoch is at least e, or timeout.
func (v *View) WaitFor(ctx context.Context, e clustermap.Epoch, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		ch := v.Changed()
		if v.Epoch() >= e {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C:
			return v.Epoch() >= e
		}
	}
}
