package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/chanstate"
)

// ChannelsDir is the directory under Config.DataDir that holds the spool
// files of channel state being written and restored. Like the instances'
// directory, it is cleared when the daemon starts.
const ChannelsDir = "channels"

// ChannelChunk is a channel's next buffers, as a task streams them with
// WriteChannelState.
type ChannelChunk struct {
	Channel backend.ChannelID
	Kind    backend.ChannelKind
	Buffers [][]chanstate.Record
}

// ChannelTotals counts what an instance holds of one checkpoint's channel
// state.
type ChannelTotals struct {
	Channels                int
	Buffers, Records, Bytes int64
}

// SnapshotStats is what the engine reports of how a task took its part of
// a checkpoint; the daemon adds the synchronous and asynchronous parts and
// the handle carries them (backend.TaskStats).
type SnapshotStats struct {
	Unaligned  bool
	Alignment  time.Duration
	StartDelay time.Duration
}

// checkpointChannels is the channel state this daemon writes for one
// checkpoint: one writer shared by every task of the job here, so that
// their in-flight data goes into as few objects as possible.
type checkpointChannels struct {
	w *chanstate.Writer
	// mu orders a task's appends with the recording of their segments
	// and with the snapshot that takes them.
	mu sync.Mutex
	// pending is the channel state of instances that have not snapshotted
	// yet. By instance, not task: a task reopened with replace must not
	// inherit what its dead predecessor wrote.
	pending map[*Instance]map[backend.ChannelID]*backend.ChannelState
	// sealNow is closed when every task of the job here has snapshotted
	// (or a completion waits): the shared object may be uploaded.
	sealNow  chan struct{}
	sealOnce sync.Once
}

func (cc *checkpointChannels) trigger() { cc.sealOnce.Do(func() { close(cc.sealNow) }) }

// channelsLocked returns c's channel state writer, creating it. d.mu is
// held.
func (d *Daemon) channelsLocked(c *checkpoint) (*checkpointChannels, error) {
	if c.chans != nil {
		return c.chans, nil
	}
	w, err := chanstate.NewWriter(chanstate.WriterOptions{
		Store:          d.cfg.Catalog.Store(),
		Dir:            catalog.CheckpointDir(c.key.job, c.key.id),
		Name:           d.chanName,
		MaxObjectBytes: d.cfg.ChannelStateObjectBytes,
		SpoolDir:       filepath.Join(d.cfg.DataDir, ChannelsDir),
	})
	if err != nil {
		return nil, err
	}
	c.chans = &checkpointChannels{w: w, pending: map[*Instance]map[backend.ChannelID]*backend.ChannelState{},
		sealNow: make(chan struct{})}
	return c.chans, nil
}

// checkChunk validates one chunk of inst's channel state.
func checkChunk(inst *Instance, ch ChannelChunk) error {
	if err := ch.Channel.Validate(); err != nil {
		return fmt.Errorf("%w: %v", backend.ErrInvalidArgument, err)
	}
	if _, err := backend.ParseChannelKind(string(ch.Kind)); err != nil {
		return fmt.Errorf("%w: channel %s: %v", backend.ErrInvalidArgument, ch.Channel, err)
	}
	maxPar := inst.MaxParallelism
	for i, buf := range ch.Buffers {
		for j, r := range buf {
			switch {
			case ch.Kind == backend.ChannelKeyed && (r.KeyGroup < 0 || int(r.KeyGroup) >= maxPar):
				return fmt.Errorf("%w: channel %s, buffer %d, record %d: key group %d is outside [0,%d)",
					backend.ErrKeyGroupOutOfRange, ch.Channel, i, j, r.KeyGroup, maxPar)
			case ch.Kind != backend.ChannelKeyed && r.KeyGroup != 0:
				return fmt.Errorf("%w: channel %s (%s), buffer %d, record %d: key group %d on a channel that is not keyed",
					backend.ErrInvalidArgument, ch.Channel, ch.Kind, i, j, r.KeyGroup)
			}
		}
	}
	return nil
}

