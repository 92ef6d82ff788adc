package memsnap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/internal/memkv"
	"github.com/statedhq/stated/backend/internal/snapfmt"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// Config configures a Backend. The heap and file packages fill it.
type Config struct {
	// Kind is backend.KindHeap or backend.KindFile: it names the backend in
	// errors and handles.
	Kind backend.Kind
	// Options are the common options, with defaults applied and validated.
	Options backend.Options
	// Compression is snapfmt.CompressionNone or snapfmt.CompressionZstd.
	Compression string
	// TempDir stages large snapshots before upload ("" = os.TempDir()).
	TempDir string
	// Snapshots is where Snapshot writes its files.
	Snapshots tiered.Store
	// MaxSnapshotSize, when > 0, declines a snapshot whose file would be
	// larger (error wrapping backend.ErrDeclined from Run).
	MaxSnapshotSize int64
	// RestoreSource returns the stores to read the files of restore handle
	// h from, tried in order while the file is missing, and a hint appended
	// to the error when it is missing from all of them.
	RestoreSource func(h *backend.Handle) (stores []tiered.Store, missingHint string)
}

// Backend is a heap or file backend instance.
type Backend struct {
	*kvstate.State
	cfg  Config
	tree *memkv.Tree
	// load serializes bulk loads (one session at a time).
	load sync.Mutex
}

var (
	_ backend.Backend              = (*Backend)(nil)
	_ backend.CanonicalSnapshotter = (*Backend)(nil)
	_ backend.Grouper              = (*Backend)(nil)
	_ backend.ReadGrouper          = (*Backend)(nil)
)

