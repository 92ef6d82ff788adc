package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/metered"
)

// changelogCollector exports the changelog's metrics: the log writer's
// (dstl.Metrics), the daemon's materializations and replays, and, when the
// log has a store of its own, the calls that reach it. Every name starts
// with "stated_changelog_".
type changelogCollector struct {
	w *dstl.Writer
	m *daemon.Metrics
	// store counts the calls of a separate log store (nil: the log is in
	// the checkpoint store, counted by stated_store_*).
	store *metered.Store

	flush, appendedBytes, appendedRecords, segments, segmentBytes *prometheus.Desc
	inFlight, inFlightMax, bpTime, bpWaits                        *prometheus.Desc
	attempts, speculative, retries, uploadFailures, loserDeletes  *prometheus.Desc
	truncSegments, truncBytes                                     *prometheus.Desc
	mats, matDur, matFailures, replay                             *prometheus.Desc
	storeCalls, storeErrors, storeBytes                           *prometheus.Desc
}

func newChangelogCollector(w *dstl.Writer, m *daemon.Metrics, store *metered.Store) *changelogCollector {
	d := descs("stated_changelog_")
	return &changelogCollector{w: w, m: m, store: store,
		flush:           d("flush_duration_seconds", "From a segment's cut to its durability in the log store."),
		appendedBytes:   d("appended_bytes_total", "Bytes of changes appended to the log."),
		appendedRecords: d("appended_records_total", "Changes appended to the log."),
		segments:        d("segments_written_total", "Segments made durable."),
		segmentBytes:    d("segment_bytes_total", "Bytes of the segments made durable."),
		inFlight:        d("bytes_in_flight", "Changes held in memory now, buffered or uploading (raw bytes)."),
		inFlightMax:     d("bytes_in_flight_max", "The most changes held in memory at once since the start."),
		bpTime:          d("backpressure_seconds_total", "Time writes waited for room under --changelog-max-in-flight."),
		bpWaits:         d("backpressure_waits_total", "Writes that waited for room under --changelog-max-in-flight."),
		attempts:        d("upload_attempts_total", "Segment uploads started, retries and speculative ones included."),
		speculative:     d("speculative_uploads_total", "Uploads started because an attempt was slow."),
		retries:         d("upload_retries_total", "Uploads started after a failed attempt."),
		uploadFailures:  d("upload_failures_total", "Segments whose every attempt failed (their instances must materialize again)."),
		loserDeletes:    d("loser_deletes_total", "Objects of losing upload attempts deleted."),
		truncSegments:   d("truncated_segments_total", "Segments no instance's log references any more (deleted once no retained checkpoint does either)."),
		truncBytes:      d("truncated_bytes_total", "Bytes of the truncated segments."),
		mats:            d("materializations_total", "Background materializations that completed."),
		matDur:          d("materialization_duration_seconds", "Duration of the background materializations that completed."),
		matFailures:     d("materialization_failures_total", "Background materializations that failed or were abandoned."),
		replay:          d("replay_duration_seconds", "Time restores in changelog mode spent replaying the log after the base."),
		storeCalls:      d("store_calls_total", "Calls that reached the changelog's own store (--changelog-store), by operation.", "op"),
		storeErrors:     d("store_call_errors_total", "Calls to the changelog's own store that failed, by operation.", "op"),
		storeBytes:      d("store_bytes_total", "Bytes sent to (up) and read from (down) the changelog's own store.", "direction"),
	}
}

// Describe implements prometheus.Collector.
func (c *changelogCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

// Collect implements prometheus.Collector.
func (c *changelogCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	wm := c.w.Metrics()
	ch <- prometheus.MustNewConstHistogram(c.flush, wm.FlushLatency.Count, wm.FlushLatency.Sum.Seconds(), cumulative(wm.FlushLatency))
	counter(c.appendedBytes, wm.BytesAppended)
	counter(c.appendedRecords, wm.RecordsAppended)
	counter(c.segments, wm.SegmentsWritten)
	counter(c.segmentBytes, wm.SegmentBytesWritten)
	gauge(c.inFlight, float64(wm.BytesInFlight))
	gauge(c.inFlightMax, float64(wm.MaxBytesInFlightSeen))
	ch <- prometheus.MustNewConstMetric(c.bpTime, prometheus.CounterValue, wm.BackPressureTime.Seconds())
	counter(c.bpWaits, wm.BackPressureWaits)
	counter(c.attempts, wm.UploadAttempts)
	counter(c.speculative, wm.SpeculativeUploads)
	counter(c.retries, wm.UploadRetries)
	counter(c.uploadFailures, wm.UploadFailures)
	counter(c.loserDeletes, wm.LoserDeletes)
	counter(c.truncSegments, wm.TruncatedSegments)
	counter(c.truncBytes, wm.TruncatedBytes)
	counter(c.mats, c.m.Materializations.Load())
	histogram(ch, c.matDur, c.m.MaterializeDuration)
	counter(c.matFailures, c.m.MaterializeFailures.Load())
	histogram(ch, c.replay, c.m.ReplayDuration)
	if c.store != nil {
		st := c.store.Counts()
		for op := range tiered.NumOps {
			counter(c.storeCalls, st.Calls[op], op.String())
			counter(c.storeErrors, st.Errors[op], op.String())
		}
		counter(c.storeBytes, st.BytesUp, "up")
		counter(c.storeBytes, st.BytesDown, "down")
	}
}

// cumulative turns dstl's per-bucket counts into Prometheus's cumulative
// buckets, keyed by upper bound in seconds (the overflow bucket is the
// histogram's count).
func cumulative(h dstl.Histogram) map[float64]uint64 {
	out := make(map[float64]uint64, len(h.Bounds))
	var n uint64
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			n += h.Counts[i]
		}
		out[b.Seconds()] = n
	}
	return out
}
