// Package lsm is the Pebble backend: the working state of a task lives in a
// Pebble LSM (github.com/cockroachdb/pebble/v2) on local disk, and
// checkpoints are incremental: only SSTs that the last confirmed checkpoint
// did not already upload are written; the rest are referenced.
//
// # Basics
//
// Keys and values use kvstate's frozen layout (key group first), so a
// key-group range is one contiguous key span. List appends are Pebble merge
// operands; the merger (MergerName, frozen: Pebble records it in the OPTIONS
// file and refuses to open a store written with another) concatenates them,
// which is kvstate.Engine.Merge's contract.
//
// Pebble runs with its WAL disabled: durability comes from checkpoints, as
// in Flink. A local directory is therefore never reopened after a crash;
// Open clears the subdirectories it owns and starts empty or from handles.
//
// Local layout under Options.Dir:
//
//	db/               the live Pebble store
//	chk/<N>-<seq>/    a frozen checkpoint (hard links), removed by Run/Release
//	restore/<i>/      temporary copies of extra restore handles
//
// # Checkpoints
//
// Snapshot's synchronous part (no operation runs meanwhile) flushes the
// memtable and takes a Pebble checkpoint: hard links that freeze the set of
// SSTs. Run uploads:
//
//	<job>/shared/<32 hex random>-<local SST name>   SSTs and blob files, shared
//	<job>/chk-<N>/<operator>-<subtask>/<name>       MANIFEST, OPTIONS, markers
//
// Shared object names are unique by construction (a random 128-bit id), never
// derived from the local name alone (FLINK-29095, FLINK-29913). An SST is
// referenced instead of uploaded only if the *confirmed* base holds it: the
// file set of the newest checkpoint that NotifyCheckpointComplete confirmed
// (or of the handle restored from, in claim mode). Uploads of a checkpoint
// that is not confirmed are never referenced by later checkpoints
// (FLINK-25395), and NotifyCheckpointAborted only forgets them: deleting
// shared files is the registry's job (FLINK-24611). Canonical snapshots
// (savepoints) never touch the base (FLINK-23949).
//
// # Restore
//
// One lsm handle that covers the instance's range: its files are downloaded
// (size and CRC32C of each checked) into db/ and Pebble opens them. Several
// handles, or a handle wider than the range: the handle with the largest
// overlap is the base; the spans outside the range are excised (Pebble
// Excise: files wholly outside are dropped at once, and since keys are
// sorted by key group only the at most two files per level that straddle a
// boundary keep hidden bytes until compaction rewrites them, FLINK-34050);
// the other handles' overlapping key groups are copied in with batch
// writes. Heap and file handles (canonical snapshots) are read with snapfmt
// and inserted in batches. In claim mode the base handle's SSTs stay in the
// confirmed base, so the first checkpoint after a restore uploads only new
// SSTs (FLINK-37367); with Options.NoClaim it uploads everything under new
// names and references nothing restored.
//
// # Caveats
//
// The number of files in a handle is bounded by the LSM shape, not by the
// number of checkpoints (FLINK-26050): L0 is compacted once it holds
// L0CompactionThreshold (4) files, and the levels below hold about
// FullSize/TargetFileSize files (the same target on every level), plus
// three or four private files. A 10 GiB state with the default 16 MiB
// target has about 650 files, each about 200 bytes in the handle.
package lsm
