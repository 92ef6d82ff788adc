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
//     checkpoints are unaligned: their tasks wrote channel state, whose
//     objects the damage hits too. The outcome must be an error that
//     wraps backend.ErrCorrupt (or backend.ErrIncompatible) and names a
//     damaged object, or keyed, operator and channel state
//     (Instance.RestoredChannels) equal to the model; never a panic or a
//     hang. A rescale of forward or broadcast channel state must be
//     refused as backend.ErrIncompatible. When the damage hit channel
//     state alone, a corruption error must be followed by a successful
//     restore without that checkpoint's channel state
//     (RestoreSpec.WithoutChannelState), equal to the model.
//
//   - TestSingleBitFlips flips one bit of every byte of a checkpoint of
//     each backend and counts refusals and exact restores; a flip in a
//     channel state object must be refused, and catalog.Verify must see
//     it. The chanbind tests check that a channel segment's handle binds
//     its bytes and that a rescale's merge order ignores a wrong
//     subtask field.
//
//   - TestPinned decodes the committed files in testdata/pinned, one of
//     every frozen format at its current version (internal/frame, handle
//     versions 1 to 3, manifest, job file, snapfmt snapshot files of heap
//     and file, native and canonical savepoints, an lsm checkpoint
//     directory, unaligned checkpoints with channel state objects of
//     every backend, batch messages, a dstl segment of changelog changes,
//     a chanstate segment), checks their
//     content field by field against the model that generated them, and
//     restores every checkpoint and savepoint. A format change that is not
//     a new version fails it (a build writing the same version must also
//     write the same bytes); a new version must keep reading these files.
//     Regenerate them, only for a new version and keeping the old ones,
//     with
//
//     go test ./fuzz -run TestPinned -update
//
//     Object names carry random suffixes (as in production), so
//     regenerating changes names, never contents.
//
//   - TestPowerLoss simulates power losses. The checkpoint store
//     (tiered/localfs), the lsm working directories and, in the cache
//     scenarios, the tiered cache's copies live on a crashable
//     vfs.MemFS seen through a file system that counts every mutating
//     operation (create, write, sync, rename, remove, link, mkdir); the
//     cache's remote lives on one that keeps every acknowledged write.
//     A script runs cycles through the daemon (writes, channel state of
//     unaligned checkpoints, snapshots,
//     completions, retention, an aborted checkpoint, sweeps, a restore,
//     a rescale; with the changelog, materializations and truncations)
//     for heap, file and lsm, changelog off and on, once to count the
//     operations and again taking a crash clone before every stride-th
//     one (synced data only, or half or 90% of the unsynced blocks and
//     directory entries). Each clone is reopened as a restarted process
//     would: the catalog opens without problems, the newest retained
//     checkpoint is the last acknowledged completion or the one in
//     flight, every retained checkpoint verifies before and after a
//     sweep, the sweep leaves only objects a retained checkpoint
//     references (channel state objects included), every retained
//     checkpoint's channel state restores equal to the model, and a
//     restore of latest equals the model (plain heap
//     keeps its snapshots in the dead process's memory: the restore
//     must say so). -powerloss.points=N sets the points per scenario;
//     a number above the operation count checks every operation.
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
//     subtasks). Inline operator state and a handle's operator are never
//     edited: changed, they are other valid state that no check can tell
//     from the original. Neither is a channel's id (segments do not
//     repeat it). An edit reaches field other+256*(hi>>2), so that
//     inputs reach the leaves of manifests with channel state.
//   - A deleted manifest cannot be told from a checkpoint that retention
//     removed: the restore answers not found, and latest is then the
//     checkpoint before.
//   - TestPowerLoss keeps on the real disk what a restarted daemon never
//     reads: its instance directories (New clears them; lsm writes under
//     the same paths on the crashable FS) and the file backend's
//     snapshot spool files. Its sweeps after a crash run with a clock a
//     day ahead, so that the grace period keeps nothing back.
//   - An input picks objects by their index in an order that ignores the
//     random parts of object names. The lsm fixture's files depend on
//     Pebble's flushes, which vary between processes, so an lsm input may
//     pick other objects in another process.
package fuzz
