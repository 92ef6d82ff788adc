// Package dstl is the durable short-term log (Flink's DSTL, FLIP-158):
// every state change of every backend instance of a daemon is appended to
// a log that is made durable in shared segments, so that a checkpoint is
// the last materialized snapshot of a backend plus the log ranges since
// it, and its cost does not grow with the state's size.
//
// This package is the log itself: the segment format, the Writer that
// batches the changes of all instances of a daemon into shared segments,
// the Reader that streams one instance's records back (optionally only
// some key groups, for rescale), the LogStore interface the segments live
// behind, and the bookkeeping that says which segments the live log still
// references. Backends, materialization and the daemon build on it.
//
// # Basics
//
// A writer id names one backend instance's log (for example
// "<job>/<operator>/<subtask>/<run>"). Writer.Append gives each change the
// next sequence number of its writer (from 1, +1 per change) and buffers
// it; Writer.AppendBatch does the same for a run of changes under one
// hold of the Writer's lock (a backend logs a batch of writes so). The
// Writer cuts one segment from the buffered changes of all writers
// when they reach Options.FlushSize, when one writer's reach
// Options.PreemptiveFlushSize, when Options.FlushDelay has passed since the
// first of them, or when Persist asks for it. Writer.Persist waits until a
// writer's changes up to a sequence number are durable and returns the
// Handle a checkpoint records: the seq window and, per segment, the byte
// range of that writer's blocks. Read streams a Handle's records back in
// sequence order, verifying every block. Writer.Truncate drops a writer's
// log up to a sequence number once a materialization that covers it is
// confirmed; segments no writer references any more are reported by
// Writer.TakeReleased for the refcount registry, which deletes them once
// no retained checkpoint references them either. Writer.Holds answers for
// one segment; Writer.HeldFrom is the smallest segment counter the Writer
// may still hold, all below it released for good, which is what a
// catalog on another node can be told (cluster mode; ParseSegmentName
// splits a name into run id and counter).
//
// # Uploads, memory and failures
//
//   - Bytes in flight (changes buffered or uploading) are capped by
//     Options.MaxBytesInFlight; an Append past the cap blocks until room
//     frees or its ctx ends (back-pressure), so a slow or failing store
//     slows the instances down instead of growing memory (FLINK-30863).
//   - At most Options.UploadConcurrency segments upload at once; while all
//     slots are busy the buffer keeps filling, so a slow store gets fewer,
//     bigger segments: objects written per second are bounded by the flush
//     rate, never by the number of writers.
//   - Every upload attempt of a segment writes its own name (attempt
//     suffix). A failed attempt is retried after a backoff (doubling, with
//     jitter); an attempt still running after Options.UploadTimeout gets a
//     speculative twin. The first attempt to succeed wins and the segment
//     is durable under its name; the other attempts are cancelled, waited
//     for, and their names deleted, since a lost reply or a cancelled Put
//     may have stored the object anyway. A delete that fails (or is
//     skipped because the Writer is closing) leaves the object to the
//     orphan sweep: no handle references it. Distinct names are what make
//     the delete safe: it can never remove the winner.
//   - A segment that fails Options.MaxAttempts times is dropped from memory
//     and every Persist that needs one of its records fails with
//     ErrUploadFailed until Truncate moves past them (the instance must
//     materialize again): an acknowledged Persist is never undone, and an
//     unacknowledged change is never reported durable.
//   - Every segment on an object store is a request of its own, billed and
//     throttled: FlushDelayFor gives the delay that suits a store (1 s when
//     it does not append, 10 ms when it does), which the daemon uses unless
//     told otherwise, so between checkpoints a daemon's log costs at most
//     one PUT per delay plus one per FlushSize of changes, whatever the
//     number of instances; a Persist still cuts at once.
//   - When the log store appends (a local directory: see tiered.Appender
//     and localfs's pack files), a segment is written in place into a
//     preallocated pack file and only its data is synced, one fdatasync
//     shared with the segments uploading at the same time and no
//     file-system journal commit: a flush to a local disk is durable
//     within a millisecond or two (BenchmarkFlushLatency). To every other
//     reader the segment is an object under its name, as on any store.
//
// # Object names
//
// Segments are shared by the instances of all jobs of a daemon, so they
// live under a daemon-level prefix of the log store, not under a job:
//
//	<Options.Prefix>/<run id>/<counter:016x>-<attempt>
//	default prefix "_changelog/shared"
//
// The run id is random per Writer (Options.RunID), the counter counts the
// Writer's segments and the attempt counts upload attempts of one segment,
// so a name is unique by construction and never derived from local names.
// Job names start with a letter or digit, so "_changelog" cannot collide
// with a job directory of the checkpoint layout.
//
// # Format (version 1; every constant below is frozen)
//
// Integers are little-endian; uvarint is encoding/binary's unsigned varint.
//
//	segment:
//	+---------------+---------+-----+---------+---------+-----+---------+-------+---------------+
//	| header (12 B) | block   | ... | block   | block   | ... | block   | index | trailer (20 B)|
//	|               | writer A: seq ascending | writer B: seq ascending |       |               |
//	+---------------+---------+-----+---------+---------+-----+---------+-------+---------------+
//	0               12                                                  idxOff  size-20
//
//	header:
//	+--------+---------+----------+--------+
//	| magic  | version | reserved | crc32c |   crc32c covers the 8 bytes before it
//	| "STCL" |   u16   | u16 = 0  |  u32   |
//	+--------+---------+----------+--------+
//
//	block (one writer's records; never mixes writers):
//	+---------+----------------------------------------------+--------+
//	| len u32 | payload (len bytes)                          | crc32c |  crc32c covers len and payload
//	+---------+----------------------------------------------+--------+
//	payload: compression u8 | uvarint(len(id)) | writer id | uvarint(records) | body
//	body (compression 0): raw
//	body (compression 1): uvarint(len(raw)) | one zstd frame of raw
//	raw:     { uvarint(seq - prev) | key group u16 | uvarint(len(change)) | change }+
//	         prev is 0 for a block's first record (so it stores the absolute
//	         seq) and the previous record's seq after it: deltas are >= 1.
//	         key group 0xFFFF = NoKeyGroup (operator state).
//
//	index: an internal/frame envelope, magic "STCI", version 1, payload:
//	uvarint(writers) { uvarint(len(id)) | id | uvarint(blocks)
//	    { uvarint(offset) | uvarint(length) | uvarint(first seq) | uvarint(last seq)
//	      | uvarint(records) | key group min u16 | key group max u16 }+ }+
//
//	trailer:
//	+-----------------+-----------------+--------+--------+
//	| index offset u64| index length u32| crc32c | "STCL" |   crc32c covers the 12 bytes before it
//	+-----------------+-----------------+--------+--------+
//
// Writers appear in strictly ascending id order, and the blocks of all of
// them tile [12, index offset) exactly; the blocks of one writer are
// contiguous and in sequence order, so its records in a segment are one
// byte range. A reader holding a Handle reads that range with one ranged
// read and needs neither header nor index: every block is self-delimiting,
// checksummed and names its writer. A reader without a Handle reads the
// trailer and the index (ReadIndex: two ranged reads) to find a writer's
// range; DecodeSegment verifies a whole segment.
//
// A block is stored uncompressed when zstd does not save at least a quarter
// of it (zstd is tried on the first 16 KiB of a long block before the
// whole, and a writer whose blocks did not shrink skips zstd for its next
// few segments: the choice is the writer's, readers accept both). Its
// raw size is bounded by MaxBlockRawSize and a change by MaxChangeSize;
// every length read from a segment is bounded before it is used, so a
// corrupt length cannot trigger a huge allocation. Every damage is an
// error wrapping ErrCorrupt (and backend.ErrCorrupt) that names the
// segment and, where it applies, the writer, the block and its offset, and
// which checksum or check failed.
//
// # Upgrade path
//
// Readers accept versions 1..Version of the header and the index. A new
// version may change the block or index encoding; readers dispatch on the
// version, and writers keep writing the oldest version that can express
// the data.
//
// # Caveats
//
//   - The log store must keep a Put atomic (readers see all of a segment
//     or nothing); tiered.Store guarantees it, for appended objects too.
//   - Changes appended but not covered by a successful Persist are not
//     durable: Close discards them.
package dstl
