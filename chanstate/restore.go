package chanstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// ErrNotRedistributable: a rescaled restore met forward or broadcast
// channel state, which cannot be handed to other subtasks. The daemon maps
// it to FailedPrecondition.
var ErrNotRedistributable = errors.New("chanstate: channel state cannot be redistributed")

// RestoreOptions say what Restore restores.
type RestoreOptions struct {
	// Store holds the channel state objects. Required.
	Store tiered.Store
	// Sources are the handles to restore from: exactly one without a
	// rescale, the old subtasks' handles (any order) with one. Required.
	Sources []*backend.Handle
	// KeyGroups is the restoring task's key-group range. Used only when
	// Rescaled.
	KeyGroups backend.KeyGroupRange
	// MaxParallelism is the job's number of key groups; every source must
	// have it. Required.
	MaxParallelism int
	// Rescaled says the parallelism changed: keyed channels are filtered to
	// KeyGroups and merged, and any forward or broadcast data is refused.
	Rescaled bool
	// SpoolDir is the local directory of the spool file. Default
	// os.TempDir().
	SpoolDir string
}

// EnsureDefaults fills zero fields with their defaults.
func (o *RestoreOptions) EnsureDefaults() {
	if o.SpoolDir == "" {
		o.SpoolDir = os.TempDir()
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *RestoreOptions) Validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, fmt.Errorf("%w: no store", backend.ErrInvalidArgument))
	}
	if err := backend.ValidateMaxParallelism(o.MaxParallelism); err != nil {
		errs = append(errs, err)
	}
	switch {
	case len(o.Sources) == 0:
		errs = append(errs, fmt.Errorf("%w: no source handle", backend.ErrInvalidArgument))
	case !o.Rescaled && len(o.Sources) != 1:
		errs = append(errs, fmt.Errorf("%w: %d source handles without a rescale (want 1)", backend.ErrInvalidArgument, len(o.Sources)))
	}
	if o.Rescaled {
		if err := o.KeyGroups.Validate(o.MaxParallelism); err != nil {
			errs = append(errs, err)
		}
	}
	for i, h := range o.Sources {
		if h == nil {
			errs = append(errs, fmt.Errorf("%w: source %d is nil", backend.ErrInvalidArgument, i))
			continue
		}
		if err := h.Validate(); err != nil {
			errs = append(errs, err)
		} else if h.MaxParallelism != o.MaxParallelism {
			errs = append(errs, fmt.Errorf("%w: handle of %s has maxParallelism %d, the restore %d",
				backend.ErrIncompatible, h.Task, h.MaxParallelism, o.MaxParallelism))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("chanstate: restore: %w", errors.Join(errs...))
	}
	return nil
}

// RestoredChannel describes one restored channel.
type RestoredChannel struct {
	Channel backend.ChannelID
	Kind    backend.ChannelKind
	// Buffers, Records and Bytes count what Read streams.
	Buffers, Records, Bytes int64
}

// extent is one segment's worth of selected buffers in the spool file,
// re-encoded as a segment (so reading it back is checked too).
type extent struct{ off, n int64 }

// Restored is the channel state a task restores, verified and spooled to a
// local file. Channels and Read are safe for concurrent use; Close is
// idempotent and must not run concurrently with Read.
type Restored struct {
	maxParallelism int
	channels       []RestoredChannel
	extents        [][]extent

	mu sync.Mutex
	f  *os.File
}

// Restore reads, verifies and selects the channel state of o.Sources (see
// the package doc for the rules), into a spool file in o.SpoolDir. Damage
// (missing object, short read, checksum, format, counts that disagree with
// the handle) is an error wrapping backend.ErrCorrupt; forward or broadcast
// data in a rescale is ErrNotRedistributable. The caller closes the result.
func Restore(ctx context.Context, o RestoreOptions) (*Restored, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sources := slices.Clone(o.Sources)
	// The old subtasks' order is their key groups' (validated disjoint),
	// not their subtask fields': a wrong subtask field must not reorder
	// the merged records.
	slices.SortStableFunc(sources, func(a, b *backend.Handle) int { return cmp.Compare(a.KeyGroups.Start, b.KeyGroups.Start) })

	// Check everything a handle alone says before any I/O: refusals come
	// first and cheap.
	index := map[backend.ChannelID]int{}
	var ids []RestoredChannel
	for _, h := range sources {
		for _, cs := range h.Channels {
			if o.Rescaled && cs.Kind != backend.ChannelKeyed {
				// Any segment counts as data, even one the counts call
				// empty: refusing is safe, dropping might lose records.
				if len(cs.Segments) > 0 {
					return nil, fmt.Errorf("%w: task %s channel %s is %s (%d records); only keyed channel state can be rescaled",
						ErrNotRedistributable, h.Task, cs.Channel, cs.Kind, cs.Records)
				}
				continue
			}
			if i, ok := index[cs.Channel]; ok {
				if ids[i].Kind != cs.Kind {
					return nil, fmt.Errorf("chanstate: %w: channel %s is %s in one source and %s in %s",
						backend.ErrIncompatible, cs.Channel, ids[i].Kind, cs.Kind, h.Task)
				}
				continue
			}
			index[cs.Channel] = len(ids)
			ids = append(ids, RestoredChannel{Channel: cs.Channel, Kind: cs.Kind})
		}
	}
	slices.SortFunc(ids, func(a, b RestoredChannel) int { return a.Channel.Compare(b.Channel) })
	for i, c := range ids {
		index[c.Channel] = i
	}

	f, err := os.CreateTemp(o.SpoolDir, "chanstate-restore-*.spool")
	if err != nil {
		return nil, fmt.Errorf("chanstate: restore spool: %w", err)
	}
	r := &Restored{maxParallelism: o.MaxParallelism, channels: ids, extents: make([][]extent, len(ids)), f: f}
	if err := r.fill(ctx, o, sources, index); err != nil {
		_ = r.Close()
		return nil, err
	}
	if o.Rescaled {
		r.dropEmpty()
	}
	return r, nil
}

