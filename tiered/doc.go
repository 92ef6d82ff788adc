// Package tiered is stated's object-store layer: one small Store interface
// and its implementations. Nothing here knows about backends or checkpoints;
// they write and read only through Store.
//
// Implementations: localfs (a local directory, the embedded default),
// memstore (in memory: heap snapshots and tests), and, as they land, S3
// (aws-sdk-go-v2), a bounded local cache over a remote store, and a
// fault-injecting wrapper for tests.
package tiered
