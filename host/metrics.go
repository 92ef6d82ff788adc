package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/internal/latency"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/metered"
)

// collector exports the daemon's metric structs (and the catalog's
// counts) to Prometheus at scrape time. Every name starts with "stated_".
type collector struct {
	m   *daemon.Metrics
	cat func() *catalog.Catalog // nil result: this node holds no catalog (a cluster follower)
	// cache is the local cache of a remote checkpoint store (nil: none).
	cache cacheStats
	// store counts the calls that reach the checkpoint store (nil: none).
	store *metered.Store

	ops, opErrors, opDur                       *prometheus.Desc
	batches, batchesRejected, streams          *prometheus.Desc
	openInstances, opens, openFailures, resto  *prometheus.Desc
	reaped, restoFallbacks                     *prometheus.Desc
	chanBytes, chanSkipped, unaligned          *prometheus.Desc
	alignment, startDelay                      *prometheus.Desc
	ckSync, ckAsync, ckBytes, fullBytes, snapF *prometheus.Desc
	ckCompleted, ckFailures, ckDuration        *prometheus.Desc
	ckMerged                                   *prometheus.Desc
	catJobs, catRetained, catSavepoints        *prometheus.Desc
	catInFlight, catObjects, catBytes          *prometheus.Desc
	sweeps, sweepPages, sweepsTruncated        *prometheus.Desc
	cacheHits, cacheMisses, cacheEvictions     *prometheus.Desc
	cacheCorrupt, cacheBytes, cacheEntries     *prometheus.Desc
	storeCalls, storeErrors, storeDeleted      *prometheus.Desc
	storeBytes, corruption                     *prometheus.Desc
}

// cacheStats is what the checkpoint store answers when a local cache is in
// front of it (tiered/cache.Store, also through storeurl's wrappers).
type cacheStats interface{ Stats() cache.Stats }

// descs returns the maker of a collector's metric descriptions: each
// metric's name is prefix+name, with the given variable labels.
func descs(prefix string) func(name, help string, labels ...string) *prometheus.Desc {
	return func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, labels, nil)
	}
}

