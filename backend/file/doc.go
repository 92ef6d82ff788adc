// Package file is the file state backend: working state in memory (a
// copy-on-write B-tree, see backend/internal/memkv) and full snapshots
// written to checkpoint storage, one file per snapshot, partitioned by key
// group with per-key-group offsets in the handle so a restore into a
// sub-range (rescale) reads only its own key groups
// (backend/internal/snapfmt describes the file format).
//
// # Basics
//
// Snapshot(N) clones the tree under a short exclusive lock and returns;
// Run writes "<job>/chk-<N>/<operator>-<subtask>/state-<random>" (private
// to checkpoint N) while the task keeps writing. Restore reads heap, file
// and canonical handles (all the same format); handles of the lsm backend
// are refused: restore from a canonical savepoint instead.
//
// # Caveats
//
// The whole working state must fit in memory, and every snapshot writes it
// all (no incremental snapshots): for large state use the lsm backend.
package file
