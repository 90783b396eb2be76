package report

import (
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// OSDStats is what a live OSD publishes about itself under its lease.
type OSDStats struct {
	TotalBytes int64     `json:"total_bytes"`
	UsedBytes  int64     `json:"used_bytes"`
	FreeBytes  int64     `json:"free_bytes"`
	Objects    int64     `json:"objects"`
	Updated    time.Time `json:"updated"`
	// UsedRatio is clustermap.UsedRatio of the store's fuller
	// filesystem: what the full flags and the store's refusals go by.
	UsedRatio float64 `json:"used_ratio,omitempty"`
	// Filesystem names the filesystem holding the data, equal for OSDs
	// that share one, so totals count it once.
	Filesystem string `json:"filesystem,omitempty"`
	// Epoch is the map epoch PGStates were computed at.
	Epoch clustermap.Epoch `json:"epoch"`
	// The placement groups this OSD is primary for, by state
	// ("active+clean", "active+recovering", "peering", "down"), and the
	// background work it runs.
	PGStates map[string]int `json:"pg_states,omitempty"`
	// DownPGs names PGs that cannot go active, with the reason.
	DownPGs map[string]string `json:"down_pgs,omitempty"`
	// UnfoundPGs counts, per erasure-coded PG, the objects no version of
	// which is on K positions that hold every write: never served.
	UnfoundPGs map[string]int `json:"unfound_pgs,omitempty"`
	Work       []WorkProgress `json:"work,omitempty"`
	// ClientIO counts the client requests this OSD served as primary
	// since Started; a reader takes rates from two samples (a restart
	// shows as a new Started).
	ClientIO IOCounters `json:"client_io"`
	Started  time.Time  `json:"started,omitzero"`
	// Unsynced is the bytes of small writes durable in the commit log and
	// not yet on the data disk; SyncRate the bytes a second checkpoints
	// move there (0 until measured). Unsynced/SyncRate is the time to drain.
	Unsynced int64 `json:"unsynced_bytes,omitempty"`
	SyncRate int64 `json:"sync_rate,omitempty"`
	// WritebackArea is the size of the OSD's write-back area on its meta
	// device (0: none), WritebackDirty the bytes of small writes it holds
	// that are not yet on the data disk, DestageRate the bytes a second
	// its destager moves there (0 until measured).
	WritebackArea  int64 `json:"writeback_area_bytes,omitempty"`
	WritebackDirty int64 `json:"writeback_dirty_bytes,omitempty"`
	DestageRate    int64 `json:"destage_rate,omitempty"`
	// WritebackOff: the area is turned off (`cairn osd writeback off`)
	// and drains without taking new writes.
	WritebackOff bool `json:"writeback_off,omitempty"`
	// FlashCache is the read cache on the OSD's meta device (zero: none).
	FlashCache FlashCacheStats `json:"flash_cache,omitzero"`
}

// FlashCacheStats: the flash read cache's size, the bytes of blocks it
// holds, and its hits and misses since Started.
type FlashCacheStats struct {
	Size   int64 `json:"size_bytes"`
	Used   int64 `json:"used_bytes"`
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Failed: why the cache turned itself off ("": it is on).
	Failed string `json:"failed,omitempty"`
}

// DrainSeconds is how long the OSD's unsynced writes take to reach its
// data disk at the measured rate (0: nothing to drain, or no rate yet).
func (s OSDStats) DrainSeconds() float64 {
	if s.Unsynced <= 0 || s.SyncRate <= 0 {
		return 0
	}
	return float64(s.Unsynced) / float64(s.SyncRate)
}

// DestageSeconds is how long the destager takes to move the write-back
// area's dirty bytes to the data disk at its measured rate (0: unknown).
func (s OSDStats) DestageSeconds() float64 {
	if s.WritebackDirty <= 0 || s.DestageRate <= 0 {
		return 0
	}
	return float64(s.WritebackDirty) / float64(s.DestageRate)
}

// IOCounters count client requests that succeeded, and their payload.
type IOCounters struct {
	ReadOps    uint64 `json:"read_ops"`
	WriteOps   uint64 `json:"write_ops"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
}

// WorkProgress is one background worker's progress (recovery, scrub).
type WorkProgress struct {
	Kind        string    `json:"kind"` // "recovery", "scrub", "deep-scrub"
	ObjectsDone int64     `json:"objects_done"`
	ObjectsLeft int64     `json:"objects_left"`
	BytesDone   int64     `json:"bytes_done"`
	Started     time.Time `json:"started"`
	// Progress is when the work last got something done; LastError is
	// its most recent failure (it retries by itself).
	Progress  time.Time `json:"progress,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// Event is a health event worth an operator's attention, e.g. a checksum
// error found on read. Events stay, as history, until cleared; status
// stops counting one once an operator archived it (a new occurrence of
// the same event brings it back).
type Event struct {
	Kind     string           `json:"kind"` // e.g. "corruption"
	OSD      clustermap.OSDID `json:"osd"`
	PG       string           `json:"pg,omitempty"`
	Object   string           `json:"object,omitempty"`
	Detail   string           `json:"detail"`
	Time     time.Time        `json:"time"`
	Count    int              `json:"count"`
	Archived time.Time        `json:"archived,omitzero"`
}

// Gateway is what a running gateway (cairn s3) publishes about itself
// under a lease of its own, so that it vanishes when the process does.
type Gateway struct {
	Kind     string    `json:"kind"`     // "s3"
	Endpoint string    `json:"endpoint"` // what clients use, e.g. https://10.0.0.1:9000
	Pool     string    `json:"pool"`
	Host     string    `json:"host"` // the machine's host name
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
}
