package checkpointsim

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// Names of the simulated operators, their states and operator lists.
const (
	opSource     = "source"
	opWindow     = "window"
	opSink       = "sink"
	stateCount   = "count" // window: aggregate (sum) per (key, window)
	stateFire    = "fire"  // window: a timer per (key, window) at its end
	listOffset   = "offset"
	listPending  = "pending-txns"
	debloatEvery = 50_000 // µs of simulated time between debloat updates
	inf          = math.MaxInt64
)

type taskKind int

const (
	kindSource taskKind = iota
	kindWindow
	kindSink
)

// task is one simulated subtask and its real daemon instance.
type task struct {
	j       *job
	kind    taskKind
	idx     int
	inst    *client.Instance
	inputs  []*channel // by input channel index
	outputs []*channel // by subpartition index

	scheduled bool // a step is in the event queue
	running   bool // in step: it reschedules itself if it must
	rr        int
	replay    []record // restored input channel state, processed first
	pending   []record // window results not yet in an output queue
	eoiIn     bool     // every input ended
	eoiOut    bool     // the end of input went to every output
	processed int64
	lastCount int64

	// source
	next int64
	done bool
	// window
	wm     []int64
	fired  int64 // windows below this index have fired
	timers map[timerKey]bool
	// sink: the open transaction and the pre-committed ones
	txn         []record
	pendingTxns []uint64

	cp *taskCheckpoint
}

type timerKey struct {
	key    int32
	window int64
}

// taskCheckpoint is a task's progress in the checkpoint in flight.
type taskCheckpoint struct {
	id      uint64
	firstAt int64 // first barrier
	got     []bool
	ngot    int
}

// checkpoint is the coordinator's view of the checkpoint in flight.
type checkpoint struct {
	id      uint64
	trigger int64
	acks    int
	acked   map[*task]bool
	stats   CheckpointStats
}

// job is one simulated run of source -> keyBy -> window -> sink.
type job struct {
	ctx       context.Context
	o         Options
	mode      Mode
	debloat   bool
	name      string
	c         *client.Client
	chans     channelStore
	ext       *external
	clk       clock
	windowPar int

	sources, windows, sinks []*task
	all                     []*task // in topological order
	keyNames                [][]byte
	kgs                     []int32
	srcGap                  int64 // µs between two records of a source

	nextID    uint64
	cur       *checkpoint
	stats     []CheckpointStats
	completed int
	noTrigger bool // a source ended: no more checkpoints
	sinksDone int
	stopped   bool
	err       error
}

// jobSpec says how to start a job.
type jobSpec struct {
	name      string
	mode      Mode
	debloat   bool
	windowPar int    // parallelism of the window operator
	restore   uint64 // checkpoint to restore from; 0: a fresh start
	firstID   uint64 // id of the first checkpoint it triggers
}

func (t *task) String() string {
	return fmt.Sprintf("%s %d", [...]string{opSource, opWindow, opSink}[t.kind], t.idx)
}

