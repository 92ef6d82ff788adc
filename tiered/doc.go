// Package tiered is stated's object-store layer: one small Store interface
// and its implementations. Nothing here knows about backends or checkpoints;
// they write and read only through Store.
//
// The contract's checks live once, in Bucket (driver.go): name validation,
// range rules, list paging and order, the context and closed checks before
// any I/O, exact-size puts, and the mapping of each store's native errors
// to the sentinels. Each store is a small Driver under a Bucket that does
// only its own I/O, as gocloud's blob.Bucket sits over blob/driver.
//
// Implementations, one package each (the first four are Drivers; fault and
// metered wrap a Store):
//   - localfs: a local directory, the embedded default (atomic publish);
//   - memstore: in memory (the heap backend's snapshots, fast tests);
//   - s3store: any S3-compatible service through aws-sdk-go-v2 (multipart,
//     conditional puts, batched deletes, retries, per-request timeouts);
//   - cache: a byte-bounded, checksum-verified local LRU over a remote store
//     (local recovery after a restart on the same host);
//   - fault: a seeded fault-injecting wrapper for tests;
//   - metered: a wrapper that counts calls, failures and bytes (metrics).
//
// WithPrefix roots a view at a sub-prefix (savepoints use it); storeurl
// opens a store from a URL (file://, s3://, mem://); storetest is the
// acceptance suite every implementation runs. Compression is the
// backends' business, not the store's: file and heap snapshots compress
// each key-group block with zstd (backend/internal/snapfmt, recorded in
// FileRef.Compression) so that ranged reads of a sub-range still work, and
// Pebble compresses the blocks of lsm tables itself.
package tiered
