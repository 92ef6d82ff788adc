// Package hist is the bounded latency histogram of "stated bench": log-linear
// buckets in the manner of HdrHistogram, written here rather than imported so
// that the benchmark has no dependency whose precision it cannot state.
//
// Values are non-negative int64 (nanoseconds in practice). Values below 128
// have a bucket each; above, every power of two is split into 64 buckets, so a
// reported value is within 1/128 of any value its bucket holds (the bucket's
// midpoint is reported). A Histogram is a fixed array of 3,712 counters
// (29 KiB) whatever it records: memory does not grow with the run.
//
// A Histogram is not safe for concurrent use; record into one per goroutine
// and Merge them.
package hist
