package kvstate

// Engine is the ordered key/value store a backend keeps its working state
// in: an in-memory B-tree (heap, file) or Pebble (lsm). kvstate builds every
// state kind, TTL and the key layout on top of it, so all backends share one
// set of semantics and one key format.
//
// Concurrency: State serializes writers with a mutex and lets readers run
// concurrently with each other but never with a writer, so an Engine only
// needs to support concurrent readers. Snapshots are the backend's business
// (State.Exclusive gives them a moment with no writer).
type Engine interface {
	// Get returns a copy of the value stored under key.
	Get(key []byte) (value []byte, ok bool, err error)
	// Set stores value under key. key and value may be reused by the caller
	// after Set returns.
	Set(key, value []byte) error
	// Merge appends operand to the value stored under key (or stores it if
	// there is none): the stored value becomes value||operand. List appends
	// use it so that they never read.
	Merge(key, operand []byte) error
	// Delete removes key; an absent key is not an error.
	Delete(key []byte) error
	// DeleteRange removes every key in [start, end); a nil end means no
	// upper bound.
	DeleteRange(start, end []byte) error
	// Scan calls fn for every key in [start, end) in ascending bytewise
	// order (a nil end: no upper bound) until fn returns false or an
	// error. k and v are valid only
	// during the call. Writes are not allowed from inside fn.
	Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error
}

// Batcher is an optional Engine extension for engines that can collect
// writes and apply them at once (Pebble): State.Group commits the blind
// writes of a group in one batch instead of one commit per write.
type Batcher interface {
	// NewBatch returns an empty batch.
	NewBatch() Batch
}

// Batch collects writes; none is visible to the engine's readers before
// Commit. The write methods copy their arguments (the caller may reuse
// them). A batch is used by one goroutine.
type Batch interface {
	Set(key, value []byte) error
	Merge(key, operand []byte) error
	Delete(key []byte) error
	// DeleteRange removes every key in [start, end); end is never nil
	// (State only deletes ranges it can bound).
	DeleteRange(start, end []byte) error
	// Empty reports whether the batch holds no write.
	Empty() bool
	// Commit applies every write of the batch at once (all or none, in
	// the order they were made) and releases the batch.
	Commit() error
	// Close releases the batch without applying it; it is a no-op after
	// Commit.
	Close() error
}

// AppendGetter is an optional Engine extension: AppendGet is Get that
// appends the value to dst (and returns the extended buffer) instead of
// allocating a copy, so that a read group reuses one buffer for all its
// reads.
type AppendGetter interface {
	AppendGet(dst, key []byte) (buf []byte, ok bool, err error)
}