// startJob opens every task's instance (restoring them when asked) and
// schedules the sources and the first checkpoint.
func startJob(ctx context.Context, c *client.Client, chans channelStore, ext *external, o Options, s jobSpec) (*job, error) {
	j := &job{ctx: ctx, o: o, mode: s.mode, debloat: s.debloat, name: s.name, c: c, chans: chans, ext: ext,
		windowPar: s.windowPar, nextID: max(s.firstID, 1)}
	j.srcGap = max(1, int64(math.Round(1e6/o.SourceRate)))
	p := o.Parallelism
	mk := func(kind taskKind, n int) []*task {
		ts := make([]*task, n)
		for i := range ts {
			ts[i] = &task{j: j, kind: kind, idx: i}
		}
		return ts
	}
	j.sources, j.windows, j.sinks = mk(kindSource, p), mk(kindWindow, s.windowPar), mk(kindSink, p)
	j.all = slices.Concat(j.sources, j.windows, j.sinks)
	capacity := o.Buffers * o.RecordsPerBuffer
	connect := func(from, to []*task) {
		for _, a := range from {
			for _, b := range to {
				ch := &channel{from: a, to: b, outIdx: b.idx, inIdx: a.idx, capOut: capacity, capIn: capacity, maxCap: capacity}
				a.outputs = append(a.outputs, ch)
				b.inputs = append(b.inputs, ch)
			}
		}
	}
	connect(j.sources, j.windows)
	connect(j.windows, j.sinks)
	for _, t := range j.windows {
		t.wm = make([]int64, len(t.inputs))
		for i := range t.wm {
			t.wm[i] = -1
		}
		t.timers = map[timerKey]bool{}
	}
	if err := j.open(s.restore); err != nil {
		j.abandon()
		return nil, err
	}
	j.keyNames = make([][]byte, o.Keys)
	j.kgs = make([]int32, o.Keys)
	for k := range j.keyNames {
		j.keyNames[k] = []byte(fmt.Sprintf("k%07d", k))
		j.kgs[k] = int32(j.windows[0].inst.KeyGroup(j.keyNames[k]))
	}
	if s.restore > 0 {
		if err := j.restore(s.windowPar != o.Parallelism); err != nil {
			j.abandon()
			return nil, err
		}
	}
	for _, t := range j.all {
		j.wake(t)
	}
	j.clk.at(o.Interval.Microseconds(), j.trigger)
	if j.debloat {
		j.clk.at(debloatEvery, j.debloatTick)
	}
	return j, nil
}

