package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// OSDStatus is what one OSD reports about itself.
type OSDStatus struct {
	ID          int     `json:"id"`
	Addr        string  `json:"addr"`
	Up          bool    `json:"up"`
	CPUSeconds  float64 `json:"cpu_seconds"` // user+system CPU time of the OSD process
	MaxRSSBytes int64   `json:"max_rss_bytes"`
	Err         string  `json:"error,omitempty"`
}

// OSDStatuses asks every up OSD of the newest map for its figures, in parallel.
func (c *Client) OSDStatuses(ctx context.Context) []OSDStatus {
	m := c.view.Map()
	out := make([]OSDStatus, len(m.OSDs))
	var wg sync.WaitGroup
	for i, o := range m.OSDs {
		out[i] = OSDStatus{ID: int(o.ID), Addr: o.Addr, Up: o.Up}
		if !o.Up {
			continue
		}
		wg.Add(1)
		go func(st *OSDStatus) {
			defer wg.Done()
			resp, err := c.peers.Call(ctx, st.Addr, &proto.Request{Op: proto.OpStatus})
			if err != nil {
				st.Err = err.Error()
				return
			}
			for _, kv := range resp.KVs {
				v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
				switch string(kv.Key) {
				case proto.StatusKeyCPUNanos:
					st.CPUSeconds = float64(v) / 1e9
				case proto.StatusKeyMaxRSS:
					st.MaxRSSBytes = v
				}
			}
		}(&out[i])
	}
	wg.Wait()
	return out
}

// SetOSDIn marks an OSD in (placement may map data to it) or out (its data
// moves to the other OSDs). It returns once this client sees the new map.
func (c *Client) SetOSDIn(ctx context.Context, id int, in bool) error {
	return c.updateOSD(ctx, id, func(o *clustermap.OSD) bool {
		if o.In == in && !o.AutoOut {
			return false
		}
		o.In, o.AutoOut = in, false
		return true
	})
}

// SetOSDWriteback turns an OSD's write-back area on or off (off: it
// drains to the data disk and takes no new writes). The flag is in the
// map, so it holds across the OSD's restarts.
func (c *Client) SetOSDWriteback(ctx context.Context, id int, on bool) error {
	return c.updateOSD(ctx, id, func(o *clustermap.OSD) bool {
		if o.WritebackOff == !on {
			return false
		}
		o.WritebackOff = !on
		return true
	})
}

// updateOSD changes OSD id's entry of the map by change (false: nothing
// to change) and waits until this client sees the new map.
func (c *Client) updateOSD(ctx context.Context, id int, change func(o *clustermap.OSD) bool) error {
	nm, err := c.meta.Update(ctx, func(m *clustermap.Map) error {
		o, ok := m.OSD(clustermap.OSDID(id))
		if !ok {
			return fmt.Errorf("%w: osd.%d does not exist", ErrInvalid, id)
		}
		if !change(o) {
			return meta.ErrNoChange
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, meta.ErrNoChange) {
			return nil
		}
		return err
	}
	c.view.WaitFor(ctx, nm.Epoch, 10*time.Second)
	return nil
}

// RemoveOSD deletes an OSD from the map; see RemoveOSDs.
func (c *Client) RemoveOSD(ctx context.Context, id int) error { return c.RemoveOSDs(ctx, id) }

// RemoveOSDs deletes OSDs from the map, all in one map change or none. It
// refuses while any of them is in, or while any placement group still
// counts on its copy (it is named in a PG record as holding data no other
// OSD has yet): mark them out and wait for the cluster to be healthy first.
func (c *Client) RemoveOSDs(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: no OSD to remove", ErrInvalid)
	}
	recs, err := c.meta.PGRecords(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := checkRemovable(c.view.Map(), recs, clustermap.OSDID(id)); err != nil {
			return err
		}
	}
	nm, err := c.meta.Update(ctx, func(m *clustermap.Map) error {
		for _, id := range ids {
			// Checked again on the map being changed: it may be newer.
			if err := checkInMap(m, clustermap.OSDID(id)); err != nil {
				return err
			}
		}
		m.OSDs = slices.DeleteFunc(m.OSDs, func(o clustermap.OSD) bool { return slices.Contains(ids, int(o.ID)) })
		return nil
	})
	if err != nil {
		return err
	}
	c.view.WaitFor(ctx, nm.Epoch, 10*time.Second)
	return nil
}

// checkInMap refuses an OSD that does not exist or is still in.
func checkInMap(m *clustermap.Map, id clustermap.OSDID) error {
	o, ok := m.OSD(id)
	if !ok {
		return fmt.Errorf("%w: osd.%d does not exist", ErrInvalid, id)
	}
	if o.In {
		return fmt.Errorf("%w: osd.%d is in; run `cairn osd out %d` and wait for HEALTH_OK first", ErrInvalid, id, id)
	}
	return nil
}

// checkRemovable refuses an OSD that checkInMap refuses, or that some PG
// record names as holding writes its acting set does not have completely.
func checkRemovable(m *clustermap.Map, recs map[string]pg.Record, id clustermap.OSDID) error {
	if err := checkInMap(m, id); err != nil {
		return err
	}
	var needed []string
	for pg, r := range recs {
		if !slices.Contains(r.Complete, id) {
			continue
		}
		whole := len(r.Acting) > 0
		for _, a := range r.Acting {
			whole = whole && a != id && slices.Contains(r.Complete, a)
		}
		if !whole {
			needed = append(needed, pg)
		}
	}
	if len(needed) == 0 {
		return nil
	}
	slices.Sort(needed)
	if len(needed) > 10 {
		needed = append(needed[:10], "...")
	}
	return fmt.Errorf("%w: osd.%d still holds data of %d pg(s) whose new copies are not complete yet (%s); wait for HEALTH_OK", ErrInvalid, id, len(needed), strings.Join(needed, ", "))
}

// ScrubResult counts what scrubbing one placement group found.
type ScrubResult struct {
	PG       string `json:"pg"`
	Objects  int64  `json:"objects"`
	Bytes    int64  `json:"bytes"`
	Errors   int64  `json:"errors"`
	Repaired int64  `json:"repaired"`
	Detail   string `json:"detail,omitempty"` // objects with no good copy
}

// Scrub scrubs one placement group of the pool now (deep: reads and
// verifies all data) and repairs what it finds.
func (p *Pool) Scrub(ctx context.Context, seed uint32, deep bool) (ScrubResult, error) {
	req := &proto.Request{Op: proto.OpScrub}
	if deep {
		req.Flags |= proto.FlagDeep
	}
	s := seed
	resp, err := p.c.call(ctx, p.id, p.name, &s, req)
	res := ScrubResult{PG: clustermap.PGID{Pool: p.id, Seed: seed}.String()}
	if err != nil {
		return res, err
	}
	for _, kv := range resp.KVs {
		v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		switch string(kv.Key) {
		case proto.ScrubKeyObjects:
			res.Objects = v
		case proto.ScrubKeyBytes:
			res.Bytes = v
		case proto.ScrubKeyErrors:
			res.Errors = v
		case proto.ScrubKeyRepaired:
			res.Repaired = v
		}
	}
	res.Detail = resp.Message
	return res, nil
}
