package checkpointsim

import (
	"context"
	"fmt"
	"time"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// chanState is the in-flight data of one channel of a task at a
// checkpoint, in order.
type chanState struct {
	id   backend.ChannelID
	kind backend.ChannelKind
	recs []record
}

// snapOptions describe a task's snapshot to the daemon.
type snapOptions struct {
	unaligned             bool
	alignment, startDelay time.Duration
}

// channelStore is the part of the daemon's API the simulator needs for
// checkpoints: channel state written before a task's snapshot of the
// same checkpoint, read back after a restore, and the snapshot.
type channelStore interface {
	// write persists cs as t's channel state of checkpoint id, cut into
	// buffers of perBuffer records.
	write(ctx context.Context, t *task, id uint64, cs []chanState, perBuffer int) error
	// read returns t's restored channel state; rescaled says t's operator
	// changed parallelism (its keyed records were redistributed).
	read(ctx context.Context, t *task, rescaled bool) ([]chanState, error)
	snapshot(ctx context.Context, t *task, id uint64, o snapOptions) error
}

// daemonChannels is the daemon's channel-state API.
type daemonChannels struct{}

func (daemonChannels) write(ctx context.Context, t *task, id uint64, cs []chanState, perBuffer int) error {
	if len(cs) == 0 {
		return nil
	}
	out := make([]client.ChannelState, len(cs))
	for i, c := range cs {
		out[i] = client.ChannelState{Channel: c.id, Kind: c.kind}
		for len(c.recs) > 0 {
			n := min(perBuffer, len(c.recs))
			buf := make([]client.ChannelRecord, n)
			for k, r := range c.recs[:n] {
				buf[k] = client.ChannelRecord{KeyGroup: r.kg, Data: r.encode()}
			}
			out[i].Buffers = append(out[i].Buffers, buf)
			c.recs = c.recs[n:]
		}
	}
	return t.inst.WriteChannelState(ctx, id, out)
}

// read decodes t's restored channel state. The daemon already handed a
// rescaled task the keyed records of its key groups; a record outside
// them would be the daemon's error, and is refused.
func (daemonChannels) read(ctx context.Context, t *task, rescaled bool) ([]chanState, error) {
	in, err := t.inst.ReadChannelState(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]chanState, 0, len(in))
	for _, c := range in {
		cs := chanState{id: c.Channel, kind: c.Kind}
		for _, buf := range c.Buffers {
			for _, cr := range buf {
				r, err := decodeRecord(cr.Data, t.j.o.Keys, t.j.kgs)
				if err != nil {
					return nil, fmt.Errorf("channel %s: %w", c.Channel, err)
				}
				if r.kg != cr.KeyGroup {
					return nil, fmt.Errorf("channel %s: a record of key group %d stored under %d", c.Channel, r.kg, cr.KeyGroup)
				}
				if rescaled && !t.inst.KeyGroups().Contains(int(r.kg)) {
					return nil, fmt.Errorf("channel %s: key group %d is outside %s", c.Channel, r.kg, t.inst.KeyGroups())
				}
				cs.recs = append(cs.recs, r)
			}
		}
		out = append(out, cs)
	}
	return out, nil
}

func (daemonChannels) snapshot(ctx context.Context, t *task, id uint64, o snapOptions) error {
	// Without waiting for the upload: the daemon seals the checkpoint's
	// shared channel state object once every task here has snapshotted,
	// which a task waiting on its own upload would hold back.
	_, err := t.inst.SnapshotWith(ctx, id, client.SnapshotOptions{
		Stats: &client.CheckpointStats{Unaligned: o.unaligned, Alignment: o.alignment, StartDelay: o.startDelay}})
	return err
}

// daemonInFlight is the persisted in-flight data the daemon reports for a
// checkpoint.
func daemonInFlight(info *pb.CheckpointInfo) int64 { return info.GetPersistedInFlightBytes() }

// external is the system the sinks write to (a transactional message
// queue, say): it outlives the job's failures. A transaction is named by
// (sink subtask, checkpoint id) and committing it twice is a no-op.
type external struct {
	txns map[txnID]*txn
}

type txnID struct {
	sink int
	id   uint64 // finalTxn: the output after the last checkpoint
}

const finalTxn = ^uint64(0)

type txn struct {
	results   []record
	committed bool
}

func newExternal() *external { return &external{txns: map[txnID]*txn{}} }

func (e *external) precommit(sink int, id uint64, rs []record) {
	e.txns[txnID{sink, id}] = &txn{results: rs}
}

func (e *external) commit(sink int, id uint64) {
	if x := e.txns[txnID{sink, id}]; x != nil {
		x.committed = true
	}
}

func (e *external) commitFinal(sink int, rs []record) {
	e.txns[txnID{sink, finalTxn}] = &txn{results: rs, committed: true}
}

// recover commits sink's transactions ids and drops its other uncommitted
// ones (of checkpoints that never completed, whose output is recomputed).
func (e *external) recover(sink int, ids []uint64) {
	keep := map[uint64]bool{}
	for _, id := range ids {
		keep[id] = true
		e.commit(sink, id)
	}
	for k, x := range e.txns {
		if k.sink == sink && !x.committed && !keep[k.id] {
			delete(e.txns, k)
		}
	}
}

// Result is one output of the job: the count of a key's records in a
// window.
type Result struct {
	Window int64 `json:"window"`
	Key    int32 `json:"key"`
	Count  int64 `json:"count"`
}

// committed is the committed output as a multiset.
func (e *external) committed() map[Result]int {
	out := map[Result]int{}
	for _, x := range e.txns {
		if x.committed {
			for _, r := range x.results {
				out[Result{Window: r.window, Key: r.key, Count: r.count}]++
			}
		}
	}
	return out
}

func (e *external) String() string { return fmt.Sprintf("%d transactions", len(e.txns)) }
