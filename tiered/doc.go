// Package tiered is stated's object-store layer: one small Store interface
// and its implementations. Nothing here knows about backends or checkpoints;
// they write and read only through Store.
//
// Implementations, one package each:
//   - localfs: a local directory, the embedded default (atomic publish);
//   - memstore: in memory (the heap backend's snapshots, fast tests);
//   - s3store: any S3-compatible service through aws-sdk-go-v2 (multipart,
//     conditional puts, batched deletes, retries, per-request timeouts);
//   - cache: a byte-bounded, checksum-verified local LRU over a remote store
//     (local recovery after a restart on the same host);
//   - fault: a seeded fault-injecting wrapper for tests.
//
// WithPrefix roots a view at a sub-prefix (savepoints use it); storeurl
// opens a store from a URL (file://, s3://, mem://); zstdcodec is the
// bounded zstd codec for checkpoint files; storetest is the acceptance
// suite every implementation runs.
package tiered
