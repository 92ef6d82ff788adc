package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/statedhq/stated/tiered"
)

// DefaultMaxValueSize bounds one value, list element, map user key or map
// value (and a key or namespace) when Options.MaxValueSize is zero. It is
// the one default of the bound: the daemon's Config.MaxValueSize defaults
// to it too, and "stated serve --max-value-size" defaults to the same 4 MiB
// (a value must fit in a gRPC message with room to spare: the flag must be
// at most half of --max-message-size).
const DefaultMaxValueSize = 4 << 20

// Options are the options every backend kind takes. Each kind's Open takes
// them plus its own options struct.
type Options struct {
	// Task is the task the instance belongs to. Required.
	Task TaskID
	// KeyGroups is the instance's key-group range. Required.
	KeyGroups KeyGroupRange
	// MaxParallelism is the job's number of key groups.
	// Default DefaultMaxParallelism.
	MaxParallelism int
	// States are registered at open (more may be registered later).
	States []StateDescriptor
	// Store is the checkpoint storage: snapshots write
	// "<job>/shared/<unique>" and "<job>/chk-<N>/<operator>-<subtask>/..."
	// into it. Required (the heap backend writes into its own in-memory
	// store and uses this one only for restores from other stores).
	Store tiered.Store
	// Restore, when not empty, are the handles to restore from. Their
	// key-group ranges together must cover KeyGroups; only the key groups in
	// KeyGroups are kept. All must have MaxParallelism's key groups.
	Restore []*Handle
	// RestoreStore is where the paths of Restore's files are read from.
	// Default Store. Savepoints pass a store rooted at the savepoint.
	RestoreStore tiered.Store
	// NoClaim forbids new checkpoints from referencing restored files: the
	// first checkpoint after the restore is a full one that shares no file
	// with the restored checkpoint (restore mode no-claim, and savepoints).
	NoClaim bool
	// RestoreHeld, if set, reports an error once a checkpoint restored
	// from is no longer retained (its manifest is gone). A backend that
	// keeps using restored files in place (lsm remote mode, claim) calls it
	// after it announced its hold on them, a hold the catalog's deletions
	// respect: a checkpoint discarded before the hold could be seen then
	// fails the restore instead of losing files under a live instance. nil:
	// the caller keeps the restored checkpoints while the restore runs.
	RestoreHeld func(ctx context.Context) error
	// Clock gives the time for TTL. Default time.Now.
	Clock Clock
	// MaxValueSize bounds each key, namespace, value, list element and map
	// user key or value, in bytes. Default DefaultMaxValueSize.
	MaxValueSize int
	// MaxMemoryBytes bounds the keys and values the heap and file backends
	// hold in memory (their working state, restored state included); a
	// write that would grow past it fails with ErrResourceExhausted and
	// changes nothing. 0: no bound. lsm keeps its state on disk and
	// ignores it.
	MaxMemoryBytes int64
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxParallelism == 0 {
		o.MaxParallelism = DefaultMaxParallelism
	}
	if o.RestoreStore == nil {
		o.RestoreStore = o.Store
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxValueSize == 0 {
		o.MaxValueSize = DefaultMaxValueSize
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Task.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.KeyGroups.Validate(o.MaxParallelism); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for _, d := range o.States {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("%w: state %q registered twice", ErrInvalidArgument, d.Name))
		}
		seen[d.Name] = true
	}
	if o.Store == nil {
		errs = append(errs, fmt.Errorf("%w: no checkpoint store", ErrInvalidArgument))
	}
	if o.MaxValueSize < 0 {
		errs = append(errs, fmt.Errorf("%w: max value size %d is negative", ErrInvalidArgument, o.MaxValueSize))
	}
	if o.MaxMemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: max memory bytes %d is negative", ErrInvalidArgument, o.MaxMemoryBytes))
	}
	errs = append(errs, ValidateRestore(o.Restore, o.KeyGroups, o.MaxParallelism))
	return errors.Join(errs...)
}

// ValidateRestore checks that handles are usable to restore range r: same
// maxParallelism, and together they cover r. Overlapping handles are
// allowed (the first one listed wins for a key group held twice).
func ValidateRestore(handles []*Handle, r KeyGroupRange, maxParallelism int) error {
	if len(handles) == 0 {
		return nil
	}
	covered := make([]bool, r.Len())
	for i, h := range handles {
		if h == nil {
			return fmt.Errorf("%w: restore handle %d is nil", ErrInvalidArgument, i)
		}
		if err := h.Validate(); err != nil {
			return err
		}
		if h.MaxParallelism != maxParallelism {
			return fmt.Errorf("%w: handle of %s has maxParallelism %d, the instance %d (key groups cannot be split or merged)",
				ErrIncompatible, h.Task, h.MaxParallelism, maxParallelism)
		}
		in := h.KeyGroups.Intersect(r)
		for kg := in.Start; kg <= in.End; kg++ {
			covered[kg-r.Start] = true
		}
	}
	for i, c := range covered {
		if !c {
			return fmt.Errorf("%w: no restore handle holds key group %d of %s", ErrInvalidArgument, r.Start+i, r)
		}
	}
	return nil
}
