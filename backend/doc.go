// Package backend is stated's state model: key groups (Flink-compatible),
// state descriptors, the Backend interface every state backend implements,
// and the task state handle a snapshot produces.
//
// # Basics
//
// A backend instance belongs to one task (job, operator, subtask) and owns a
// key-group range out of maxParallelism key groups. Every entry is addressed
// by (state, key group, key, namespace). States are registered by name with a
// kind: value, list, map, aggregate or timers, and optionally a TTL.
//
// Key groups follow Flink exactly (KeyGroupForHash, KeyGroupRangeForOperator,
// OperatorForKeyGroup), so an engine routes records and state the same way.
//
// Implementations live below: heap (snapshots in daemon memory), file (full
// key-group-partitioned snapshots) and lsm (Pebble, incremental snapshots).
// backendtest is the conformance suite all of them pass.
//
// Optional extensions, which every kind here has: Grouper and ReadGrouper
// (runs of writes and reads under one lock), CanonicalSnapshotter
// (backend-neutral snapshots), and for an engine that writes its own
// snapshots (view.go) Viewer (frozen read views scanned in key-group
// order, without writing files), KeyScanner (the keys of one state) and
// Loader (bulk load for restores).
//
// # Caveats
//
// Handles are versioned (HandleFormatVersion) and framed with a CRC32C
// (internal/frame); DecodeHandle validates every field, including that file
// paths cannot escape the storage root.
package backend
