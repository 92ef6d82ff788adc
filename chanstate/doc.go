// Package chanstate stores the channel state of unaligned checkpoints: the
// in-flight buffers of a task's input channels and output subpartitions
// that a barrier overtook, which become part of the checkpoint.
//
// # Basics
//
// One Writer per (job, checkpoint) per daemon takes the channel state of
// all the daemon's tasks of that job. Each Append encodes one stretch of a
// channel's buffers as a segment and appends it to the current part, a local
// spool file; Seal uploads the parts. So a daemon writes one object per
// checkpoint (more only past WriterOptions.MaxObjectBytes, default 64 MiB)
// instead of one per task or per channel: object stores bill and throttle
// per request, and a file per subtask floods them at high parallelism
// (Flink learned it and merged its channel state files, FLINK-26803).
// Each task keeps in its handle (backend.ChannelState) the index of its
// channels' segments: object, offset, length and CRC32C. Restore reads
// each segment with one ranged read.
//
// Writer.AppendFile appends a file's bytes as they are, for the daemon's
// packing of its tasks' small snapshot files into one object per
// checkpoint (backend.FileRef.Pack, read back through
// backend.PackedStore): the same spooling, parts and Seal.
//
// # Segment format
//
// A segment is an internal/frame envelope (magic "STCS", version 1, length,
// CRC32C) around a payload of unsigned varints:
//
//	payload  = nbuffers buffer*
//	buffer   = nrecords record*
//	record   = keygroup length data[length]
//
// keygroup is the record's key group on keyed channels (< maxParallelism)
// and 0 on forward and broadcast channels. The constants are frozen; a new
// layout gets a new version and decoders keep reading the old ones.
// testdata/segment-v1.bin pins version 1. Decoding is strict: every count
// is bounded by the bytes left (so a corrupt count cannot make it allocate
// without bound), trailing bytes are refused, and every error wraps
// backend.ErrCorrupt.
//
// # Restore and redistribution
//
// Without a rescale a task gets its own channel state back as it was.
// After a rescale the keyed channels of every old subtask contribute the
// records whose key group lies in the new subtask's range, merged per
// channel id in the old subtasks' order, each old subtask's order kept.
// For an input channel the key group is the task's own. For an output
// subpartition of a keyed connection it is the key group at the receiving
// operator; on rescale the record still goes to the new subtask of the
// restoring (sending) operator that owns that key group, which is an
// arbitrary but deterministic choice: every record is restored exactly
// once, and the engine re-partitions what it replays from output buffers
// through the new partitioner anyway. Forward and broadcast channels
// cannot be redistributed (a forward channel has no key to route by, and a
// broadcast buffer would be duplicated or lost): a rescale with any such
// data fails with ErrNotRedistributable.
//
// # Caveats
//
// Memory is bounded: the Writer spools to local files and uploads from
// them, readers hold one segment at a time (at most MaxSegmentBytes), and
// Restore reads and verifies everything up front into a local spool file,
// keeping only an index in memory, so damage surfaces as
// backend.ErrCorrupt at restore time rather than mid-replay.
//
// Uploaded objects belong to the checkpoint: Writer.Close removes only the
// spool files, and deleting the objects is the checkpoint's lifecycle's job.
package chanstate
