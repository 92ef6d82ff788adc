// Package tablecheck checks a Pebble table (SST) in a tiered.Store in
// place: every block's checksum, read block by block with ranged reads,
// without a local copy.
//
// # Basics
//
// Checkpoint handles list the tables of lsm remote mode size-only
// (backend.FileRef.SizeOnly): stated never read their bytes, so it has no
// CRC of them, and the guard of their bytes is Pebble's per-block
// checksums. Two sides check them: backend/lsm before it restores from
// them (Remote.VerifyRestore) and the catalog's verify. The check lives
// here, below both, so that the catalog imports no backend
// implementation.
//
// # Caveats
//
// A table whose merger is not MergerName is refused as corrupt: this
// package reads stated's tables, not any Pebble table. A failure of the
// store (not of the bytes) is a failed read, not damage: it does not wrap
// backend.ErrCorrupt.
package tablecheck
