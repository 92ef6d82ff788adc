// Package cache is the tiered store: a bounded local cache of a remote
// tiered.Store (S3), the piece that gives local recovery.
//
// # Behaviour
//
//   - Put and PutIfAbsent write the bytes to a local temporary file first
//     (checksumming them), upload that file to the remote, and, once the
//     remote accepted it, publish the file as the cached copy. A restart on
//     the same host then restores from local files.
//   - Get serves the cached copy when there is one, else downloads the
//     whole object into the cache and serves that. Concurrent misses of one
//     object download it once. Objects larger than the bound bypass the
//     cache.
//   - GetRange serves cached copies; a miss reads the range from the remote
//     without filling the cache (a range is usually a small part of a big
//     object).
//   - Stat of a cached object is answered locally; List always asks the
//     remote, which is the authority on what exists.
//   - Delete and DeleteBatch drop the local copies and delete remotely.
//
// # Bound and eviction
//
// The bytes of cached files (data plus a small trailer) plus the space
// reserved by uploads and downloads in flight never exceed MaxBytes.
// Making room evicts least recently used copies; nothing in the cache is
// pinned, since readers keep open files usable after an eviction.
//
// # Checksums
//
// Every cached copy is exactly the object's bytes, with a metadata file
// beside it (a frame: object name, size, CRC32C of the data, modification
// time). When the cache opens, it rebuilds its index from the metadata
// files and removes copies whose metadata is missing or does not parse. A copy
// loaded that way is verified against its CRC on first use; one that does
// not verify is dropped and the object fetched from the remote again. A
// full Get also checks the CRC while streaming and fails at the end if the
// bytes changed underneath (the copy is then dropped).
//
// # File system
//
// Every file operation goes through Options.FS (the operating system's by
// default), so that tests can tear the copies in a simulated power loss
// (vfs.NewCrashableMem); the paths LocalCopy returns are on that FS.
//
// # Consistency
//
// The cache assumes it is the only writer of the names it caches (stated
// never rewrites an object under the same name). Concurrent writes and
// deletes of one name through the cache are safe: a write or delete drops
// the local copy before and after the remote call, and a copy is published
// only if no other write to the name finished while it was being made.
package cache
