package snapfmt

import (
	"context"
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/tiered"
)

// ReadHandle delivers the entries of key groups run from the one file of a
// heap or file (canonical) handle h, read from the first of stores that has
// it, to fn. Every stored key is checked: it must parse, lie in run and
// belong to a state h registers (data of an unregistered state could be
// misread by a state registered later under that name with another kind).
// Every backend restoring a canonical handle goes through here.
func ReadHandle(ctx context.Context, stores []tiered.Store, h *backend.Handle, run backend.KeyGroupRange, fn func(k, v []byte) error) error {
	if len(h.Files) != 1 || len(h.Files[0].KeyGroupOffsets) != h.KeyGroups.Len()+1 {
		return fmt.Errorf("%w: a %s handle has exactly one file with key-group offsets, this one has %d file(s)",
			backend.ErrCorrupt, h.Backend, len(h.Files))
	}
	f := h.Files[0]
	known := make(map[string]bool, len(h.States))
	for _, d := range h.States {
		known[d.Name] = true
	}
	check := func(k, v []byte) error {
		sk, err := kvstate.SplitKey(k)
		if err != nil {
			return fmt.Errorf("snapshot file %s: %w", f.Path, err)
		}
		if !run.Contains(sk.KeyGroup) || !known[sk.State] {
			return fmt.Errorf("snapshot file %s, key group %d: %w: entry of state %q, which the handle does not register",
				f.Path, sk.KeyGroup, backend.ErrCorrupt, sk.State)
		}
		return fn(k, v)
	}
	// Read reports a missing file before it delivers any entry, so trying
	// the next store never mixes data of two files.
	err := fmt.Errorf("%w: no store to read from", backend.ErrNotFound)
	for _, s := range stores {
		if err = Read(ctx, s, f, h.KeyGroups, run, check); !errors.Is(err, backend.ErrNotFound) {
			break
		}
	}
	return err
}

// NewHandle returns the validated handle of a snapshot that is the one
// snapfmt file ref (heap, file and canonical snapshots).
func NewHandle(kind backend.Kind, task backend.TaskID, checkpointID uint64, r backend.KeyGroupRange, maxParallelism int,
	states []backend.StateDescriptor, ref backend.FileRef) (*backend.Handle, error) {
	h := &backend.Handle{
		Version:          backend.HandleVersionBase,
		Backend:          kind,
		Task:             task,
		CheckpointID:     checkpointID,
		KeyGroups:        r,
		MaxParallelism:   maxParallelism,
		States:           states,
		Files:            []backend.FileRef{ref},
		FullSize:         ref.Size,
		CheckpointedSize: ref.Size,
	}
	if err := h.Validate(); err != nil {
		return nil, fmt.Errorf("snapshot %d of %s produced an invalid handle: %w", checkpointID, task, err)
	}
	return h, nil
}
