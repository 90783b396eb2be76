package client

import (
	"context"
	"strconv"
	"sync"

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
