// Package catalog keeps the completed checkpoints and savepoints of every
// job in one checkpoint root (a tiered.Store): completion, retention with
// subsumption, abort, orphan GC, claim and no-claim restores, native and
// canonical savepoints, and verification. Its two promises: no retained
// checkpoint or savepoint ever points at a deleted file, and no file is
// kept forever.
//
// # Layout
//
//	<job>/shared/<unique>          files several checkpoints may reference
//	<job>/chk-<N>/<op>-<sub>/...   files of checkpoint N alone
//	<job>/chk-<N>/_metadata        manifest of completed checkpoint N
//	<job>/_catalog                 job file: history, pins, adoptions
//	savepoints/<id>/_metadata      savepoint manifest
//	savepoints/<id>/...            savepoint files (paths relative to the dir)
//
// A manifest exists exactly when its checkpoint or savepoint is retained.
// Manifests and job files are framed with internal/frame (magic "STMF" and
// "STJC", version 1, CRC32C) around a JSON payload; readers accept versions
// 1..ManifestVersion and reject unknown fields, so a newer writer's file is
// refused loudly rather than half-read. The job name "savepoints" is
// reserved.
//
// # Checkpoints
//
//	BeginCheckpoint(job, N)            N is in flight: GC never touches chk-N/
//	AddTaskHandle(job, N, h)           one per task; h's files are protected
//	Complete(ctx, job, N, more...)     manifest + registration + retention
//	Abort(ctx, job, N, why, reason)    private dir deleted now, shared later
//	Release(ctx, job, N)               Abort without a history record
//
// Complete checks every file not referenced yet (it exists, with its size),
// writes the manifest with PutIfAbsent (a retried Complete is idempotent),
// and only then registers the files in the refcount registry: handles are
// registered at completion, never at upload. Retention keeps the last
// Options.Retain checkpoints a job owns (pinned ones not counted);
// discarding one deletes its manifest first, so a crash in the middle
// leaves orphans for the sweep and never a retained checkpoint with missing
// files. Abort deletes the private directory at once but leaves the shared
// files the checkpoint uploaded to the sweep (FLINK-24611): they go once
// they are older than the grace period, unless a completed checkpoint
// references them. The history (List) is kept in the job file, bounded by
// Options.MaxHistory, so "stated checkpoints" prints it after a restart.
//
// # The machine and its effects
//
// The catalog's state (retained checkpoints and savepoints, in-flight
// checkpoints with their handles, history, bases, the registry, the
// deletion guard) and the decisions on it live in one type, machine
// (machine.go), which does no I/O, reads no clock and logs nothing.
// Catalog runs the effects around it: it writes manifests and job files,
// lists and deletes, and feeds the outcomes back. The checkpoint lifecycle
// goes through the machine as commands (lifecycle.go): begin, add-handle,
// start-complete, then completed (the manifest as written) or
// complete-failed, abort, start-discard and discarded; so do savepoints
// (begin, completed, failed, deleted, and adopted: one another process
// wrote, adopt.go), restores (the pick with its
// adoption or pin, its undo, then the new base) and history notes. A
// command carries everything its decision depends on, the time included,
// so the same commands in the same order give any two machines the same
// state and the same decisions (TestMachineReplaysItsCommands): what a
// log that replicates the catalog needs. Only Open's rebuild from the
// store fills the machine directly, and the names being deleted right now
// are the deleting node's own marks, not the machine's decisions. A
// machine image (snapshot.go: magic "STMS", version 1, CRC32C around
// JSON) holds the whole state, for a log's snapshots; a replica restarted
// from an image and the commands after it equals the original.
//
// A replicated catalog (Options.Replica and Options.Propose, replica.go)
// is the same Catalog over a Replica that a log keeps on every node: each
// command goes through the log and is applied to every replica, and a new
// leader opens its catalog from its own replica without listing the
// store. The first leader lists it and proposes what it read as one load
// command; each later one proposes take-over, which ends the completions
// and savepoints its predecessor left unconfirmed.
//
// # Ownership and restore modes
//
// Every retained checkpoint has exactly one owner job, which alone deletes
// it: its own job, or the job that restored it in claim mode (an adoption,
// recorded in the adopter's job file). A no-claim restore never changes
// the checkpoint; if the restoring job owns it, it is pinned so that the
// job's retention never deletes it (only DeleteCheckpoint does). After a
// no-claim restore, Complete refuses any checkpoint of the job that
// references a file of the restored one, which enforces "the first
// checkpoint after a no-claim restore is full". Savepoints are never owned
// by a job.
//
// A job's base is the checkpoint its tasks build on: its newest completion
// (an older one completing late does not move it, as the backends do not
// move back), or what it last restored in claim mode. When another owner (or
// DeleteCheckpoint) drops a checkpoint that is some job's base, that job
// holds its shared files in the registry until its base moves on (its next
// completion or restore), so its next incremental checkpoint never points
// at a deleted file; see base.go. Holds live in the daemon's memory: a
// "stated gc" run by another process against a root a daemon is using
// sees only manifests and the grace period.
//
// # Expiry
//
// The catalog never ends an in-flight checkpoint on its own. Expiry has one
// owner, the daemon: its per-checkpoint timer (daemon.Config.CheckpointTimeout)
// stops the uploads, calls Abort with StatusExpired, and tells the backends.
// The catalog takes no callback into the daemon, so the two are built in
// order (catalog, then daemon) without a cycle. A checkpoint no one ends
// stays in flight, and its files stay protected, until the process exits.
//
// # Garbage collection
//
// GC (and the background sweep, Start) deletes an object of the layout
// when no retained checkpoint or savepoint references it, no pending handle
// lists it, it is not under an in-flight checkpoint or savepoint, and it
// and every object of its checkpoint directory are older than
// Options.GCGrace. A GC in another process (stated gc) cannot see the
// daemon's in-flight checkpoints: it relies on the grace period, which must
// exceed the daemon's checkpoint timeout, and keeps everything a manifest it did not
// know references. Deletes are batched (Options.DeleteBatch names per
// DeleteBatch call), bounded in parallelism, retried, and idempotent; what
// still fails is caught by the next sweep (FLINK-38909). A registration,
// Abort or GC marks the names it deletes under the catalog lock, so a
// concurrently completing checkpoint either fails or protects them first.
//
// Remote-mode lsm objects ("<job>/shared/lsm/": SSTs Pebble created in the
// store, their ref markers, instance leases) are never deleted outright:
// releasing one removes the markers of checkpoints neither retained nor in
// flight and deletes the SST only when no marker is left, and the sweep
// also removes, past the grace period, markers of instances whose lease
// went stale (remote.go, docs/lsm-remote.md).
//
// # Savepoints
//
// TriggerSavepoint writes "savepoints/<id>/": native copies every file of
// the given handles (checking each file's size and CRC32C while copying)
// to "data/<original name>" and rewrites the handles' paths; canonical has
// each backend write its backend-neutral snapshot there
// (backend.CanonicalSnapshotter). Both are self-contained and relocatable:
// restore with RestoreSource(SavepointID) or, from anywhere,
// LoadSavepoint(store rooted at the directory). Taking one never changes
// what later incremental checkpoints reuse.
//
// # Damage
//
// Open and the sweep never fail on a damaged manifest or job file: they
// report it (Problems), and nothing under its directory is ever deleted or
// overwritten. A restore never passes over damage silently: one of a
// checkpoint or savepoint whose manifest is damaged, or of a job whose job
// file is (a pin or adoption may be lost), fails with an error wrapping
// ErrCorrupt that names the object and what is wrong; so does one of the
// latest checkpoint when a newer one is damaged, naming both, unless
// RestoreRequest.AllowFallback (Restore.Skipped then lists what was
// skipped). List marks damaged checkpoints (Record.Damaged); Damaged lists
// them. A manifest that is missing altogether cannot be told from one
// retention deleted.
//
// # Caveats
//
// Heap snapshots live in the heap backend's in-memory store: the catalog
// records their handles but neither checks, counts nor copies (unless given
// the heap store as Source) their files. Given that store as
// Options.HeapStore it deletes them: with an Abort, with a discard, and in
// the sweep once no in-flight or retained checkpoint holds them (heap.go);
// without it nothing does, and daemon memory grows with every checkpoint. One Catalog owns a
// checkpoint root at a time: a daemon's alone, or a cluster leader's over
// its replica. Open only reads; retention beyond Retain after a crash is applied
// by the next Complete.
package catalog
