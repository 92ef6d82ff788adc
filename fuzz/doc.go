// Package fuzz holds the tests that guard stated's restore path as a
// whole, above the per-package decoder fuzzers.
//
// Every test here builds its input the way a user would: real checkpoints
// and savepoints written through the daemon (heap, file and lsm backends,
// two subtasks) from a small model of every state kind, in a local
// directory store. Then:
//
//   - the fuzz targets (FuzzRestoreHeap, FuzzRestoreFile, FuzzRestoreLSM)
//     damage those files as the fuzz input says (bit flips, truncation,
//     zeroed ranges, missing or swapped files, a file of another
//     checkpoint under the right name, manifest fields edited, appended
//     bytes) and restore through the daemon (catalog.Open, daemon.Open
//     with a RestoreSpec), at the old parallelism and rescaled. The
//     outcome must be an error that wraps backend.ErrCorrupt (or
//     backend.ErrIncompatible) and names a damaged object, or state equal
//     to the model; never a panic or a hang.
//
//   - TestSingleBitFlips flips one bit of every byte of a checkpoint of
//     each backend and counts refusals and exact restores.
//
// Seed corpora are in testdata/fuzz/<Target>; scripts/fuzz.sh runs one
// target for a while.
//
// # Caveats
//
//   - A field edit frames the manifest validly again, as a writer with a
//     bug would: the manifest then describes another checkpoint, and any
//     error with a gRPC code other than Internal is accepted (a state of
//     another type is an incompatibility, handles that leave key groups
//     out are an invalid argument, as for a checkpoint of only some
//     subtasks).
//   - A deleted manifest cannot be told from a checkpoint that retention
//     removed: the restore answers not found, and latest is then the
//     checkpoint before.
//   - An input picks objects by their index in an order that ignores the
//     random parts of object names. The lsm fixture's files depend on
//     Pebble's flushes, which vary between processes, so an lsm input may
//     pick other objects in another process.
package fuzz
