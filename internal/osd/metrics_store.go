package osd

import (
	"github.com/prometheus/client_golang/prometheus"
)

// storeCollector reads, when Prometheus scrapes, the store's running
// totals (how commits batch into synced log writes, checkpoint syncs,
// cache hits) and the client IO this OSD served as primary, by pool. The
// pool label is bounded by the pools that exist.
type storeCollector struct {
	s                                        *Server
	logWrites, logCommits, logBytes, logSegs *prometheus.Desc
	syncs, cache, cow                        *prometheus.Desc
	paced, pacedSecs, unsynced, syncRate     *prometheus.Desc
	poolOps, poolBytes                       *prometheus.Desc
	flashUsed, flashErrs                     *prometheus.Desc
}

func newStoreCollector(s *Server, labels prometheus.Labels) *storeCollector {
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc("cairn_osd_"+name, help, vars, labels)
	}
	return &storeCollector{s: s,
		logWrites:  d("commit_log_writes_total", "Synced writes of the store's commit log (each carries a group of commits)."),
		logCommits: d("commit_log_commits_total", "Commits the commit log's synced writes carried (over cairn_osd_commit_log_writes_total: the batch size)."),
		logBytes:   d("commit_log_bytes_total", "Bytes of the commit log's synced writes, alignment padding included."),
		logSegs:    d("commit_log_segment_switches_total", "Moves of the commit log to its next segment."),
		syncs:      d("checkpoint_syncs_total", "Syncs by checkpoints: of the whole filesystem, or of one data file.", "kind"),
		cache:      d("cache_lookups_total", "Lookups of the store's caches (in memory: index records, large data reads; on flash: data blocks of small reads), by result.", "cache", "result"),
		cow:        d("copy_on_write_total", "Overwrites written to a fresh slot instead of in place."),
		paced:      d("paced_writes_total", "Writes slowed or held because the data disk's checkpoints fell behind."),
		pacedSecs:  d("paced_seconds_total", "Time the writes of cairn_osd_paced_writes_total lost to pacing."),
		unsynced:   d("unsynced_bytes", "Bytes of small writes durable in the commit log and not yet synced to the data disk."),
		syncRate:   d("checkpoint_sync_rate_bytes", "Bytes a second checkpoints sync to the data disk (moving average; 0 until measured)."),
		flashUsed:  d("flash_cache_bytes", "The read cache on the meta device: its size and the bytes of data blocks it holds.", "kind"),
		flashErrs:  d("flash_cache_errors_total", "Blocks of the flash read cache that failed their checksum or met an IO error (read from the data disk instead)."),
		poolOps:    d("pool_client_requests_total", "Client requests this OSD served as primary that succeeded, by pool and kind (read, write).", "pool", "kind"),
		poolBytes:  d("pool_client_bytes_total", "Payload bytes of the client requests this OSD served as primary that succeeded, by pool and kind (read, write).", "pool", "kind"),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.logWrites, c.logCommits, c.logBytes, c.logSegs, c.syncs, c.cache, c.cow, c.paced, c.pacedSecs, c.unsynced, c.syncRate, c.poolOps, c.poolBytes, c.flashUsed, c.flashErrs} {
		ch <- d
	}
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if c.s.store != nil {
		st := c.s.store.Counters()
		counter(c.logWrites, st.LogWrites)
		counter(c.logCommits, st.LogCommits)
		counter(c.logBytes, st.LogBytes)
		counter(c.logSegs, st.LogSwitches)
		counter(c.syncs, st.FSSyncs, "filesystem")
		counter(c.syncs, st.FileSyncs, "file")
		counter(c.cache, st.IndexHits, "index", "hit")
		counter(c.cache, st.IndexMisses, "index", "miss")
		counter(c.cache, st.DataHits, "data", "hit")
		counter(c.cache, st.DataMisses, "data", "miss")
		counter(c.cow, st.CopyOnWrites)
		counter(c.paced, st.PacedWrites)
		ch <- prometheus.MustNewConstMetric(c.pacedSecs, prometheus.CounterValue, float64(st.PacedNanos)/1e9)
		ch <- prometheus.MustNewConstMetric(c.unsynced, prometheus.GaugeValue, float64(st.Unsynced))
		ch <- prometheus.MustNewConstMetric(c.syncRate, prometheus.GaugeValue, float64(st.SyncRate))
		if fc := c.s.store.FlashCache(); fc.Bytes > 0 {
			counter(c.cache, fc.Hits, "flash", "hit")
			counter(c.cache, fc.Misses, "flash", "miss")
			counter(c.flashErrs, fc.Errors)
			ch <- prometheus.MustNewConstMetric(c.flashUsed, prometheus.GaugeValue, float64(fc.Bytes), "size")
			ch <- prometheus.MustNewConstMetric(c.flashUsed, prometheus.GaugeValue, float64(fc.Used), "used")
		}
	}
	if c.s.view == nil {
		return
	}
	m := c.s.view.Map()
	for id, io := range c.s.clientIO.byPool() {
		p, ok := m.Pool(id)
		if !ok {
			continue // removed: its series end
		}
		counter(c.poolOps, int64(io.ReadOps), p.Name, "read")
		counter(c.poolOps, int64(io.WriteOps), p.Name, "write")
		counter(c.poolBytes, int64(io.ReadBytes), p.Name, "read")
		counter(c.poolBytes, int64(io.WriteBytes), p.Name, "write")
	}
}