func (j *job) open(restore uint64) error {
	for _, t := range j.all {
		spec := client.OpenSpec{
			Task:           backend.TaskID{Job: j.name, Operator: []string{opSource, opWindow, opSink}[t.kind], Subtask: t.idx},
			MaxParallelism: j.o.MaxParallelism,
			Parallelism:    j.o.Parallelism,
			Backend:        j.o.Backend,
			Replace:        true,
		}
		if t.kind == kindWindow {
			spec.Parallelism = j.windowPar
			spec.States = []backend.StateDescriptor{
				{Name: stateCount, Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
				{Name: stateFire, Kind: backend.KindTimers},
			}
		}
		if restore > 0 {
			spec.Restore = &client.Restore{CheckpointID: restore, Claim: true}
		}
		in, err := j.c.Open(j.ctx, spec)
		if err != nil {
			return fmt.Errorf("checkpointsim: open %s of %s: %w", t, j.name, err)
		}
		t.inst = in
	}
	return nil
}

// restore reads back what each task persisted: source offsets, sinks'
// pre-committed transactions, and the channel state, which goes back
// into the queues it came from (re-partitioned for the current
// parallelism) or, for input channels, into the records replayed first.
func (j *job) restore(rescaled bool) error {
	for _, t := range j.all {
		cs, err := j.chans.read(j.ctx, t, rescaled && t.kind == kindWindow)
		if err != nil {
			return fmt.Errorf("checkpointsim: channel state of %s: %w", t, err)
		}
		var outRecs []record
		for _, c := range cs {
			if c.id.Direction == backend.ChannelInput {
				t.replay = append(t.replay, c.recs...)
			} else {
				outRecs = append(outRecs, c.recs...)
			}
		}
		// A channel's records stay in sequence order per source, which the
		// windows' watermarks rely on.
		slices.SortStableFunc(outRecs, func(a, b record) int {
			if a.src != b.src {
				return int(a.src - b.src)
			}
			return int(a.seq - b.seq)
		})
		for _, r := range outRecs {
			ch := t.outputs[j.route(t, r)]
			ch.out = append(ch.out, elem{rec: r})
			ch.nOut++
		}
		switch t.kind {
		case kindSource:
			l, err := t.inst.GetOperatorList(listOffset).Wait(j.ctx)
			if err != nil {
				return fmt.Errorf("checkpointsim: offset of %s: %w", t, err)
			}
			if len(l.Elements) != 1 {
				return fmt.Errorf("checkpointsim: %s restored %d offsets, want 1", t, len(l.Elements))
			}
			v, n := binary.Uvarint(l.Elements[0])
			if n <= 0 || v > 1<<62 {
				return fmt.Errorf("checkpointsim: offset of %s: bad encoding", t)
			}
			t.next = int64(v)
		case kindSink:
			l, err := t.inst.GetOperatorList(listPending).Wait(j.ctx)
			if err != nil {
				return fmt.Errorf("checkpointsim: transactions of %s: %w", t, err)
			}
			var ids []uint64
			for _, e := range l.Elements {
				v, n := binary.Uvarint(e)
				if n <= 0 {
					return fmt.Errorf("checkpointsim: transactions of %s: bad encoding", t)
				}
				ids = append(ids, v)
			}
			// Recover-and-commit: the restored checkpoint completed, so
			// its pre-committed transactions are committed (idempotent);
			// transactions of checkpoints that never completed are gone.
			j.ext.recover(t.idx, ids)
		}
	}
	for _, t := range j.all {
		for _, ch := range t.outputs {
			j.move(ch)
		}
	}
	return nil
}

// route is the output subpartition of r at t: keyBy on both connections.
func (j *job) route(t *task, r record) int {
	return backend.OperatorForKeyGroup(j.o.MaxParallelism, len(t.outputs), int(r.kg))
}

// sourceRecord is record seq of source src: its key is a pure function of
// (seed, src, seq).
func (j *job) sourceRecord(src int, seq int64) record {
	k := int32(splitmix64(j.o.Seed^uint64(src)<<48^uint64(seq)) % uint64(j.o.Keys))
	return record{src: int32(src), seq: seq, key: k, kg: j.kgs[k], window: -1}
}

func (j *job) fail(err error) {
	if j.err == nil {
		j.err = err
	}
	j.stopped = true
}

// run runs events up to simulated time until (µs) or until the job stops.
func (j *job) run(until int64) error {
	for n := 0; !j.stopped && j.err == nil && j.clk.next(until); n++ {
		// Most events call the daemon without waiting: look at the
		// context now and then, so that an interrupt stops the run.
		if n%4096 == 0 && j.ctx.Err() != nil {
			j.fail(fmt.Errorf("checkpointsim: %s: %w", j.name, j.ctx.Err()))
		}
	}
	if j.err == nil {
		for _, t := range j.all {
			if err := t.inst.Err(); err != nil {
				j.fail(fmt.Errorf("checkpointsim: %s: %w", t, err))
				break
			}
		}
	}
	return j.err
}

// abandon stops the job as a crash would: the instances stay in the
// daemon (a restart replaces them) and everything in memory is lost.
func (j *job) abandon() {
	for _, t := range j.all {
		if t.inst != nil {
			t.inst.Abandon()
		}
	}
	j.stopped = true
}

// close closes the instances.
func (j *job) close() error {
	var first error
	for _, t := range j.all {
		if t.inst != nil {
			if err := t.inst.Close(j.ctx); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (j *job) wake(t *task) {
	if !t.scheduled && !t.running {
		t.scheduled = true
		j.clk.at(j.clk.now, t.step)
	}
}

func (t *task) after(cost int64) {
	t.scheduled = true
	t.j.clk.at(t.j.clk.now+cost, t.step)
}

// push appends e to c's output queue and moves what fits to its input.
func (j *job) push(c *channel, e elem) {
	c.out = append(c.out, e)
	if e.isRecord() {
		c.nOut++
	}
	j.move(c)
}

// move transfers records from c's output to its input queue while the
// input has credit; barriers and the end of input need none.
func (j *job) move(c *channel) {
	moved := false
	for len(c.out) > 0 {
		e := c.out[0]
		if e.isRecord() {
			if c.nIn >= c.capIn {
				break
			}
			c.nIn++
			c.nOut--
		}
		c.out = c.out[1:]
		c.in = append(c.in, e)
		moved = true
	}
	if moved {
		j.wake(c.to)
		j.wake(c.from)
	}
}

func (j *job) pop(c *channel) elem {
	e := c.in[0]
	c.in = c.in[1:]
	if e.isRecord() {
		c.nIn--
	}
	j.move(c)
	return e
}

func (t *task) step() {
	t.scheduled = false
	t.running = true
	defer func() { t.running = false }()
	j := t.j
	if j.stopped {
		return
	}
	if t.kind == kindSource {
		t.stepSource()
		return
	}
	for len(t.pending) > 0 {
		r := t.pending[0]
		c := t.outputs[j.route(t, r)]
		if !c.room() {
			return // move wakes t when there is room
		}
		t.pending = t.pending[1:]
		j.push(c, elem{rec: r})
	}
	if t.eoiIn && !t.eoiOut {
		t.eoiOut = true
		for _, c := range t.outputs {
			j.push(c, elem{eoi: true})
		}
	}
	cost := j.o.WindowCost.Microseconds()
	if t.kind == kindSink {
		cost = j.o.SinkCost.Microseconds()
	}
	if len(t.replay) > 0 {
		r := t.replay[0]
		t.replay = t.replay[1:]
		t.process(r, -1)
		t.after(cost)
		return
	}
	for k := range t.inputs {
		i := (t.rr + k) % len(t.inputs)
		c := t.inputs[i]
		if len(c.in) == 0 || t.cp != nil && t.cp.got[i] {
			continue // empty, or blocked by an aligned barrier
		}
		t.rr = i + 1
		e := j.pop(c)
		switch {
		case e.eoi:
			t.endOfInput(i)
			t.after(0)
		case e.barrier != 0:
			t.alignedBarrier(i, e.barrier)
			t.after(0)
		default:
			t.process(e.rec, i)
			t.after(cost)
		}
		return
	}
}

func (t *task) stepSource() {
	j := t.j
	if t.done {
		return
	}
	if j.o.Records > 0 && t.next >= j.o.Records {
		t.done = true
		j.noTrigger = true
		for _, c := range t.outputs {
			j.push(c, elem{eoi: true})
		}
		return
	}
	r := j.sourceRecord(t.idx, t.next)
	c := t.outputs[j.route(t, r)]
	if !c.room() {
		return // back-pressured: move wakes t
	}
	t.next++
	t.processed++
	j.push(c, elem{rec: r})
	t.after(j.srcGap)
}

// process handles a record at a window or sink; input is the input
// channel it came from, -1 for a replayed one (restored channel state),
// which does not move the watermark: records of the same sources still
// in channels may be older.
func (t *task) process(r record, input int) {
	j := t.j
	t.processed++
	if t.kind == kindSink {
		t.txn = append(t.txn, r)
		return
	}
	key := j.keyNames[r.key]
	w := r.seq / j.o.Window
	ns := binary.BigEndian.AppendUint64(nil, uint64(w))
	t.inst.AggregateAdd(stateCount, key, ns, backend.Int64(1))
	if tk := (timerKey{r.key, w}); !t.timers[tk] {
		t.timers[tk] = true
		t.inst.RegisterTimer(stateFire, key, ns, (w+1)*j.o.Window-1)
	}
	if input >= 0 && r.seq > t.wm[input] {
		t.wm[input] = r.seq
		t.maybeFire()
	}
}

func (t *task) endOfInput(i int) {
	t.inputs[i].eoi = true
	if t.kind == kindWindow {
		t.wm[i] = inf
		t.maybeFire()
	}
	for _, c := range t.inputs {
		if !c.eoi {
			return
		}
	}
	t.eoiIn = true
	if t.kind == kindSink {
		// Flink's final checkpoint: at the end of input the sink commits
		// its last transaction.
		t.j.ext.commitFinal(t.idx, t.txn)
		t.txn = nil
		t.j.sinksDone++
		if t.j.sinksDone == len(t.j.sinks) {
			t.j.stopped = true
		}
	}
}

// maybeFire fires the windows the watermark (the minimum over the input
// channels of the largest timestamp seen) has passed: it polls their
// timers from the daemon, reads and clears their counts, and queues the
// results for the sink.
func (t *task) maybeFire() {
	j := t.j
	wm := slices.Min(t.wm)
	if wm < 0 {
		return
	}
	upTo := int64(inf)
	if wm != inf {
		upTo = (wm + 1) / j.o.Window
		if upTo <= t.fired {
			return
		}
	}
	t.fired = upTo
	for {
		timers, err := t.inst.PollTimers(stateFire, wm, 0).Wait(j.ctx)
		if err != nil {
			j.fail(fmt.Errorf("checkpointsim: %s: poll timers: %w", t, err))
			return
		}
		if len(timers) == 0 {
			return
		}
		futs := make([]client.Future[client.Aggregate], len(timers))
		for i, tm := range timers {
			futs[i] = t.inst.AggregateGet(stateCount, tm.Key, tm.Namespace)
		}
		for i, tm := range timers {
			a, err := futs[i].Wait(j.ctx)
			if err != nil {
				j.fail(fmt.Errorf("checkpointsim: %s: read count: %w", t, err))
				return
			}
			k, err := keyIndex(tm.Key)
			if err != nil || len(tm.Namespace) != 8 || k >= j.o.Keys || !a.Found {
				j.fail(fmt.Errorf("checkpointsim: %s: timer %q/%x without its count", t, tm.Key, tm.Namespace))
				return
			}
			w := int64(binary.BigEndian.Uint64(tm.Namespace))
			t.inst.Delete(stateCount, tm.Key, tm.Namespace)
			delete(t.timers, timerKey{int32(k), w})
			t.pending = append(t.pending, record{window: w, key: int32(k), count: a.Value.Int, kg: j.kgs[k]})
		}
	}
}

// keyIndex parses a key name ("k" and the key's index) back.
func keyIndex(key []byte) (int, error) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, fmt.Errorf("key %q is not one of the simulation's", key)
	}
	k, err := strconv.Atoi(string(key[1:]))
	if err != nil || k < 0 {
		return 0, fmt.Errorf("key %q is not one of the simulation's", key)
	}
	return k, nil
}

// debloatTick sets every channel's capacity to what its consumer
// processed in the last period times the target, as Flink's buffer
// debloating sizes buffers from the measured throughput.
func (j *job) debloatTick() {
	period := float64(debloatEvery) / 1e6
	for _, t := range slices.Concat(j.windows, j.sinks) {
		rate := float64(t.processed-t.lastCount) / period
		t.lastCount = t.processed
		per := int(rate * j.o.DebloatTarget.Seconds() / float64(len(t.inputs)))
		for _, c := range t.inputs {
			c.capIn = min(max(per, 1), c.maxCap)
			c.capOut = c.capIn
			j.move(c)
		}
	}
	if !j.stopped {
		j.clk.at(j.clk.now+debloatEvery, j.debloatTick)
	}
}

// trigger starts the next checkpoint at the sources.
func (j *job) trigger() {
	if j.stopped || j.noTrigger || j.completed >= j.o.Checkpoints || j.cur != nil {
		return
	}
	cp := &checkpoint{id: j.nextID, trigger: j.clk.now, acked: map[*task]bool{}}
	j.nextID++
	cp.stats = CheckpointStats{ID: cp.id, TriggerMs: ms(j.clk.now)}
	for _, t := range j.all {
		for _, c := range t.outputs {
			cp.stats.BacklogRecords += int64(c.inFlight())
		}
	}
	j.cur = cp
	for _, t := range j.sources {
		if j.mode == ModeUnaligned {
			j.snapshot(t, outputState(t), true, 0, 0)
			continue
		}
		j.snapshot(t, nil, false, 0, 0)
		for _, c := range t.outputs {
			j.push(c, elem{barrier: cp.id})
		}
	}
	switch j.mode {
	case ModeUnaligned:
		// The barriers overtake every queue at once: each task takes its
		// snapshot now, producers before consumers.
		for _, t := range slices.Concat(j.windows, j.sinks) {
			j.switchUnaligned(t)
		}
	case ModeAlignedTimeout:
		id := cp.id
		j.clk.at(j.clk.now+j.o.Timeout.Microseconds(), func() {
			if j.stopped || j.cur == nil || j.cur.id != id {
				return
			}
			for _, t := range slices.Concat(j.windows, j.sinks) {
				if !j.snapped(t, id) {
					j.switchUnaligned(t)
				}
			}
		})
	}
}

// snapped reports whether t has taken its snapshot of checkpoint id
// (t.cp is nil both before its first barrier and after its snapshot: the
// coordinator's acknowledgements tell them apart).
func (j *job) snapped(t *task, id uint64) bool {
	return j.cur == nil || j.cur.id != id || j.cur.acked[t]
}

func outputState(t *task) []chanState {
	var cs []chanState
	for _, c := range t.outputs {
		recs := records(c.out)
		for _, r := range t.pending {
			if t.j.route(t, r) == c.outIdx {
				recs = append(recs, r)
			}
		}
		if len(recs) > 0 {
			cs = append(cs, chanState{id: backend.ChannelID{Direction: backend.ChannelOutput, Index: int32(c.outIdx)},
				kind: backend.ChannelKeyed, recs: recs})
		}
	}
	return cs
}

// alignedBarrier handles barrier id read from input i in order: the
// input blocks until every input delivered its barrier, then t snapshots
// and forwards the barrier.
func (t *task) alignedBarrier(i int, id uint64) {
	j := t.j
	if j.cur == nil || j.cur.id != id || j.cur.acked[t] {
		return // a barrier of a checkpoint this task already switched
	}
	if t.cp == nil {
		t.cp = &taskCheckpoint{id: id, firstAt: j.clk.now, got: make([]bool, len(t.inputs))}
	}
	if !t.cp.got[i] {
		t.cp.got[i] = true
		t.cp.ngot++
	}
	if t.cp.ngot < len(t.inputs) {
		return
	}
	cp := t.cp
	j.snapshot(t, nil, false, j.clk.now-cp.firstAt, cp.firstAt-j.cur.trigger)
	for _, c := range t.outputs {
		j.push(c, elem{barrier: id})
	}
}

// switchUnaligned takes t's snapshot of the checkpoint in flight now,
// unaligned: its producers have all taken theirs. Per input channel whose
// barrier t has not read, the records before that barrier become input
// channel state: those in t's input queue and, if the producer snapshotted
// aligned, those before the barrier in the producer's output queue (which
// the producer did not persist); a producer that snapshotted unaligned
// persisted its output queue itself and sent no barrier. t's own output
// queues (and results it has yet to emit) become its output channel state.
func (j *job) switchUnaligned(t *task) {
	id := j.cur.id
	cp := t.cp
	if cp == nil {
		cp = &taskCheckpoint{id: id, firstAt: j.clk.now, got: make([]bool, len(t.inputs))}
	}
	var cs []chanState
	for i, c := range t.inputs {
		if cp.got[i] {
			continue // its barrier was read: what follows is after it
		}
		var recs []record
		if p := indexOf(c.in, id); p >= 0 {
			recs = records(c.in[:p])
			c.in = slices.Delete(c.in, p, p+1)
		} else {
			recs = records(c.in)
			if q := indexOf(c.out, id); q >= 0 {
				recs = append(recs, records(c.out[:q])...)
				c.out = slices.Delete(c.out, q, q+1)
			}
		}
		if len(recs) > 0 {
			cs = append(cs, chanState{id: backend.ChannelID{Direction: backend.ChannelInput, Index: int32(c.inIdx)},
				kind: backend.ChannelKeyed, recs: recs})
		}
	}
	cs = append(cs, outputState(t)...)
	j.snapshot(t, cs, true, j.clk.now-cp.firstAt, cp.firstAt-j.cur.trigger)
	j.wake(t)
}

// snapshot takes t's snapshot of the checkpoint in flight in the daemon:
// its operator state, its channel state, then the snapshot itself.
func (j *job) snapshot(t *task, cs []chanState, unaligned bool, alignment, startDelay int64) {
	cur := j.cur
	t.cp = nil
	switch t.kind {
	case kindSource:
		t.inst.SetOperatorList(listOffset, backend.OperatorSplit, binary.AppendUvarint(nil, uint64(t.next)))
	case kindSink:
		// Pre-commit: the open transaction becomes the checkpoint's; it is
		// committed once the checkpoint completes.
		j.ext.precommit(t.idx, cur.id, t.txn)
		t.txn = nil
		t.pendingTxns = append(t.pendingTxns, cur.id)
		var ids [][]byte
		for _, id := range t.pendingTxns {
			ids = append(ids, binary.AppendUvarint(nil, id))
		}
		t.inst.SetOperatorList(listPending, backend.OperatorSplit, ids...)
	}
	if err := j.chans.write(j.ctx, t, cur.id, cs, j.o.RecordsPerBuffer); err != nil {
		j.fail(fmt.Errorf("checkpointsim: %s: channel state of checkpoint %d: %w", t, cur.id, err))
		return
	}
	err := j.chans.snapshot(j.ctx, t, cur.id, snapOptions{unaligned: unaligned,
		alignment: time.Duration(alignment) * time.Microsecond, startDelay: time.Duration(startDelay) * time.Microsecond})
	if err != nil {
		j.fail(fmt.Errorf("checkpointsim: %s: snapshot %d: %w", t, cur.id, err))
		return
	}
	st := &cur.stats
	cur.acked[t] = true
	st.AlignmentMs = max(st.AlignmentMs, ms(alignment))
	st.StartDelayMs = max(st.StartDelayMs, ms(startDelay))
	if unaligned {
		st.UnalignedTasks++
	}
	for _, c := range cs {
		st.InFlightRecords += int64(len(c.recs))
		for _, r := range c.recs {
			st.InFlightBytes += int64(len(r.encode()))
		}
	}
	cur.acks++
	if cur.acks == len(j.all) {
		id := cur.id
		j.clk.at(j.clk.now+j.o.AckLatency.Microseconds(), func() { j.complete(id) })
	}
}

// complete completes checkpoint id in the daemon, notifies the sinks
// (which commit) and schedules the next trigger.
func (j *job) complete(id uint64) {
	if j.stopped || j.cur == nil || j.cur.id != id {
		return
	}
	cur := j.cur
	info, err := j.c.CompleteCheckpoint(j.ctx, j.name, id)
	if err != nil {
		j.fail(fmt.Errorf("checkpointsim: complete checkpoint %d of %s: %w", id, j.name, err))
		return
	}
	st := cur.stats
	st.DurationMs = ms(j.clk.now - cur.trigger)
	st.Unaligned = st.UnalignedTasks > 0
	st.CheckpointedSize = info.GetCheckpointedSize()
	st.FullSize = info.GetFullSize()
	st.DaemonInFlightBytes = daemonInFlight(info)
	// The daemon's figures, largest over the tasks; the asynchronous part
	// is known only once the uploads finished, at completion.
	st.SyncMs = float64(info.GetSyncMicros()) / 1e3
	st.AsyncMs = float64(info.GetAsyncMicros()) / 1e3
	st.Daemon = DaemonStats{Unaligned: info.GetUnaligned(), AlignmentMs: float64(info.GetAlignmentMicros()) / 1e3,
		StartDelayMs: float64(info.GetStartDelayMicros()) / 1e3}
	j.stats = append(j.stats, st)
	j.completed++
	j.cur = nil
	// The notification reaches the sinks one ack latency later; a failure
	// in between leaves the transactions to the restore to commit.
	j.clk.at(j.clk.now+j.o.AckLatency.Microseconds(), func() {
		if j.stopped {
			return
		}
		for _, t := range j.sinks {
			var keep []uint64
			for _, tid := range t.pendingTxns {
				if tid <= id {
					j.ext.commit(t.idx, tid)
				} else {
					keep = append(keep, tid)
				}
			}
			t.pendingTxns = keep
		}
	})
	if j.completed >= j.o.Checkpoints && j.o.Records == 0 {
		j.stopped = true // unbounded input: the run is its checkpoints
		return
	}
	j.clk.at(max(cur.trigger+j.o.Interval.Microseconds(), j.clk.now), j.trigger)
}

func ms(us int64) float64 { return float64(us) / 1e3 }