// WriteChannelState adds chunks to inst's channel state of checkpoint id.
// It must finish before inst snapshots id; the snapshot's handle then
// carries it. It returns what inst holds of id's channel state so far.
func (d *Daemon) WriteChannelState(ctx context.Context, inst *Instance, id uint64, chunks []ChannelChunk) (ChannelTotals, error) {
	task := inst.Task
	fail := func(err error) (ChannelTotals, error) {
		return ChannelTotals{}, fmt.Errorf("daemon: channel state of %s for checkpoint %d: %w", task, id, err)
	}
	if id == 0 {
		return fail(fmt.Errorf("%w: checkpoint id 0 (ids start at 1)", backend.ErrInvalidArgument))
	}
	if err := inst.checkOpen(); err != nil {
		return fail(err)
	}
	for _, ch := range chunks {
		if err := checkChunk(inst, ch); err != nil {
			return fail(err)
		}
	}
	key := ckptKey{task.Job, id}
	d.mu.Lock()
	c, err := d.inProgressLocked(key, task)
	if err == nil && c.tasks[task] != nil {
		err = fmt.Errorf("%w: the task already snapshotted checkpoint %d (write the channel state before the snapshot)", ErrCheckpointFailed, id)
	}
	var cc *checkpointChannels
	if err == nil {
		cc, err = d.channelsLocked(c)
	}
	d.mu.Unlock()
	if err != nil {
		return fail(err)
	}

	cc.mu.Lock()
	defer cc.mu.Unlock()
	mine := cc.pending[inst]
	var size int64
	for _, cs := range mine {
		size += cs.StoredBytes()
	}
	type added struct {
		ch  ChannelChunk
		seg backend.ChannelSegment
	}
	var adds []added
	for _, ch := range chunks {
		if len(ch.Buffers) == 0 {
			continue
		}
		if cs := mine[ch.Channel]; cs != nil && cs.Kind != ch.Kind {
			return fail(fmt.Errorf("%w: channel %s was written as %s, now as %s", backend.ErrInvalidArgument, ch.Channel, cs.Kind, ch.Kind))
		}
		seg, err := cc.w.Append(ctx, task, ch.Channel, ch.Kind, ch.Buffers)
		if err != nil {
			return fail(err)
		}
		size += seg.Length
		if size > d.cfg.MaxChannelStateBytes {
			return fail(fmt.Errorf("%w: more than %d bytes of channel state (Config.MaxChannelStateBytes)", backend.ErrResourceExhausted, d.cfg.MaxChannelStateBytes))
		}
		adds = append(adds, added{ch, seg})
	}
	// The snapshot may have begun while the chunks were appended: then
	// they are not part of it (the segments stay unreferenced in the
	// checkpoint's directory, which goes with the checkpoint).
	d.mu.Lock()
	_, err = d.inProgressLocked(key, task)
	if err == nil && c.tasks[task] != nil {
		err = fmt.Errorf("%w: the task snapshotted checkpoint %d while its channel state was being written", ErrCheckpointFailed, id)
	}
	d.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	if mine == nil {
		mine = map[backend.ChannelID]*backend.ChannelState{}
		cc.pending[inst] = mine
	}
	for _, a := range adds {
		cs := mine[a.ch.Channel]
		if cs == nil {
			cs = &backend.ChannelState{Channel: a.ch.Channel, Kind: a.ch.Kind}
			mine[a.ch.Channel] = cs
		}
		chanstate.AddSegment(cs, a.seg, a.ch.Buffers)
	}
	var t ChannelTotals
	for _, cs := range mine {
		t.Channels++
		t.Buffers += cs.Buffers
		t.Records += cs.Records
		t.Bytes += cs.Bytes
	}
	return t, nil
}

// inProgressLocked returns checkpoint key, registering it when it is new,
// or an error saying why the task cannot take part in it. d.mu is held.
func (d *Daemon) inProgressLocked(key ckptKey, task backend.TaskID) (*checkpoint, error) {
	if d.closing {
		return nil, ErrShuttingDown
	}
	c := d.ckpts[key]
	if c == nil {
		if last := d.lastCompleted[key.job]; key.id <= last {
			// Name the id asked for, and the one it must pass (issue 37:
			// a barrier for 3 after 6 completed named only 6).
			return nil, fmt.Errorf("%w: checkpoint %d of job %s: the job already completed checkpoint %d, and ids must grow: take it with an id above %d",
				ErrCheckpointFailed, key.id, key.job, last, last)
		}
		if err := d.cfg.Catalog.BeginCheckpoint(key.job, key.id); err != nil {
			return nil, err
		}
		c = d.newCheckpointLocked(key)
	}
	if c.status != statusInProgress {
		return nil, fmt.Errorf("%w: checkpoint %d of job %s is %s%s", ErrCheckpointFailed, key.id, key.job, c.status, reasonSuffix(c.reason))
	}
	return c, nil
}

