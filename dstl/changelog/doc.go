// Package changelog is changelog mode (Flink's generic incremental
// checkpoints, FLIP-158): a backend.Backend that wraps an inner backend
// (heap, file or lsm) and a daemon's shared dstl.Writer. Every mutation is
// applied to the inner backend and appended to the instance's log, so a
// checkpoint costs a log flush, not a snapshot of the whole state.
//
// # Basics
//
// A checkpoint's handle is the inner backend's last materialized snapshot
// (the base) plus the instance's log since it. Snapshot(N) records the log
// position under the writer lock; its asynchronous part persists the log up
// to there (dstl.Writer.Persist), writes a small manifest and returns the
// handle. Materialize takes a new base in the background; once a checkpoint
// that uses it completes (NotifyCheckpointComplete), the log before it is
// truncated (dstl.Writer.Truncate). The first checkpoint of an instance
// materializes as part of the checkpoint, so every changelog handle has a
// base: restores then always go through the inner backend's own restore,
// which already clips bases to the new key-group range.
//
// A checkpoint references a base only if it uploads it itself, is the
// first checkpoint to reference it (a Materialize result is claimed by one
// checkpoint), or a checkpoint that references it was confirmed. The
// refcount registry deletes the files of an aborted checkpoint that no
// confirmed checkpoint references, so an unconfirmed base shared by two
// pending checkpoints could vanish under the second; lsm follows the same
// rule for its SSTs. Until the first confirmation, every checkpoint
// therefore uploads its own base.
//
// Restore opens the inner backend from the bases and replays each handle's
// log in sequence order with the inner backend's clock set to each
// change's time, so TTL expiries come out as they did. The replay reads
// only the key groups the new range takes from that handle (dstl's reader
// filter), so a rescale replays each key group from exactly one old log.
//
// Savepoints (CanonicalSnapshot) go straight to the inner backend: they
// never take or consume a materialization (FLINK-40302).
//
// # Handle layout
//
// The handle is an ordinary backend.Handle of the inner backend's kind,
// with Log set (handle version 2):
//
//	Files = base files (Shared, under <job>/shared/changelog/...)
//	      + <job>/chk-<N>/<operator>-<subtask>/_changelog   (the manifest, private)
//	Log   = the segments the window reads (in the log store) and its bytes
//
// The manifest is an internal/frame envelope, magic "STCM", whose JSON
// payload (zstd-compressed from version 3, manifest.go) holds the base handle (a canonical handle, without its file
// list: the files are the handle's own, so a checksum changed in the
// handle is caught), the log sequence number the base covers and the
// dstl.Handle of the log window after it. A restore refuses a manifest
// whose window reads other segments than the handle's Log lists (the
// catalog keeps exactly those). A handle without Log (a canonical
// savepoint, a checkpoint of a plain backend) restores as a base with no
// log; the catalog counts Log.Segments with the shared files, and the
// daemon hands it what the Writer lets go of (TakeReleased).
//
// A native savepoint's snapshot (SavepointSnapshot) copies its window out
// of the shared segments into segments of its own among the handle's
// private files (<dir>/_changelog-<n>.log, at most about 32 MiB of
// records each), lists no segment in Log, and fills the manifest's
// "logFiles" field (version 2 on), which gives, per range of the window,
// the index of the file holding it; a restore reads those from the store
// the handle is restored from, so the savepoint can be moved anywhere.
// Every manifest is written as version 3, whose payload is compressed: a
// window's ranges repeat their segments' names, and a manifest that stays
// within backend.MaxInlineBytes travels in its handle (no object of its
// own) for about six times more checkpoints between materializations.
// Versions 1 and 2 (plain JSON) are still read.
//
// Materializations are the inner backend's own incremental snapshots when
// it implements backend.BaseSnapshotter (lsm: a base uploads only the SSTs
// that are not in the last confirmed one, which the wrapper confirms to it
// with NotifyCheckpointComplete(n), and a restore reads native files), and
// canonical snapshots otherwise (heap and file, whose snapshots are full
// anyway). lsm in remote mode hands its tables off instead of uploading
// them, and its bases must be held per checkpoint (backend.BaseHolder):
// every snapshot that references a base calls HoldBase in its synchronous
// part, and a base that no snapshot will use any more is reported with
// NotifyCheckpointAborted(n). Either way their private files go under
// <job>/shared/changelog/<operator>-<subtask>-<run>-<n>: an ordinary
// snapshot's private files live under chk-<id> and belong to that one
// checkpoint, while a base is referenced by every checkpoint until the next
// materialization, so all its files are shared.
//
// # Change encoding (version 1; frozen)
//
// Each change is one dstl record (its key group is the change's key group,
// dstl.NoKeyGroup for a state registration):
//
//	change := version u8 (=1) | op u8 | varint(time, unix ns) | body
//	bytes  := uvarint(len) | len bytes
//	key    := uvarint(key group) | bytes(key) | bytes(namespace)
//	body:
//	  Put 1, ListAppend 3:  bytes(state) key uvarint(n) bytes{n}   (Put: n = 1)
//	  Delete 2:             bytes(state) key
//	  MapPut 4:             bytes(state) key bytes(user key) bytes(value)
//	  MapRemove 5, MapGet 12: bytes(state) key bytes(user key)
//	  Aggregate 6:          bytes(state) key u8(number type) (varint int | float64 bits u64 LE)
//	  TimerAdd 7, TimerDelete 8: bytes(state) uvarint(kg) bytes(key) bytes(ns) varint(timestamp)
//	  Register 9:           bytes(name) u8 kind | varint(ttl ns) | u8 ttl update | u8 aggregate | u8 number
//	  Get 10, ListGet 11, AggGet 14: bytes(state) key
//	  MapIterate 13:        bytes(state) key u8(has after) [bytes(after)] varint(limit)
//
// The read ops are logged only for states whose TTL a read refreshes
// (TTLOnReadAndWrite) and only when the read returned something; PollTimers
// is logged as one TimerDelete per polled timer, so a rescaled replay
// removes exactly the timers of its own key groups. Nil and empty byte
// strings are not told apart (the backends do not either).
//
// # Caveats
//
//   - Writes are serialized by one writer lock (apply, then append), since
//     the log order must be the order the inner backend applied them in. A
//     group (backend.Grouper) encodes each write once as it is made, into a
//     buffer kept between groups, and appends the group's changes with one
//     dstl.Writer.AppendBatch once the inner backend committed them.
//   - A change the log refuses (the writer closed, a change over
//     dstl.MaxChangeSize) leaves the inner backend ahead of the log; the
//     instance drops its base, and its next checkpoint materializes again.
//   - Operator state is not logged: it travels inline in the handle
//     (daemon/opstate.go).
package changelog
