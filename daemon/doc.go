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
// Operator (non-keyed) state, named lists of an instance, is kept by the
// daemon for every backend kind (opstate.go): each snapshot's handle
// carries the lists as they were at its synchronous part, and Open restores
// them. Open also rescales (restore.go): when the restore source was
// written at another parallelism, it plans the operator with package
// rescale, restores the handles that overlap the new range (largest
// overlap first, as the base) and redistributes the operator state.
//
// A checkpoint N of a job is the set of Snapshot(N) calls of its tasks. Each
// snapshot's asynchronous part runs in a goroutine the daemon owns, under the
// checkpoint's timeout; CompleteCheckpoint waits for them and records the
// checkpoint in the Catalog, AbortCheckpoint cancels them. A checkpoint that
// is neither completed nor aborted within the timeout is aborted as expired.
// That timer (Config.CheckpointTimeout) is the only expiry: the catalog never
// ends a checkpoint on its own, and takes no callback into the daemon.
//
// An lsm instance opened with OpenParams.External is externally owned
// (external.go): its engine owns its checkpoint files, written under
// Config.ExternalDir. None of the above applies to its snapshots: no
// checkpoint of the job, no catalog, no expiry; the engine confirms and
// forgets them per instance, and restores it from handles it passes.
//
// # Caveats
//
// Heap snapshots live in the daemon's memory. A restore from a heap
// checkpoint that this process did not take (because the daemon restarted)
// fails with ErrSnapshotGone; it never restores partial or empty state.
package daemon
