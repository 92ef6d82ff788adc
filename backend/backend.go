package backend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

// Kind names a backend implementation. Frozen strings: they are written into
// handles.
type Kind string

const (
	KindHeap Kind = "heap"
	KindFile Kind = "file"
	KindLSM  Kind = "lsm"
)

// ParseKind checks that s names a backend.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindHeap, KindFile, KindLSM:
		return k, nil
	}
	return "", fmt.Errorf("%w: unknown backend %q (want heap, file or lsm)", ErrInvalidArgument, s)
}

// TaskID names the task an instance belongs to.
type TaskID struct {
	Job      string `json:"job"`
	Operator string `json:"operator"`
	Subtask  int    `json:"subtask"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks that the job and operator names are safe as path segments
// (letters, digits, '.', '_', '-'; not starting with a dot; at most 128
// bytes) and that the subtask index is not negative.
func (t TaskID) Validate() error {
	if !nameRE.MatchString(t.Job) {
		return fmt.Errorf("%w: job name %q must match %s", ErrInvalidArgument, t.Job, nameRE)
	}
	if !nameRE.MatchString(t.Operator) {
		return fmt.Errorf("%w: operator name %q must match %s", ErrInvalidArgument, t.Operator, nameRE)
	}
	if t.Subtask < 0 {
		return fmt.Errorf("%w: subtask %d is negative", ErrInvalidArgument, t.Subtask)
	}
	return nil
}

func (t TaskID) String() string { return fmt.Sprintf("%s/%s/%d", t.Job, t.Operator, t.Subtask) }

// Dir is the task's directory inside a checkpoint: "<operator>-<subtask>".
func (t TaskID) Dir() string { return fmt.Sprintf("%s-%d", t.Operator, t.Subtask) }

// Clock returns the current time; tests inject one to drive TTL.
type Clock func() time.Time

// Info describes an open instance.
type Info struct {
	Kind           Kind
	Task           TaskID
	KeyGroups      KeyGroupRange
	MaxParallelism int
}

// Backend is the working keyed state of one task instance plus its
// snapshots.
//
// Contract, for every implementation (backendtest checks it):
//   - All methods are safe for concurrent use; each operation is atomic, and
//     a read sees every write that returned before it started.
//   - Every operation checks that the state exists (ErrUnknownState), has the
//     kind the operation needs (ErrWrongKind) and that the key group lies in
//     the instance's range (ErrKeyGroupOutOfRange); a failed check changes
//     nothing.
//   - Absent entries are not errors: Get returns ok=false, ListGet an empty
//     list, MapIterate no entries.
//   - Entries past their TTL are never returned and count as absent.
//   - Returned byte slices belong to the caller; slices passed in may be
//     reused by the caller after the call returns.
//   - Close is idempotent; every other call after Close returns ErrClosed.
type Backend interface {
	Info() Info
	// States lists the registered states, sorted by name.
	States() []StateDescriptor
	// RegisterState adds a state. Registering an identical descriptor again
	// is a no-op; one with the same name and another kind, TTL or function is
	// ErrIncompatible.
	RegisterState(d StateDescriptor) error

	// Get returns the value of a value state.
	Get(state string, k Key) (value []byte, ok bool, err error)
	// Put sets the value of a value state.
	Put(state string, k Key, value []byte) error
	// Delete clears the entry of a value, list, map (all user keys) or
	// aggregate state. Deleting an absent entry is not an error.
	Delete(state string, k Key) error

	// ListAppend appends values to a list state without reading it.
	ListAppend(state string, k Key, values ...[]byte) error
	// ListGet returns the list in append order (expired elements left out).
	ListGet(state string, k Key) ([][]byte, error)

	// MapGet, MapPut, MapRemove and MapContains work on one user key.
	MapGet(state string, k Key, userKey []byte) ([]byte, bool, error)
	MapPut(state string, k Key, userKey, value []byte) error
	MapRemove(state string, k Key, userKey []byte) error
	MapContains(state string, k Key, userKey []byte) (bool, error)
	// MapIterate returns up to limit entries (limit <= 0: all) with user key
	// greater than after (nil: from the first), in bytewise order of user
	// keys; more says whether entries remain past the last one returned.
	MapIterate(state string, k Key, after []byte, limit int) (entries []MapEntry, more bool, err error)

	// AggregateAdd merges v into an aggregate state with its function. v must
	// have the state's number type.
	AggregateAdd(state string, k Key, v Number) error
	// AggregateGet returns the merged value.
	AggregateGet(state string, k Key) (Number, bool, error)

	// RegisterTimer adds a timer; registering an existing one is a no-op.
	RegisterTimer(state string, t Timer) error
	// DeleteTimer removes a timer; deleting an absent one is not an error.
	DeleteTimer(state string, t Timer) error
	// PollTimers removes and returns up to limit (<= 0: all) timers of the
	// state with Timestamp <= watermark, ordered by (Timestamp, KeyGroup,
	// Key, Namespace).
	PollTimers(state string, watermark int64, limit int) ([]Timer, error)

	// Snapshot runs the synchronous part of checkpoint checkpointID: it
	// freezes a view of the state and returns at once. Writes after it
	// returns are not in the snapshot. The caller runs the returned
	// snapshot's asynchronous part, possibly concurrently with more writes
	// and more Snapshot calls. An error wrapping ErrDeclined means the
	// backend refuses this checkpoint; the reason is in the message.
	Snapshot(ctx context.Context, checkpointID uint64) (PendingSnapshot, error)
	// NotifyCheckpointComplete tells the backend that checkpointID completed:
	// files it uploaded may be referenced by later incremental snapshots.
	NotifyCheckpointComplete(checkpointID uint64)
	// NotifyCheckpointAborted tells the backend that checkpointID will never
	// complete; its uploads are never referenced later.
	NotifyCheckpointAborted(checkpointID uint64)

	// Close releases the instance. Pending snapshots already returned may
	// still run to completion.
	Close() error
}

// RestoreReporter is an optional interface of a Backend: how its restore
// went, by phase (times, files and bytes), as a structured log value. The
// daemon logs it when an instance opens from a restore, so that an
// operator sees where a slow restore spent its time.
type RestoreReporter interface {
	RestoreReport() slog.Value
}

// Grouper is an optional Backend extension for applying a run of blind
// writes (writes that read nothing) at once. Group runs fn with the
// backend's writer lock held and hands it a GroupWriter; the writes fn
// makes through it are committed together before Group returns, so a
// concurrent reader, writer or snapshot sees all of them or none, in the
// order they were made. fn must not call the backend. Each GroupWriter
// method checks its operation as the Backend method of the same name does
// and returns that error; Group returns the commit's error, and then none
// of the group's writes was applied. The writer is not valid after Group
// returns.
//
// Grouper is optional: it is not part of Backend, and a backend that lacks
// it is still complete. Every backend kind of this module has it (lsm,
// heap and file declare so at compile time). api's batch path asserts it
// (api/apply.go); without it each write of a batch is applied with its own
// Backend method: the same result, without the atomicity of a run and at
// the cost of a lock per write.
type Grouper interface {
	Group(fn func(w GroupWriter)) error
}

// GroupWriter makes the blind writes of Backend within Grouper.Group.
type GroupWriter interface {
	Put(state string, k Key, value []byte) error
	Delete(state string, k Key) error
	ListAppend(state string, k Key, values ...[]byte) error
	MapPut(state string, k Key, userKey, value []byte) error
	MapRemove(state string, k Key, userKey []byte) error
	RegisterTimer(state string, t Timer) error
}

// ReadGrouper is an optional Backend extension for making a run of point
// reads under one hold of the backend's reader lock: ReadGroup runs fn
// with no writer and no snapshot running and hands it a GroupReader, whose
// methods are the Backend methods of the same name. A read that would
// write (a state whose TTL is refreshed on read) fails with ErrNotInGroup
// and is to be made with the Backend method after ReadGroup returns. fn
// must not call the backend. The reader is not valid after ReadGroup
// returns.
//
// ReadGrouper is optional, as Grouper is: every backend kind of this module
// has it, and api's batch path asserts it (api/apply.go); without it each
// read is made with its own Backend method, a lock per read.
type ReadGrouper interface {
	ReadGroup(fn func(r GroupReader))
}

// ParallelReadGrouper is an optional ReadGrouper extension for making a
// long run of point reads on several goroutines: ReadGroups is ReadGroup
// with n readers (n >= 1) under the same single hold of the reader lock, so
// every read of the run sees the same state. Each reader is used by one
// goroutine at a time; readers may be used at the same time as each other.
// fn must not return before every goroutine it handed a reader to has
// stopped using it. api's batch path uses it for runs of reads long enough
// to pay for a goroutine (api/apply.go).
type ParallelReadGrouper interface {
	ReadGrouper
	ReadGroups(n int, fn func(rs []GroupReader))
}

// GroupReader makes point reads within ReadGrouper.ReadGroup. Unlike the
// Backend methods, a read may return a value that is valid only until the
// reader's next read (a reader may reuse one buffer for them all).
type GroupReader interface {
	Get(state string, k Key) (value []byte, ok bool, err error)
	MapGet(state string, k Key, userKey []byte) ([]byte, bool, error)
	MapContains(state string, k Key, userKey []byte) (bool, error)
}

// ErrNotInGroup is GroupReader's error for a read it cannot make within
// the group; nothing was read.
var ErrNotInGroup = errors.New("read not possible within a read group")

// PendingSnapshot is the asynchronous part of a snapshot.
type PendingSnapshot interface {
	// Run writes the frozen view to checkpoint storage and returns the
	// task's state handle. It may run while the task keeps writing. It is
	// called at most once; on error, files it wrote are left for the
	// abort path and the orphan sweep, never referenced.
	Run(ctx context.Context) (*Handle, error)
	// Release frees the frozen view without writing anything; it is a no-op
	// after Run. Callers call it when they abandon the snapshot.
	Release()
}
