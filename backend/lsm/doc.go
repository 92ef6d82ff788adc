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
//	restore/          temporary stores of extra restore handles, SSTs to
//	                  ingest; removed when the restore ends
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
// Every SST a checkpoint lists carries its key-group bounds
// (backend.FileRef.KeyGroupBounds: the key groups of its smallest and
// largest keys, range deletions included), read from the file at upload.
//
// # Restore
//
// One lsm handle that covers the instance's range: its files are downloaded
// (size and CRC32C of each checked) into db/ and Pebble opens them. Empty
// WAL files (the WAL is off) are checked but not written: replaying one
// makes Pebble's Open flush and then wait for the compaction the restored
// LSM is due, hundreds of ms for a checkpoint taken with a full L0; without
// it that compaction runs in the background.
//
// Several handles, or a handle wider than the range (a rescale): each key
// group comes from the first handle listed that holds it, and the lsm
// handle that gives the most key groups is the base (rescale.Assign, the
// rule every backend follows). Of every handle only the private files
// (MANIFEST, OPTIONS) and the SSTs whose bounds meet the key groups it
// gives are downloaded; handles without bounds (written before they
// existed) are downloaded whole.
//
// The new subtasks of a rescaled job restore from the same old handles,
// and a file straddling a new boundary (most L0 files, the boundary files
// of every level) is needed by two of them. With a DownloadCache shared by
// the host's instances (Options.DownloadCache; the daemon keeps one) each
// such file is downloaded once: the cache holds one verified copy, bounded
// in bytes, and each restore gets a hard link to it (SSTs and blob files,
// never rewritten) or a copy (MANIFEST, OPTIONS). Every use checks the
// cached copy's size and CRC32C again. Downloads are not fsynced: a
// restored store never has to survive a crash (the WAL is off; the
// instance's directory and the cache are cleared when opened again).
//
//   - The base is opened with Pebble's check that every file of the
//     MANIFEST is present turned off (and no compactions, no table
//     statistics: nothing reads a table), and the key spans of every key
//     group it does not give are excised: at most two Excise calls, below
//     and above. Excise drops a table wholly inside the span without
//     reading it (so skipped files are never missed) and turns the at most
//     one table per level that straddles each boundary into a virtual one;
//     its cost does not depend on the amount removed (FLINK-21321), and
//     that first session does not fsync (nosync.go), so it is metadata
//     only.
//   - Every other lsm handle is downloaded into restore/<i>, opened the
//     same way and excised to the key groups it gives. Its files are then
//     grafted into the base without rewriting a byte: hard-linked under new
//     file numbers, and added at their levels, with their bounds and
//     sequence numbers, by one version edit appended to the base's
//     MANIFEST while it is closed (graft.go says why that is sound).
//   - The base is opened again, normally: Pebble checks that every table
//     left is present with the size the MANIFEST says and that the levels
//     are ordered, so key-group bounds that lied, or a graft that does not
//     fit, fail the restore with backend.ErrCorrupt instead of losing data.
//
// Why not the alternatives (Pebble v2.1.7): Checkpoint(WithRestrictToSpans)
// needs an open store, which needs every file; ingesting another store's
// SSTs is refused (ingested files must have sequence number zero and hold
// one version per key, and live ones do neither), so the other handles'
// key groups would have to be rewritten: 100-150 MB/s on the 2-core
// reference machine, which made a 1 GiB rescale 2.3-2.6x a plain restore.
// Grafting takes a few milliseconds. A store whose tables hold range keys
// or blob references (kvstate writes neither) is still rewritten into SSTs
// and ingested, and so is every other store when Options.NoGraft is set or
// when the self-check that runs before the first graft of the process
// (graftcheck.go) finds that the Pebble linked in does not read graft's
// version edit back as written: graft depends on Pebble's MANIFEST format,
// which a Pebble upgrade may change (TestGraftMatchesPebble guards it). Heap and file handles (canonical snapshots) are read with
// snapfmt and inserted in batches.
//
// Clipped keys never come back: readers and compactions see only the
// virtual bounds. Their bytes stay in the backing files of the straddling
// tables until compaction rewrites them (FLINK-34050: at most one file per
// level and boundary on local disk). A restore that keeps the history
// (claim mode) references those files, which the old checkpoint already
// holds; one that does not (Options.NoClaim, or another store) uploads
// every file again, so it first rewrites each virtual table whose backing
// file holds keys outside the range (IngestAndExcise of its span): the
// first checkpoint then uploads no clipped key.
//
// In claim mode every restored SST that was not rewritten (the base's and
// the grafted ones, under their new local names) stays in the confirmed
// base, so the first checkpoint after a restore, rescaled or not, uploads
// only new SSTs (FLINK-37367); with Options.NoClaim it uploads everything
// under new names and references nothing restored. RestoreStats reports
// what was downloaded and skipped and the time of each step.
//
// # Remote mode
//
// Local and remote mode are the two implementations of one interface
// (mode, in lsm.go: localMode in local.go, remoteMode in remote.go); the
// rest of the backend asks its mode and never which one it has.
//
// With Options.Remote, Pebble creates every SST in the object store under
// "<job>/shared/lsm/" (package remotestore), the local disk keeps a bounded
// cache of remote blocks, and Close drops the instance's references there.
// A checkpoint uploads no SST: it marks every table of the version with a
// marker of the checkpoint attempt (the catalog then owns that reference)
// and lists them in a version-4 handle (FileRef.Table, size only). A
// restore ingests the tables as external files bounded to the instance's
// key groups, reading nothing of the data up front; a claimed restore
// holds them with its own marker, a no-claim one rewrites them at its
// first checkpoint. Objects go only when no marker of anyone is left
// (refcount/markers, docs/lsm-remote.md). A changelog base
// (BaseSnapshot) is a hand-off held by the instance's base markers; each
// checkpoint that references it adds its own markers (HoldBase), and the
// instance lets go of a base once a newer one is confirmed
// (remotebase.go). tablecheck.Validate checks a remote table's block checksums
// in place, for verify.
//
// What keeps a restore's time to its first get from growing with the
// state (remoterestore.go): its level-0 tables get the union of their
// bounds, so Pebble's ingest decides their overlap without reading the
// tables below (sameL0Bounds); the tails of the level-0 tables, which the
// first get consults, are fetched at once (prefetchL0); compactions wait
// until the restore's background work is done, at most 10 s
// (compactionGate, gate.go); and every level carries bloom filters, so a
// table that cannot hold a key costs one cached block. In remote mode the
// memtable is 64 MiB (DefaultRemoteMemTableSize): every flush is an
// object and a level-0 table a restore consults. A new store, local or
// remote, is created at the newest format without a LOCK file
// (openFresh, fresh.go), its metadata files (MANIFEST, OPTIONS, markers,
// the empty logs) live in memory, and a new instance makes its
// directories on disk when it first writes a table (metaMemFS,
// metafs.go): an idle instance creates no file and holds no descriptor.
//
// Memory: the daemon's instances share one block cache (Options.Cache).
// Pebble reserves each memtable's size in it, so each open instance adds
// room for two memtables to the cache and takes it back at close
// (cacheHold, cachehold.go): writing instances never squeeze the blocks
// out, and the bound stays the cache plus two memtables per instance.
//
// # Caveats
//
// The number of files in a handle is bounded by the LSM shape, not by the
// number of checkpoints (FLINK-26050): L0 is compacted once it holds four
// sublevels (l0CompactionThreshold), and the levels below hold about
// FullSize/TargetFileSize files (the same target on every level), plus
// three or four private files. A 10 GiB state with the default 16 MiB
// target has about 650 files, each about 200 bytes in the handle.
package lsm