// Open restores (when cfg.Options.Restore is not empty) and opens an
// instance.
func Open(cfg Config) (*Backend, error) {
	o := cfg.Options
	tree := memkv.New()
	tree.SetLimit(o.MaxMemoryBytes, fmt.Sprintf("%s instance of %s", cfg.Kind, o.Task))
	restored, err := restore(context.Background(), cfg, tree)
	if err != nil {
		return nil, err
	}
	st, err := kvstate.New(tree, kvstate.Config{
		Info:         backend.Info{Kind: cfg.Kind, Task: o.Task, KeyGroups: o.KeyGroups, MaxParallelism: o.MaxParallelism},
		Clock:        o.Clock,
		MaxValueSize: o.MaxValueSize,
		States:       o.States,
		Restored:     restored,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", cfg.Kind, o.Task, err)
	}
	return &Backend{State: st, cfg: cfg, tree: tree}, nil
}

// restore loads the key groups of cfg.Options.KeyGroups from the restore
// handles into tree and returns the states they registered. A key group
// held by several handles is read from the first one listed
// (rescale.Assign).
func restore(ctx context.Context, cfg Config, tree *memkv.Tree) ([]backend.StateDescriptor, error) {
	o := cfg.Options
	if len(o.Restore) == 0 {
		return nil, nil
	}
	owners := rescale.Assign(o.Restore, o.KeyGroups)
	var states []backend.StateDescriptor
	for j, h := range o.Restore {
		if err := checkHandle(cfg.Kind, h); err != nil {
			return nil, err
		}
		states = append(states, h.States...)
		stores, hint := cfg.RestoreSource(h)
		for _, run := range owners.Runs(j) {
			if err := readInto(ctx, cfg.Kind, stores, hint, h, run, tree); err != nil {
				return nil, err
			}
		}
	}
	return states, nil
}

// checkHandle refuses handles this backend cannot read.
func checkHandle(kind backend.Kind, h *backend.Handle) error {
	switch h.Backend {
	case backend.KindHeap, backend.KindFile:
	case backend.KindLSM:
		return fmt.Errorf("%s: restore %s from checkpoint %d: %w: the handle was written by the lsm backend, whose SST files only lsm reads; "+
			"take a canonical savepoint of the job and restore the %s backend from it",
			kind, h.Task, h.CheckpointID, backend.ErrIncompatible, kind)
	default:
		return fmt.Errorf("%s: restore %s: %w: handle of unknown backend %q", kind, h.Task, backend.ErrIncompatible, h.Backend)
	}
	if len(h.Files) != 1 || len(h.Files[0].KeyGroupOffsets) != h.KeyGroups.Len()+1 {
		return fmt.Errorf("%s: restore %s from checkpoint %d: %w: a %s handle has exactly one file with key-group offsets, this one has %d file(s)",
			kind, h.Task, h.CheckpointID, backend.ErrCorrupt, h.Backend, len(h.Files))
	}
	return nil
}

// readInto copies the entries of key groups run of h's file, from the first
// of stores that has it, into tree (snapfmt.ReadHandle checks each entry).
func readInto(ctx context.Context, kind backend.Kind, stores []tiered.Store, hint string, h *backend.Handle,
	run backend.KeyGroupRange, tree *memkv.Tree) error {
	err := snapfmt.ReadHandle(ctx, stores, h, run, tree.Set)
	if err == nil {
		return nil
	}
	if errors.Is(err, backend.ErrNotFound) && hint != "" {
		return fmt.Errorf("%s: restore %s (key groups %s) from checkpoint %d: %w; %s", kind, h.Task, run, h.CheckpointID, err, hint)
	}
	return fmt.Errorf("%s: restore %s (key groups %s) from checkpoint %d: %w", kind, h.Task, run, h.CheckpointID, err)
}

// Snapshot implements backend.Backend.
func (b *Backend) Snapshot(ctx context.Context, checkpointID uint64) (backend.PendingSnapshot, error) {
	o := b.cfg.Options
	dir := fmt.Sprintf("%s/chk-%d/%s", o.Task.Job, checkpointID, o.Task.Dir())
	return b.freeze(ctx, checkpointID, b.cfg.Kind, b.cfg.Snapshots, dir, "state-", b.cfg.MaxSnapshotSize)
}

// CanonicalSnapshot implements backend.CanonicalSnapshotter: the same file,
// written under dir of store with Backend KindFile and no size cap (a
// canonical savepoint goes to savepoint storage, not daemon memory).
func (b *Backend) CanonicalSnapshot(ctx context.Context, checkpointID uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	if dir != "" {
		if err := tiered.ValidateName(dir); err != nil {
			return nil, fmt.Errorf("%s: canonical snapshot of %s: %w", b.cfg.Kind, b.cfg.Options.Task, err)
		}
	}
	return b.freeze(ctx, checkpointID, backend.KindFile, store, path.Join(dir, b.cfg.Options.Task.Dir()), "canonical-", 0)
}

func (b *Backend) freeze(ctx context.Context, id uint64, kind backend.Kind, store tiered.Store, dir, prefix string, maxSize int64) (backend.PendingSnapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &pending{b: b, id: id, kind: kind, store: store, dir: dir, prefix: prefix, maxSize: maxSize}
	err := b.State.Exclusive(func(states []backend.StateDescriptor) error {
		p.tree = b.tree.Clone()
		p.states = states
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot %d of %s: %w", b.cfg.Kind, id, b.cfg.Options.Task, err)
	}
	p.nowMs = b.cfg.Options.Clock().UnixMilli()
	return p, nil
}

// NotifyCheckpointComplete implements backend.Backend. Full snapshots
// reference no earlier file, so there is nothing to track.
func (b *Backend) NotifyCheckpointComplete(uint64) {}

// NotifyCheckpointAborted implements backend.Backend. The aborted
// snapshot's private file is left to the abort path and the orphan sweep,
// as the PendingSnapshot contract says.
func (b *Backend) NotifyCheckpointAborted(uint64) {}

// Close implements backend.Backend; it is idempotent. Pending snapshots
// keep their frozen clone and may still run.
func (b *Backend) Close() error {
	b.State.Close()
	return nil
}

type pending struct {
	b       *Backend
	id      uint64
	kind    backend.Kind
	store   tiered.Store
	dir     string
	prefix  string
	maxSize int64
	states  []backend.StateDescriptor
	nowMs   int64

	mu   sync.Mutex
	tree *memkv.Tree // nil once Run started or Release was called
	used string      // "run" or "released"
}

// Release implements backend.PendingSnapshot.
func (p *pending) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == "" {
		p.tree, p.used = nil, "released"
	}
}

// Run implements backend.PendingSnapshot.
func (p *pending) Run(ctx context.Context) (*backend.Handle, error) {
	p.mu.Lock()
	tree, used := p.tree, p.used
	if used == "" {
		p.tree, p.used = nil, "run"
	}
	p.mu.Unlock()
	o := p.b.cfg.Options
	if used != "" {
		return nil, fmt.Errorf("%s: snapshot %d of %s: %w: the snapshot was already %s", p.b.cfg.Kind, p.id, o.Task, backend.ErrInvalidArgument, used)
	}
	unique, err := uniqueSuffix()
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot %d of %s: %w", p.b.cfg.Kind, p.id, o.Task, err)
	}
	name := p.dir + "/" + p.prefix + unique
	keep := kvstate.SnapshotFilter(p.states, p.nowMs)
	start, end := kvstate.KeyGroupSpan(o.KeyGroups)
	scan := func(fn func(k, v []byte) error) error {
		return tree.Scan(start, end, func(k, v []byte) (bool, error) {
			if !keep(k, v) {
				return true, nil
			}
			return true, fn(k, v)
		})
	}
	ref, err := snapfmt.Write(ctx, p.store, name, o.KeyGroups, scan, snapfmt.WriteOptions{
		Compression: p.b.cfg.Compression,
		MaxSize:     p.maxSize,
		TempDir:     p.b.cfg.TempDir,
	})
	var tooLarge *snapfmt.TooLargeError
	if errors.As(err, &tooLarge) {
		return nil, fmt.Errorf("%s: snapshot %d of %s: %w: it would be %d bytes, over the %d-byte cap on %s snapshots "+
			"(raise the cap or use the file or lsm backend for this much state)",
			p.b.cfg.Kind, p.id, o.Task, backend.ErrDeclined, tooLarge.Size, tooLarge.Limit, p.b.cfg.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot %d of %s: %w", p.b.cfg.Kind, p.id, o.Task, err)
	}
	h, err := snapfmt.NewHandle(p.kind, o.Task, p.id, o.KeyGroups, o.MaxParallelism, p.states, ref)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.b.cfg.Kind, err)
	}
	return h, nil
}

// uniqueSuffix names a snapshot file. It is random, never derived from the
// checkpoint id, attempt or host, so no two attempts (even after a
// failover that reuses a checkpoint id) ever write the same object.
func uniqueSuffix() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
