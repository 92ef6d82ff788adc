// Package daemon is the core of "stated serve", independent of any wire
// protocol: it holds the open backend instances of every task on the host,
// opens backends by kind (Opener), runs the checkpoint flow (synchronous
// snapshot part, asynchronous upload owned by the daemon, complete, abort,
// expiry), resolves restore sources from the checkpoint catalog, and keeps
// the metrics as plain structs that cmd/stated exports to Prometheus.
//
// # Basics
//
// An Instance belongs to one task (job, operator, subtask) and owns a
// key-group range. Instances are named by random 16-byte ids, and every
// lookup also names the job, so one job can never reach another's instance
// by a stale or guessed id. Working state of lsm instances lives under
// <data-dir>/instances, which New clears: after a crash the daemon restores
// tasks from checkpoints, never from half-written working state.
//
// A checkpoint N of a job is the set of Snapshot(N) calls of its tasks. Each
// snapshot's asynchronous part runs in a goroutine the daemon owns, under the
// checkpoint's timeout; CompleteCheckpoint waits for them and records the
// checkpoint in the Catalog, AbortCheckpoint cancels them. A checkpoint that
// is neither completed nor aborted within the timeout is aborted as expired.
//
// # Caveats
//
// Heap snapshots live in the daemon's memory. A restore from a heap
// checkpoint that this process did not take (because the daemon restarted)
// fails with ErrSnapshotGone; it never restores partial or empty state.
package daemon
