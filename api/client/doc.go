// Package client is the Go thin client of stated, and the reference for
// clients in other languages.
//
// # Basics
//
// Dial the daemon (a Unix socket path, or host:port with a token), Open an
// Instance for a task, and call state operations on it. Every operation
// returns a Future at once; the client packs operations into batches on one
// long-lived gRPC stream per instance and sends a batch when it holds
// Options.MaxBatchOps operations or Options.MaxBatchBytes bytes, when
// Options.FlushDelay has passed since its first operation, on Flush, or when
// someone waits on one of its futures. A task therefore keeps thousands of
// operations in flight across records, as with Flink 2.0's asynchronous state
// API, and pays one round trip per batch rather than per operation:
//
//	f := inst.Get("count", key, nil)          // returns at once
//	inst.Put("seen", key, nil, []byte{1})     // fire and forget (errors: see Err)
//	v, err := f.Wait(ctx)                     // blocking helper: flushes, waits
//
// Operations complete in the order they were issued (per instance, hence
// also per key): the daemon applies one stream's batches in order, and
// futures, callbacks (Future.Then) and errors follow that order.
//
// # Key groups
//
// The client computes each operation's key group as Flink does:
// backend.KeyGroupForHash(Options.KeyHash(key), maxParallelism). The
// default KeyHash is FNV-1a (32 bit) over the key bytes, read as a signed
// int32 (two's complement); a client in another language that wants to
// share state with this one implements exactly that. An engine that routes
// records by another hash (Java's hashCode, say) passes it as KeyHash. The
// daemon re-checks every key group against the instance's range; with
// OpenSpec.CheckKeyGroups (and the default KeyHash), Open declares the hash
// (OpenRequest.key_hash) and the daemon also checks that each key group is
// its key's. The hash is specified in stated.proto, with vectors in api/testdata/keygroups.json
// (TestKeyGroupVectors checks this client against them).
//
// # Checkpoints
//
// Instance.Snapshot sends the snapshot as a barrier on the instance's
// batch stream (stated.proto, BatchRequest.snapshot), in the batch being
// filled: the daemon takes it once every operation issued before it is
// applied and before any issued after, with no wait for earlier responses.
//
// # Dependencies
//
// The client shares with the server only api/protocol (token header,
// transport sizes, message converters), the generated code and the batch
// codec: a program that uses it links none of the daemon, its catalog or
// its backends (TestNoServerDeps fails if it would).
//
// # Caveats
//
// Errors are gRPC status errors (codes.InvalidArgument, NotFound, ...). An
// operation that fails does not stop later ones. A broken stream (the daemon
// stopped) fails every pending and later operation of the instance with
// codes.Unavailable or the stream's status; the task then opens a new
// instance, restoring from its last checkpoint. Fire-and-forget writes
// report failures through Instance.Err.
package client
