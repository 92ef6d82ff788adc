package backend

import "errors"

// Sentinel errors of every backend. Implementations wrap them with context
// (the state, key group or file involved) so that errors.Is works and the
// message still names what was wrong. The api layer maps them to gRPC codes.
var (
	// ErrInvalidArgument: a request is malformed (empty name, bad range, ...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownState: an operation names a state that was never registered.
	ErrUnknownState = errors.New("unknown state")
	// ErrWrongKind: an operation does not fit the kind of the state it names.
	ErrWrongKind = errors.New("operation does not match the state's kind")
	// ErrKeyGroupOutOfRange: a key group lies outside the instance's range.
	ErrKeyGroupOutOfRange = errors.New("key group outside the instance's range")
	// ErrCorrupt: a file or record read back failed its checksum or its
	// format checks. It is never retried and never silently skipped.
	ErrCorrupt = errors.New("corrupt data")
	// ErrNotFound: a referenced snapshot or file does not exist.
	ErrNotFound = errors.New("not found")
	// ErrDeclined: the backend refused to take a snapshot (for example the
	// heap backend's size cap); the checkpoint is declined with this reason.
	ErrDeclined = errors.New("snapshot declined")
	// ErrResourceExhausted: a write would take the instance past one of its
	// bounds (the in-memory state of heap and file, Options.MaxMemoryBytes).
	// Nothing was changed.
	ErrResourceExhausted = errors.New("resource limit reached")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("backend closed")
	// ErrIncompatible: a restore source does not fit the instance (other
	// maxParallelism, a state registered with another kind, a format version
	// this build cannot read).
	ErrIncompatible = errors.New("incompatible restore source")
)
