package checkpointsim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

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

type snapResult struct {
	syncMicros, asyncMicros int64
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
	snapshot(ctx context.Context, t *task, id uint64, o snapOptions) (snapResult, error)
}

// listChannels is the channel state the union operator list
// channel-state holds, until the daemon's channel-state API is there.
// Every subtask gets every element of a union list back: an element names
// its old subtask, and a task keeps its own, or, rescaled, the keyed
// records whose key group it owns.
type listChannels struct{}

const listChannelState = "channel-state"

func (listChannels) write(_ context.Context, t *task, _ uint64, cs []chanState, _ int) error {
	var elems [][]byte
	for _, c := range cs {
		for _, r := range c.recs {
			e := binary.AppendUvarint(nil, uint64(t.idx))
			e = append(e, dirByte(c.id.Direction))
			e = binary.AppendUvarint(e, uint64(c.id.Index))
			elems = append(elems, append(e, r.encode()...))
		}
	}
	// No elements removes the list: a checkpoint without channel state.
	t.inst.SetOperatorList(listChannelState, backend.OperatorUnion, elems...)
	return nil
}

func dirByte(d backend.ChannelDirection) byte {
	if d == backend.ChannelOutput {
		return 1
	}
	return 0
}

var errBadElement = errors.New("checkpointsim: bad channel-state element")

func (listChannels) read(ctx context.Context, t *task, rescaled bool) ([]chanState, error) {
	l, err := t.inst.GetOperatorList(listChannelState).Wait(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[backend.ChannelID]int{}
	var out []chanState
	for _, e := range l.Elements {
		sub, n := binary.Uvarint(e)
		if n <= 0 || len(e) < n+1 {
			return nil, errBadElement
		}
		dir := backend.ChannelInput
		if e[n] == 1 {
			dir = backend.ChannelOutput
		}
		idx, m := binary.Uvarint(e[n+1:])
		if m <= 0 || idx > 1<<20 {
			return nil, errBadElement
		}
		r, err := decodeRecord(e[n+1+m:], t.j.o.Keys, t.j.kgs)
		if err != nil {
			return nil, err
		}
		if rescaled {
			if !t.inst.KeyGroups().Contains(int(r.kg)) {
				continue
			}
		} else if sub != uint64(t.idx) {
			continue
		}
		id := backend.ChannelID{Direction: dir, Index: int32(idx)}
		i, ok := byID[id]
		if !ok {
			i = len(out)
			byID[id] = i
			out = append(out, chanState{id: id, kind: backend.ChannelKeyed})
		}
		out[i].recs = append(out[i].recs, r)
	}
	return out, nil
}

func (listChannels) snapshot(ctx context.Context, t *task, id uint64, _ snapOptions) (snapResult, error) {
	resp, err := t.inst.Snapshot(ctx, id, true)
	if err != nil {
		return snapResult{}, err
	}
	return snapResult{syncMicros: resp.GetSyncMicros(), asyncMicros: resp.GetAsyncMicros()}, nil
}

// daemonInFlight is the persisted in-flight data the daemon reports for a
// checkpoint.
func daemonInFlight(*pb.CheckpointInfo) int64 { return 0 }

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
