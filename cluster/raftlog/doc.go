// Package raftlog is a raft.LogStore and raft.StableStore on Pebble: the
// log of a cluster node's raft member (package cluster) and the few
// values raft must keep across restarts (its term and its vote).
//
// It replaces raft-wal v0.4.0, whose tail truncation (raft's "clearing log
// suffix") sealed a segment without its index, after which every start of
// the node panicked. Pebble is already the project's storage engine and
// crash-tested with it; a log store on it inherits Pebble's write-ahead
// log, its atomic batches and its recovery of a torn tail.
//
// # Durability
//
// Every write (StoreLog, StoreLogs, DeleteRange, Set, SetUint64) is one
// Pebble batch committed with Sync: when it returns, the batch survives a
// power loss, and a crash during it leaves all of the batch or none of
// it. Raft acknowledges entries to its leader and grants votes only after
// these calls return, which is what it needs for safety.
//
// The store tolerates gaps in the log's indexes (a StoreLogs after a
// restored snapshot may start anywhere), so it does not claim
// raft.MonotonicLogStore: FirstIndex and LastIndex are the smallest and
// largest index present.
//
// # Layout (format version 1; every constant below is frozen)
//
// One Pebble database (Open's dir). Keys start with a one-byte prefix:
//
//	0x00 'v'                    -> format version: 4 bytes, big-endian uint32 (1)
//	0x01 index(8, big-endian)   -> a log entry (record below)
//	0x02 key bytes              -> a stable value (record below)
//
// Big-endian indexes make Pebble's byte order the log's order, so
// FirstIndex and LastIndex are one seek each, and DeleteRange(min, max)
// is one range deletion of [0x01 min, 0x01 max+1).
//
// A log entry record:
//
//	+--------+-----+------+-------+------+------------+----------+------+----------+------------+
//	| crc32c | ver | type | index | term | appendedAt | len(data)| data | len(ext) | extensions |
//	|   4    |  1  |  1   |   8   |  8   |     8      |    4     |  n   |    4     |     m      |
//	+--------+-----+------+-------+------+------------+----------+------+----------+------------+
//
// crc32c (Castagnoli) covers every byte after it; ver is the record
// version (1); integers are big-endian; appendedAt is Unix nanoseconds (0:
// the zero time); index must equal the key's index. A stable value record
// is crc32c(4) | ver(1) | value.
//
// A record that fails any of these checks is reported as a *CorruptError
// (errors.Is(err, ErrCorrupt)) naming the index or key; nothing panics on
// what it reads. A database whose format version is newer than this code
// knows is refused (ErrFormatVersion) rather than misread: a later format
// adds a version and an upgrade at Open.
//
// # Use
//
// Open takes the directory and Options (a vfs.FS for tests that drop
// unsynced writes, Pebble's logger). The store is safe for concurrent use;
// calls after Close return ErrClosed. Check decodes every entry, so that a
// caller can refuse a damaged log with a clear error before raft reads it
// (raft panics on a log entry it cannot read).
package raftlog
