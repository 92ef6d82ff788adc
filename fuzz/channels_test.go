package fuzz

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/daemon"
)

// The channel state model: what each old subtask's unaligned checkpoint
// holds of in-flight data. Checkpoint 1 has a keyed input channel and a
// keyed output subpartition on both subtasks, plus a broadcast output on
// subtask 0 and a forward input on subtask 1, so that its rescales must
// be refused; later checkpoints have the keyed channels only, so that
// their rescales redistribute records by key group.

// chanModel is one channel's buffers in order.
type chanModel struct {
	id      backend.ChannelID
	kind    backend.ChannelKind
	buffers [][]chanstate.Record
}

func inCh(gate, index int32) backend.ChannelID {
	return backend.ChannelID{Direction: backend.ChannelInput, Gate: gate, Index: index}
}

func outCh(gate, index int32) backend.ChannelID {
	return backend.ChannelID{Direction: backend.ChannelOutput, Gate: gate, Index: index}
}

// chanRecord is a record whose bytes say where it belongs, so that a
// record restored into the wrong channel, buffer or order differs.
func chanRecord(ckpt, sub int, ch backend.ChannelID, buf, i, kg int) chanstate.Record {
	return chanstate.Record{KeyGroup: int32(kg), Data: fmt.Appendf(nil, "c%d s%d %s b%d r%d", ckpt, sub, ch, buf, i)}
}

// channelsAt is old subtask sub's channel state at checkpoint ckpt, sorted
// by channel id (as the handle and Restored.Channels are).
func channelsAt(ckpt, sub int) []chanModel {
	kg := backend.KeyGroupRangeForOperator(maxPar, oldPar, sub)
	var out []chanModel
	// Input channel 0/0 (keyed): records of the task's own key groups.
	in := chanModel{id: inCh(0, 0), kind: backend.ChannelKeyed}
	for b := range 3 {
		var buf []chanstate.Record
		for g := kg.Start; g <= kg.End; g++ {
			if (g+b+ckpt)%3 != 0 {
				buf = append(buf, chanRecord(ckpt, sub, in.id, b, len(buf), g))
			}
		}
		in.buffers = append(in.buffers, buf)
	}
	out = append(out, in)
	if ckpt == 1 && sub == 1 {
		fw := chanModel{id: inCh(1, 0), kind: backend.ChannelForward}
		for b := range 2 {
			fw.buffers = append(fw.buffers, []chanstate.Record{chanRecord(ckpt, sub, fw.id, b, 0, 0), chanRecord(ckpt, sub, fw.id, b, 1, 0)})
		}
		out = append(out, fw)
	}
	// Output subpartition 0/1 (keyed): the receiving operator's key
	// groups, any of them, so that every old subtask feeds every new one.
	o := chanModel{id: outCh(0, 1), kind: backend.ChannelKeyed}
	for b := range 4 {
		var buf []chanstate.Record
		for r := range 3 {
			buf = append(buf, chanRecord(ckpt, sub, o.id, b, r, (b*3+r+sub+ckpt)%maxPar))
		}
		o.buffers = append(o.buffers, buf)
	}
	out = append(out, o)
	if ckpt == 1 && sub == 0 {
		bc := chanModel{id: outCh(1, 0), kind: backend.ChannelBroadcast}
		bc.buffers = [][]chanstate.Record{{chanRecord(ckpt, sub, bc.id, 0, 0, 0)}, {chanRecord(ckpt, sub, bc.id, 1, 0, 0)}}
		out = append(out, bc)
	}
	return out
}

// writeChannels writes sub's channel state of checkpoint ckpt through the
// daemon, each channel in two pieces (two calls), so that channels have
// several segments and the tasks' segments interleave in the object.
func writeChannels(ctx context.Context, d *daemon.Daemon, in *daemon.Instance, ckpt, piece int) error {
	var chunks []daemon.ChannelChunk
	for _, c := range channelsAt(ckpt, in.Task.Subtask) {
		half := (len(c.buffers) + 1) / 2
		bufs := c.buffers[:half]
		if piece == 1 {
			bufs = c.buffers[half:]
		}
		if len(bufs) > 0 {
			chunks = append(chunks, daemon.ChannelChunk{Channel: c.id, Kind: c.kind, Buffers: bufs})
		}
	}
	_, err := d.WriteChannelState(ctx, in, uint64(ckpt), chunks)
	return err
}

// snapshotStats is what the fixture's tasks report of an unaligned
// checkpoint.
var snapshotStats = &daemon.SnapshotStats{Unaligned: true, Alignment: 3 * time.Millisecond, StartDelay: 7 * time.Millisecond}

// errRefusalExpected says a restore must be refused as not redistributable.
var errRefusalExpected = errors.New("forward or broadcast channel state in a rescale")

