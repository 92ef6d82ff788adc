// Package workload defines the named workloads of "stated bench": which
// states an instance registers, what the load phase writes for each key, and
// the mix of operations the run phase draws, with the key distributions
// (uniform, zipfian, latest) that pick the key of each operation.
//
// A workload knows nothing of where it runs: a Gen fills Op values, and the
// bench package applies them through the Go client of a daemon or to raw
// Pebble. Keys are 8-byte big-endian ids, values are filled with a
// deterministic pattern, and every Gen is seeded, so two runs with the same
// parameters issue the same operations.
//
// # Workloads
//
// Generic ones: value-get, value-put, value-update (read-modify-write),
// value-mixed (gets at --read-ratio, else puts), list-append, list-get,
// map-put, map-get, map-iterate, aggregate (adds, gets at --read-ratio),
// timers (registrations, a poll every 100th operation).
//
// Apache Flink's state benchmark shapes (flink-benchmarks, StateBenchmark
// constants): 8-byte values, lists of 100 elements, maps of 10 entries:
// flink-value-get, flink-value-update, flink-list-add, flink-list-get,
// flink-map-get, flink-map-update, flink-map-iterate.
//
// YCSB core workloads over value state, with YCSB's proportions and default
// distributions: ycsb-a (50% read, 50% update; zipfian), ycsb-b (95/5),
// ycsb-c (read only), ycsb-d (95% read, 5% insert; latest), ycsb-f (50%
// read, 50% read-modify-write). ycsb-e (95% scan, 5% insert) needs ordered
// scans, which keyed value state does not have: it runs over a map state in
// which every record is an entry (user key = record id) under one of 64
// keys, and a scan iterates 1..100 entries of one of them from a record on.
package workload