func (r *Restored) fill(ctx context.Context, o RestoreOptions, sources []*backend.Handle, index map[backend.ChannelID]int) error {
	var off int64
	for _, h := range sources {
		for _, cs := range h.Channels {
			i, ok := index[cs.Channel]
			if !ok {
				continue // an empty forward or broadcast channel of a rescale
			}
			rc := &r.channels[i]
			got, err := readChannel(ctx, o.Store, cs, o.MaxParallelism, func(buffers [][]Record) error {
				if o.Rescaled {
					buffers = selectKeyGroups(buffers, o.KeyGroups)
				}
				if len(buffers) == 0 {
					return nil
				}
				seg := EncodeSegment(buffers)
				if _, err := r.f.Write(seg); err != nil {
					return fmt.Errorf("chanstate: restore spool %s: %w", r.f.Name(), err)
				}
				r.extents[i] = append(r.extents[i], extent{off, int64(len(seg))})
				off += int64(len(seg))
				nb, nr, nbytes := Counts(buffers)
				rc.Buffers += nb
				rc.Records += nr
				rc.Bytes += nbytes
				return nil
			})
			if err != nil {
				return fmt.Errorf("chanstate: restore %s: %w", h.Task, err)
			}
			// Pair check: what was read is what the handle says was written
			// (a segment dropped from the handle shows here).
			if got.Buffers != cs.Buffers || got.Records != cs.Records || got.Bytes != cs.Bytes {
				return fmt.Errorf("%w: chanstate: restore %s channel %s: handle counts %d buffers %d records %d bytes, segments hold %d, %d, %d",
					backend.ErrCorrupt, h.Task, cs.Channel, cs.Buffers, cs.Records, cs.Bytes, got.Buffers, got.Records, got.Bytes)
			}
		}
	}
	return nil
}

// selectKeyGroups keeps the records of buffers whose key group lies in kg,
// dropping buffers left empty. It reuses buffers' backing arrays.
func selectKeyGroups(buffers [][]Record, kg backend.KeyGroupRange) [][]Record {
	out := buffers[:0]
	for _, b := range buffers {
		kept := b[:0]
		for _, rec := range b {
			if kg.Contains(int(rec.KeyGroup)) {
				kept = append(kept, rec)
			}
		}
		if len(kept) > 0 {
			out = append(out, kept)
		}
	}
	return out
}

// dropEmpty removes the channels a rescale left without buffers.
func (r *Restored) dropEmpty() {
	chans, exts := r.channels[:0], r.extents[:0]
	for i, c := range r.channels {
		if c.Buffers > 0 {
			chans = append(chans, c)
			exts = append(exts, r.extents[i])
		}
	}
	r.channels, r.extents = chans, exts
}

// Channels returns the restored channels, sorted by channel id.
func (r *Restored) Channels() []RestoredChannel { return slices.Clone(r.channels) }

// Read calls fn for each buffer of channel i (an index into Channels), in
// order, reading one segment at a time from the spool. fn may keep the
// buffers; its error is returned unchanged.
func (r *Restored) Read(i int, fn func(buffer []Record) error) error {
	if i < 0 || i >= len(r.channels) {
		return fmt.Errorf("chanstate: %w: channel index %d of %d", backend.ErrInvalidArgument, i, len(r.channels))
	}
	c := r.channels[i]
	for _, e := range r.extents[i] {
		r.mu.Lock()
		f := r.f
		r.mu.Unlock()
		if f == nil {
			return fmt.Errorf("chanstate: read channel %s: restored state closed", c.Channel)
		}
		buf := make([]byte, e.n)
		if _, err := f.ReadAt(buf, e.off); err != nil {
			return fmt.Errorf("chanstate: read channel %s: spool %s [%d,+%d): %w", c.Channel, f.Name(), e.off, e.n, err)
		}
		buffers, err := DecodeSegment(buf, c.Kind, r.maxParallelism)
		if err != nil {
			return fmt.Errorf("chanstate: read channel %s: spool %s [%d,+%d): %w", c.Channel, f.Name(), e.off, e.n, err)
		}
		for _, b := range buffers {
			if err := fn(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close removes the spool file. It is idempotent.
func (r *Restored) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	name := r.f.Name()
	err := errors.Join(r.f.Close(), os.Remove(name))
	r.f = nil
	if err != nil {
		return fmt.Errorf("chanstate: close restore spool: %w", err)
	}
	return nil
}
