package dstl

import "time"

// FlushLatencyBounds are the upper bounds of the flush-latency histogram
// buckets (time from a segment's cut to its durability); a last bucket
// counts everything above the largest bound.
var FlushLatencyBounds = []time.Duration{
	500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
}

// Histogram is a cumulative-free bucket histogram: Counts[i] counts the
// observations in (Bounds[i-1], Bounds[i]]; Counts[len(Bounds)] those above
// the last bound.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	Count  uint64
	Sum    time.Duration
}

func newHistogram(bounds []time.Duration) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

func (h *Histogram) observe(d time.Duration) {
	i := 0
	for i < len(h.Bounds) && d > h.Bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += d
}

func (h Histogram) clone() Histogram {
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}

// Metrics is what a Writer counted since it started; the daemon exports it
// (stated_changelog_*). Metrics returns a copy.
type Metrics struct {
	// FlushLatency: time from a segment's cut to its durability.
	FlushLatency Histogram
	// BytesAppended and RecordsAppended count accepted changes (bytes of
	// the changes themselves).
	BytesAppended, RecordsAppended uint64
	// SegmentsWritten and SegmentBytesWritten count durable segments.
	SegmentsWritten, SegmentBytesWritten uint64
	// UploadAttempts counts Put calls, SpeculativeUploads those started
	// because an attempt was slower than Options.UploadTimeout,
	// UploadRetries those started after a failure, UploadFailures segments
	// that failed for good, and LoserDeletes the objects of losing attempts
	// deleted afterwards (a failed delete leaves the object to the orphan
	// sweep).
	UploadAttempts, SpeculativeUploads, UploadRetries, UploadFailures, LoserDeletes uint64
	// BytesInFlight is the raw size of the changes held in memory now
	// (buffered or uploading); MaxBytesInFlightSeen its high-water mark.
	BytesInFlight, MaxBytesInFlightSeen int64
	// BackPressureTime is the total time Appends waited for room;
	// BackPressureWaits how many Appends waited.
	BackPressureTime  time.Duration
	BackPressureWaits uint64
	// TruncatedSegments counts segments no writer references any more, and
	// TruncatedBytes their sizes.
	TruncatedSegments, TruncatedBytes uint64
}
