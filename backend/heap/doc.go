// Package heap is the heap state backend: working state in memory (a
// copy-on-write B-tree, see backend/internal/memkv) and snapshots kept in
// the daemon's memory (a memstore the daemon owns and shares between its
// instances). It is the backend for development and tests, and the
// reference the other backends are compared with.
//
// # Basics
//
// Snapshots have the same format as the file backend's (see
// backend/internal/snapfmt) and the same layout,
// "<job>/chk-<N>/<operator>-<subtask>/state-<random>", but inside
// Options.Snapshots. A snapshot larger than Options.MaxSnapshotSize is
// declined (an error wrapping backend.ErrDeclined from Run) so that one job
// cannot fill the daemon's memory.
//
// # Caveats
//
// Heap snapshots do not survive a daemon restart: a restore from a heap
// handle whose snapshot is gone fails with an error wrapping
// backend.ErrNotFound that says so; it never restores wrong or partial
// data. Deleting snapshots of checkpoints that are no longer retained is
// the daemon's job (the same paths as in checkpoint storage).
package heap