// takeChannels removes and returns inst's channel state of c, sorted by
// channel, once its snapshot has registered (no write can add to it any
// more).
func takeChannels(c *checkpoint, inst *Instance) []backend.ChannelState {
	cc := c.chans
	if cc == nil {
		return nil
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	mine := cc.pending[inst]
	delete(cc.pending, inst)
	out := make([]backend.ChannelState, 0, len(mine))
	for _, cs := range mine {
		out = append(out, *cs)
	}
	slices.SortFunc(out, func(a, b backend.ChannelState) int { return a.Channel.Compare(b.Channel) })
	return out
}

// allSnapshottedLocked reports whether every instance of c's job open in
// this daemon has snapshotted c. d.mu is held.
func (d *Daemon) allSnapshottedLocked(c *checkpoint) bool {
	for t := range d.byTask {
		if t.Job == c.key.job && c.tasks[t] == nil {
			return false
		}
	}
	return true
}

// sealChannels waits until c's shared channel state object may be
// uploaded (every task here snapshotted, a completion is waiting, or the
// linger passed: a task that never snapshots must not hold the others
// back), then makes every segment written so far durable.
func (d *Daemon) sealChannels(c *checkpoint) error {
	cc := c.chans
	t := time.NewTimer(d.cfg.ChannelStateLinger)
	defer t.Stop()
	select {
	case <-cc.sealNow:
	case <-t.C:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return cc.w.Seal(c.ctx)
}

// closeChannels lets go of c's channel state writer (its spool files). The
// uploaded objects stay: they go with the checkpoint's directory.
func (d *Daemon) closeChannels(c *checkpoint) {
	d.mu.Lock()
	cc := c.chans
	d.mu.Unlock()
	if cc == nil {
		return
	}
	if err := cc.w.Close(); err != nil {
		d.log.Warn("closing the channel state writer", "job", c.key.job, "checkpoint", c.key.id, "err", err)
	}
}

// withChannels returns h with the task's channel state and statistics,
// at the handle version that holds them.
func withChannels(h *backend.Handle, chans []backend.ChannelState, st *backend.TaskStats) *backend.Handle {
	if len(chans) == 0 && st == nil {
		return h
	}
	h2 := *h
	h2.Version = max(h2.Version, backend.HandleVersionChannels)
	h2.Channels = chans
	h2.Stats = st
	return &h2
}

// restoreChannels reads and verifies the channel state instance task
// restores from r (or skips it, as the restore asked), into a spool the
// instance streams from with ReadChannelState. nil: there is none.
func (d *Daemon) restoreChannels(ctx context.Context, p OpenParams, r *restorePlan) (*chanstate.Restored, error) {
	id := r.src.Manifest.CheckpointID
	if skip := p.Restore.WithoutChannelState; skip != 0 {
		if skip != id {
			return nil, fmt.Errorf("%w: restore without the channel state of checkpoint %d, but the restore resolved to checkpoint %d of job %s",
				backend.ErrIncompatible, skip, id, r.src.Manifest.Job)
		}
		d.m.ChannelStateSkipped.Add(1)
		d.cfg.Catalog.NoteWithoutChannelState(ctx, r.src.Manifest.Job, id)
		return nil, nil
	}
	sources := r.Handles[:1]
	if r.Rescaled {
		// Any old subtask may hold records of the new range: output
		// subpartitions carry the receiving operator's key groups.
		sources = r.All
	}
	if !slices.ContainsFunc(sources, func(h *backend.Handle) bool { return len(h.Channels) > 0 }) {
		return nil, nil
	}
	sources = slices.Clone(sources)
	slices.SortFunc(sources, func(a, b *backend.Handle) int { return cmp.Compare(a.KeyGroups.Start, b.KeyGroups.Start) })
	rs, err := chanstate.Restore(ctx, chanstate.RestoreOptions{
		Store: r.src.Store, Sources: sources, KeyGroups: p.KeyGroups, MaxParallelism: p.MaxParallelism,
		Rescaled: r.Rescaled, SpoolDir: filepath.Join(d.cfg.DataDir, ChannelsDir),
	})
	if errors.Is(err, chanstate.ErrNotRedistributable) {
		err = fmt.Errorf("%w: %w", backend.ErrIncompatible, err)
	}
	if err != nil {
		return nil, fmt.Errorf("channel state of checkpoint %d of job %s: %w", id, r.src.Manifest.Job, err)
	}
	return rs, nil
}
