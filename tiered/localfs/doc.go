// Package localfs is the local-directory object store, stated's embedded
// default checkpoint storage.
//
// Every object is a file under the root directory at its name. Put writes a
// temporary file under <root>/.tmp, fsyncs it, renames it into place and
// fsyncs the parent directory, so a reader sees the whole object or none of
// it, also after a crash. A directory Put creates is synced into its
// parent, and Delete syncs the directories it changed before it returns:
// what a caller was told is stored (or deleted) stays so across a power
// loss. PutIfAbsent publishes with link(2), which fails if
// the name exists, so exactly one of concurrent callers wins. Open removes
// temporary files a crash left behind.
//
// # Packs
//
// The Store is a tiered.Appender: Append stores a small object (at most
// Options.MaxPacked, 1 MiB by default) as a frame appended to a pack file
// of this Store, instead of a file of its own. A pack file is created
// ahead of its use, filled with zeros to its size (Options.PackSize, 16
// MiB by default) and synced, its name synced into its directory; an
// append then writes its frame in place and syncs the data alone
// (fdatasync), which changes no file-system metadata, so no journal
// commit is on its path, and concurrent appends share one sync. That is
// what makes a changelog flush durable within a millisecond or two on a
// local disk, where a new file per flush costs a journal commit of 5-15 ms
// at the tail (dstl.BenchmarkDurableWriteTail, BenchmarkFlushLatency).
//
// A packed object is an ordinary object otherwise: Get, GetRange, Stat,
// List and Delete serve it, also in another process that opens the same
// directory (a "stated gc", a cluster peer on a shared mount), which finds
// new packs and frames by scanning them again when a name is not known.
// A file of the same name wins over a packed object (a Put of the name
// marks the packed one deleted). Delete rewrites the frame's state byte in
// place and syncs it; a pack none of whose frames is live, and that no
// Store appends to, is removed. Every Store holds a lock (fcntl, through
// Options.FS) on the packs it appends to, so another process never
// removes them; a crashed Store's packs are removed once their frames are
// deleted, and Open removes those that hold nothing live.
//
// Layout of a pack file <root>/.packs/<unix nanoseconds:016x>-<random>.pack,
// format version 1 (integers little-endian; every constant is frozen):
//
//	header (12 B): magic "STPK" | version u16 = 1 | reserved u16 = 0 | crc32c u32 of the 8 bytes before
//	frames, back to back from offset 12, then zeros to the end of the file:
//
//	+------------+----------+-------------+-------------+------------+------+------+--------+
//	| length u32 | state u8 | reserved u8 | name len u16| mtime i64  | name | data | crc32c |
//	+------------+----------+-------------+-------------+------------+------+------+--------+
//	  length: of the whole frame (20 + name len + data); 0: no frame (the end so far)
//	  state: 1 live, 2 deleted (rewritten in place, so not covered by the checksum)
//	  mtime: the object's modification time, unix nanoseconds
//	  crc32c: Castagnoli, over the frame without its state byte and the checksum
//
// A reader scans frames until the zeros, or a frame that is not whole and
// valid: one being written, or torn by a crash, which no Append
// acknowledged, since an acknowledged frame was synced and every frame
// before it was written first. A damaged frame followed by a valid one is
// skipped (its object reads as missing). A pack's header is synced before
// its first frame is written, so a damaged header does not stop a scan:
// each frame is verified on its own. testdata/pinned holds a pack of
// version 1 that TestPinnedPack reads.
//
// The price of packing is space: a pack is removed only when every one of
// its frames is deleted, so one long-lived object keeps its whole pack.
// The changelog's segments, the objects that are appended, are truncated
// in the order they were written, so their packs die in that order too.
//
// A directory with packs needs a stated that reads them (this version or
// a later one): an older one sees no packed object.
//
// Every file and directory operation, fsyncs included, goes through
// Options.FS (the operating system's by default), so that tests can run
// the store on a file system that loses unsynced writes in a simulated
// power loss (vfs.NewCrashableMem).
package localfs