// wantChannels is the channel state a restore of checkpoint ckpt (0: none,
// a savepoint) into subtask sub of parallelism par holds: the subtask's
// own at the old parallelism; after a rescale the keyed channels of every
// old subtask, merged per channel in old subtask order and filtered to the
// new key-group range (empty buffers and channels dropped), or
// errRefusalExpected when any old subtask has forward or broadcast data.
func wantChannels(ckpt, sub, par int) ([]chanModel, error) {
	return wantChannelsFrom(ckpt, oldPar, sub, par)
}

// wantChannelsFrom is wantChannels for a checkpoint written by written
// subtasks (0, ..., written-1), each with channelsAt(ckpt, subtask).
func wantChannelsFrom(ckpt, written, sub, par int) ([]chanModel, error) {
	if ckpt == 0 {
		return nil, nil
	}
	if par == written {
		return channelsAt(ckpt, sub), nil
	}
	kg := backend.KeyGroupRangeForOperator(maxPar, par, sub)
	var out []chanModel
	index := map[backend.ChannelID]int{}
	for old := range written {
		for _, c := range channelsAt(ckpt, old) {
			if c.kind != backend.ChannelKeyed {
				return nil, errRefusalExpected
			}
			i, ok := index[c.id]
			if !ok {
				i = len(out)
				index[c.id] = i
				out = append(out, chanModel{id: c.id, kind: c.kind})
			}
			for _, b := range c.buffers {
				var kept []chanstate.Record
				for _, r := range b {
					if kg.Contains(int(r.KeyGroup)) {
						kept = append(kept, r)
					}
				}
				if len(kept) > 0 {
					out[i].buffers = append(out[i].buffers, kept)
				}
			}
		}
	}
	var nonEmpty []chanModel
	for _, c := range out {
		if len(c.buffers) > 0 {
			nonEmpty = append(nonEmpty, c)
		}
	}
	// Sorted by id: channelsAt is, and the merge keeps first-seen order,
	// which may not be.
	for i := 1; i < len(nonEmpty); i++ {
		for j := i; j > 0 && nonEmpty[j].id.Compare(nonEmpty[j-1].id) < 0; j-- {
			nonEmpty[j], nonEmpty[j-1] = nonEmpty[j-1], nonEmpty[j]
		}
	}
	return nonEmpty, nil
}

// checkChannels compares what r (nil: nothing restored) holds with want,
// channel by channel, buffer by buffer, record by record.
func checkChannels(r *chanstate.Restored, want []chanModel) error {
	if r == nil {
		if len(want) > 0 {
			return fmt.Errorf("no channel state restored, model has %d channels", len(want))
		}
		return nil
	}
	got := r.Channels()
	if len(got) != len(want) {
		return fmt.Errorf("%d channels restored, model %d", len(got), len(want))
	}
	for i, c := range got {
		w := want[i]
		if c.Channel != w.id || c.Kind != w.kind {
			return fmt.Errorf("channel %d: %s (%s), model %s (%s)", i, c.Channel, c.Kind, w.id, w.kind)
		}
		nb, nr, nbytes := chanstate.Counts(w.buffers)
		if c.Buffers != nb || c.Records != nr || c.Bytes != nbytes {
			return fmt.Errorf("channel %s: counts %d/%d/%d, model %d/%d/%d", c.Channel, c.Buffers, c.Records, c.Bytes, nb, nr, nbytes)
		}
		var bufs [][]chanstate.Record
		if err := r.Read(i, func(b []chanstate.Record) error { bufs = append(bufs, b); return nil }); err != nil {
			return fmt.Errorf("read channel %s: %w", c.Channel, err)
		}
		if len(bufs) != len(w.buffers) {
			return fmt.Errorf("channel %s: %d buffers read, model %d", c.Channel, len(bufs), len(w.buffers))
		}
		for b := range bufs {
			if len(bufs[b]) != len(w.buffers[b]) {
				return fmt.Errorf("channel %s buffer %d: %d records, model %d", c.Channel, b, len(bufs[b]), len(w.buffers[b]))
			}
			for j, rec := range bufs[b] {
				if m := w.buffers[b][j]; rec.KeyGroup != m.KeyGroup || !bytes.Equal(rec.Data, m.Data) {
					return fmt.Errorf("channel %s buffer %d record %d: %d %q, model %d %q", c.Channel, b, j, rec.KeyGroup, rec.Data, m.KeyGroup, m.Data)
				}
			}
		}
	}
	return nil
}

// isChannelObject reports whether name is a channel state object.
func isChannelObject(name string) bool {
	_, base, _ := strings.Cut(name, "/chk-")
	_, base, _ = strings.Cut(base, "/")
	return strings.HasPrefix(base, "channels-")
}