func newCollector(m *daemon.Metrics, cat func() *catalog.Catalog, cs cacheStats, store *metered.Store) *collector {
	d := descs("stated_")
	return &collector{
		m: m, cat: cat, cache: cs, store: store,
		corruption:      d("corruption_detected_total", "Corrupt data detected, by where: restore, catalog, savepoint, snapshot (each also logged at level error) and cache (a cached copy that failed its checksum; read from the remote instead).", "where"),
		storeCalls:      d("store_calls_total", "Calls that reached the checkpoint store (below the cache), by operation.", "op"),
		storeErrors:     d("store_call_errors_total", "Calls to the checkpoint store that failed, by operation.", "op"),
		storeDeleted:    d("store_deleted_objects_total", "Object names the daemon asked the checkpoint store to delete."),
		storeBytes:      d("store_bytes_total", "Bytes sent to (up) and read from (down) the checkpoint store.", "direction"),
		cacheHits:       d("cache_hits_total", "Reads of the checkpoint store answered by the local cache (checksum verified)."),
		cacheMisses:     d("cache_misses_total", "Reads of the checkpoint store that went to the remote store."),
		cacheEvictions:  d("cache_evictions_total", "Cached copies dropped to stay within --cache-bytes."),
		cacheCorrupt:    d("cache_corrupt_total", "Cached copies that failed their checksum (read from the remote instead)."),
		cacheBytes:      d("cache_bytes", "Bytes the local cache holds (transfers in flight included)."),
		cacheEntries:    d("cache_entries", "Objects the local cache holds."),
		ops:             d("ops_total", "State operations applied, by backend, state kind and operation.", "backend", "state_kind", "op"),
		opErrors:        d("op_errors_total", "State operations that failed, by backend, state kind and operation.", "backend", "state_kind", "op"),
		opDur:           d("op_duration_seconds", "Time one state operation took in its backend.", "backend", "state_kind"),
		batches:         d("batches_total", "Batch requests received."),
		batchesRejected: d("batches_rejected_total", "Batch requests refused whole (too many operations)."),
		streams:         d("batch_streams", "Open batch streams."),
		openInstances:   d("open_instances", "Open backend instances.", "backend"),
		opens:           d("instance_opens_total", "Instances opened."),
		openFailures:    d("instance_open_failures_total", "Open requests that failed."),
		resto:           d("restores_total", "Instances opened from a checkpoint or savepoint."),
		restoFallbacks:  d("restore_fallbacks_total", "Restores of the latest checkpoint that skipped damaged newer checkpoints because the caller allowed the fallback (each logged at level error)."),
		chanBytes:       d("channel_state_bytes_total", "Stored bytes of channel state (the persisted in-flight data of unaligned checkpoints) in task snapshots."),
		chanSkipped:     d("channel_state_skipped_total", "Restores that skipped a checkpoint's channel state on request (the in-flight data was knowingly lost)."),
		unaligned:       d("unaligned_snapshots_total", "Task snapshots their engine reported as unaligned."),
		alignment:       d("checkpoint_alignment_seconds", "Alignment of task snapshots as their engine reported it (first to last barrier at the task's inputs)."),
		startDelay:      d("checkpoint_start_delay_seconds", "Start delay of task snapshots as their engine reported it (checkpoint trigger to the first barrier at the task)."),
		reaped:          d("instances_reaped_total", "Instances closed because they had no batch stream for --idle-instance-timeout."),
		ckSync:          d("checkpoint_sync_duration_seconds", "Synchronous part of a task snapshot.", "backend"),
		ckAsync:         d("checkpoint_async_duration_seconds", "Asynchronous part (upload) of a task snapshot.", "backend"),
		ckBytes:         d("checkpointed_bytes_total", "Bytes task snapshots uploaded (incremental size).", "backend"),
		fullBytes:       d("checkpoint_full_bytes_total", "Full size of the state task snapshots describe.", "backend"),
		snapF:           d("snapshot_failures_total", "Task snapshots that failed.", "backend"),
		ckCompleted:     d("checkpoints_completed_total", "Checkpoints completed."),
		ckMerged:        d("checkpoint_reports_merged_total", "Task reports taken in their checkpoint completion's own log entry (cluster mode)."),
		ckFailures:      d("checkpoint_failures_total", "Checkpoints that failed, by reason.", "reason"),
		ckDuration:      d("checkpoint_duration_seconds", "From the first snapshot of a checkpoint to its completion."),
		catJobs:         d("catalog_jobs", "Jobs the catalog knows."),
		catRetained:     d("catalog_retained_checkpoints", "Retained completed checkpoints."),
		catSavepoints:   d("catalog_savepoints", "Savepoints."),
		catInFlight:     d("catalog_inflight_checkpoints", "Checkpoints in flight."),
		catObjects:      d("catalog_referenced_objects", "Objects retained checkpoints and savepoints reference."),
		catBytes:        d("catalog_referenced_bytes", "Bytes of the referenced objects."),
		sweeps:          d("catalog_sweeps_total", "Orphan sweeps run."),
		sweepPages:      d("catalog_sweep_list_pages_total", "LIST pages the orphan sweeps read (on S3, LIST requests)."),
		sweepsTruncated: d("catalog_sweeps_truncated_total", "Orphan sweeps that reached --sweep-max-list-pages and deleted nothing."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func histogram(ch chan<- prometheus.Metric, desc *prometheus.Desc, h *latency.Histogram, labels ...string) {
	s := h.Snapshot()
	ch <- prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, s.Buckets, labels...)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	stateKind := func(s int) string {
		if s == 0 {
			return "unknown"
		}
		return daemon.StateKinds[s-1].String()
	}
	for b, kind := range daemon.BackendKinds {
		bk := string(kind)
		for s := range m.Ops[b] {
			for op := range m.Ops[b][s] {
				// Only series that happened: a full matrix would be
				// hundreds of zeros.
				if n := m.Ops[b][s][op].Load(); n > 0 {
					counter(c.ops, n, bk, stateKind(s), daemon.Op(op).String())
					counter(c.opErrors, m.OpErrors[b][s][op].Load(), bk, stateKind(s), daemon.Op(op).String())
				}
			}
			if h := m.OpLatency[b][s]; h.Snapshot().Count > 0 {
				histogram(ch, c.opDur, h, bk, stateKind(s))
			}
		}
		gauge(c.openInstances, float64(m.OpenInstances[b].Load()), bk)
		histogram(ch, c.ckSync, m.CheckpointSync[b], bk)
		histogram(ch, c.ckAsync, m.CheckpointAsync[b], bk)
		counter(c.ckBytes, m.CheckpointedBytes[b].Load(), bk)
		counter(c.fullBytes, m.FullBytes[b].Load(), bk)
		counter(c.snapF, m.SnapshotFailures[b].Load(), bk)
	}
	counter(c.batches, m.Batches.Load())
	counter(c.batchesRejected, m.BatchesRejected.Load())
	gauge(c.streams, float64(m.Streams.Load()))
	counter(c.opens, m.Opens.Load())
	counter(c.openFailures, m.OpenFailures.Load())
	counter(c.resto, m.Restores.Load())
	counter(c.restoFallbacks, m.RestoreFallbacks.Load())
	counter(c.chanBytes, m.ChannelStateBytes.Load())
	counter(c.chanSkipped, m.ChannelStateSkipped.Load())
	counter(c.unaligned, m.UnalignedSnapshots.Load())
	counter(c.reaped, m.InstancesReaped.Load())
	counter(c.ckCompleted, m.CheckpointsCompleted.Load())
	counter(c.ckMerged, m.ReportsMerged.Load())
	for r := range m.CheckpointFailures {
		counter(c.ckFailures, m.CheckpointFailures[r].Load(), daemon.FailureReason(r).String())
	}
	histogram(ch, c.ckDuration, m.CheckpointDuration)
	histogram(ch, c.alignment, m.Alignment)
	histogram(ch, c.startDelay, m.StartDelay)
	for s := range daemon.NumCorruptionSites {
		counter(c.corruption, m.Corruption[s].Load(), daemon.CorruptionSite(s).String())
	}
	var cacheCorrupt uint64
	if cat := c.catalog(); cat != nil {
		st := cat.Stats()
		gauge(c.catJobs, float64(st.Jobs))
		gauge(c.catRetained, float64(st.Retained))
		gauge(c.catSavepoints, float64(st.Savepoints))
		gauge(c.catInFlight, float64(st.InFlight))
		gauge(c.catObjects, float64(st.Referenced.Objects))
		gauge(c.catBytes, float64(st.Referenced.Bytes))
		counter(c.sweeps, st.Sweeps)
		counter(c.sweepPages, st.SweepListPages)
		counter(c.sweepsTruncated, st.SweepsTruncated)
	}
	if c.store != nil {
		st := c.store.Counts()
		for op := range tiered.NumOps {
			counter(c.storeCalls, st.Calls[op], op.String())
			counter(c.storeErrors, st.Errors[op], op.String())
		}
		counter(c.storeDeleted, st.Deleted)
		counter(c.storeBytes, st.BytesUp, "up")
		counter(c.storeBytes, st.BytesDown, "down")
	}
	if c.cache != nil {
		st := c.cache.Stats()
		counter(c.cacheHits, uint64(st.Hits))
		counter(c.cacheMisses, uint64(st.Misses))
		counter(c.cacheEvictions, uint64(st.Evictions))
		counter(c.cacheCorrupt, uint64(st.Corrupt))
		cacheCorrupt = uint64(st.Corrupt)
		gauge(c.cacheBytes, float64(st.Bytes))
		gauge(c.cacheEntries, float64(st.Entries))
	}
	counter(c.corruption, cacheCorrupt, "cache")
}

// catalog is the catalog whose totals the collector exports (nil: none).
func (c *collector) catalog() *catalog.Catalog {
	if c.cat == nil {
		return nil
	}
	return c.cat()
}
