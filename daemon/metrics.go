package daemon

import (
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/internal/latency"
)

// Op is a state operation kind, for metrics and for the api's dispatch,
// which converts a wire OpType to it by number: the values and names match
// stated.proto's OpType (OP_TYPE_MAP_GET = 6 is OpMapGet, "map_get"), and
// api's TestOpNumbers fails when they drift.
type Op uint8

const (
	OpGet Op = iota + 1
	OpPut
	OpDelete
	OpListAppend
	OpListGet
	OpMapGet
	OpMapPut
	OpMapRemove
	OpMapContains
	OpMapIterate
	OpAggregateAdd
	OpAggregateGet
	OpTimerRegister
	OpTimerDelete
	OpTimerPoll
	OpOperatorSet
	OpOperatorAppend
	OpOperatorGet
	numOps
)

var opNames = [numOps]string{"", "get", "put", "delete", "list_append", "list_get", "map_get", "map_put",
	"map_remove", "map_contains", "map_iterate", "aggregate_add", "aggregate_get", "timer_register",
	"timer_delete", "timer_poll", "operator_set", "operator_append", "operator_get"}

func (o Op) String() string {
	if o < numOps && o > 0 {
		return opNames[o]
	}
	return "unknown"
}

// Kinds indexes the metric arrays: backend kinds and state kinds.
var (
	BackendKinds = [...]backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM}
	StateKinds   = [...]backend.StateKind{backend.KindValue, backend.KindList, backend.KindMap, backend.KindAggregate, backend.KindTimers}
)

const (
	numBackendKinds = len(BackendKinds)
	// State kinds are 1..5; index 0 holds operations on unknown states.
	numStateKinds = 6
)

// BackendIndex returns the metric index of k (heap 0, file 1, lsm 2).
func BackendIndex(k backend.Kind) int {
	for i, b := range BackendKinds {
		if b == k {
			return i
		}
	}
	return 0
}

// FailureReason classifies failed checkpoints for metrics.
type FailureReason uint8

const (
	FailureDeclined FailureReason = iota
	FailureExpired
	FailureAborted
	numFailureReasons
)

var failureNames = [numFailureReasons]string{"declined", "expired", "aborted"}

func (r FailureReason) String() string {
	if r < numFailureReasons {
		return failureNames[r]
	}
	return "aborted"
}

var failureStatus = [numFailureReasons]catalog.Status{catalog.StatusDeclined, catalog.StatusExpired, catalog.StatusAborted}

// Status is the catalog status a checkpoint failed for r is recorded with.
func (r FailureReason) Status() catalog.Status {
	if r < numFailureReasons {
		return failureStatus[r]
	}
	return catalog.StatusAborted
}

// Metrics are the daemon's counters. All fields are updated with atomics
// and read by the exporter at scrape time.
type Metrics struct {
	// Ops counts state operations per backend kind, state kind and op;
	// OpErrors those that failed.
	Ops      [numBackendKinds][numStateKinds][numOps]atomic.Uint64
	OpErrors [numBackendKinds][numStateKinds][numOps]atomic.Uint64
	// OpLatency is the time one operation took in the backend, per backend
	// kind and state kind; in large batches it samples operations (see
	// api), so its count can be below Ops.
	OpLatency [numBackendKinds][numStateKinds]*latency.Histogram
	// Batches counts batch requests; BatchesRejected those refused whole
	// (too many operations).
	Batches         atomic.Uint64
	BatchesRejected atomic.Uint64
	// Streams is the number of open batch streams.
	Streams atomic.Int64
	// OpenInstances per backend kind; Opens and OpenFailures count calls.
	OpenInstances [numBackendKinds]atomic.Int64
	Opens         atomic.Uint64
	OpenFailures  atomic.Uint64
	Restores      atomic.Uint64
	// InstancesReaped counts instances closed for having no batch stream
	// (Config.IdleInstanceTimeout).
	InstancesReaped atomic.Uint64

	// CheckpointSync and CheckpointAsync are the durations of the two parts
	// of each task snapshot, per backend kind.
	CheckpointSync  [numBackendKinds]*latency.Histogram
	CheckpointAsync [numBackendKinds]*latency.Histogram
	// CheckpointedBytes and FullBytes sum Handle.CheckpointedSize and
	// Handle.FullSize of successful task snapshots per backend kind: their
	// ratio is how much incremental checkpoints save.
	CheckpointedBytes [numBackendKinds]atomic.Uint64
	FullBytes         [numBackendKinds]atomic.Uint64
	// SnapshotFailures counts task snapshots that failed (sync or async).
	SnapshotFailures [numBackendKinds]atomic.Uint64
	// CheckpointsCompleted counts completed checkpoints (per job, not per
	// task); CheckpointFailures aborted ones by reason.
	CheckpointsCompleted atomic.Uint64
	CheckpointFailures   [numFailureReasons]atomic.Uint64
	// ReportsMerged counts task reports a completion took in its own log
	// entry (cluster mode: held for it, not written on their own).
	ReportsMerged atomic.Uint64
	// CheckpointDuration: from the first Snapshot of a checkpoint in this
	// daemon to its completion.
	CheckpointDuration *latency.Histogram
	// Corruption counts detected corruption by CorruptionSite (each also
	// logged at level error and passed to Config.OnCorruption).
	Corruption [numCorruptionSites]atomic.Uint64

	// Materializations counts completed materializations of instances in
	// changelog mode, MaterializeDuration their durations, and
	// MaterializeFailures the failed or abandoned ones.
	Materializations    atomic.Uint64
	MaterializeDuration *latency.Histogram
	MaterializeFailures atomic.Uint64
	// ReplayDuration is the time restores in changelog mode spent
	// replaying the log after restoring the base.
	ReplayDuration *latency.Histogram
	// RestoreFallbacks counts restores of the latest checkpoint that
	// skipped damaged newer ones (RestoreSpec.AllowFallback).
	RestoreFallbacks atomic.Uint64
	// ChannelStateSkipped counts restores that skipped a checkpoint's
	// channel state (RestoreSpec.WithoutChannelState); ChannelStateBytes
	// the stored bytes of channel state in the handles of snapshots, and
	// UnalignedSnapshots the snapshots their engine reported unaligned.
	ChannelStateSkipped atomic.Uint64
	// Alignment and StartDelay are what engines reported of task
	// snapshots (SnapshotStats), as Flink's checkpoint page shows them.
	Alignment, StartDelay *latency.Histogram
	ChannelStateBytes     atomic.Uint64
	UnalignedSnapshots    atomic.Uint64
}

// NewMetrics allocates the histograms.
func NewMetrics() *Metrics {
	m := &Metrics{CheckpointDuration: latency.New(0.001, 2, 20), Alignment: latency.New(0.001, 2, 20), StartDelay: latency.New(0.001, 2, 20),
		MaterializeDuration: latency.New(0.001, 2, 20), ReplayDuration: latency.New(1e-4, 2, 21)}
	for b := range numBackendKinds {
		for s := range numStateKinds {
			// 1 us .. ~0.5 s.
			m.OpLatency[b][s] = latency.New(1e-6, 2, opLatencyBuckets)
		}
		// 100 us .. ~100 s.
		m.CheckpointSync[b] = latency.New(1e-4, 2, 21)
		m.CheckpointAsync[b] = latency.New(1e-3, 2, 20)
	}
	return m
}

// opLatencyBuckets is the bucket count of every OpLatency histogram.
const opLatencyBuckets = 20

// OpCounter is the per-instance view the api server records operations
// through: fixed indexes, no lookups on the hot path.
type OpCounter struct {
	m *Metrics
	b int
}

// OpTally counts the operations of one batch locally and adds them to the
// shared counters once (Flush), so that a batch of thousands costs a few
// dozen atomic adds, not several per operation. It lives on the stack of
// one goroutine.
type OpTally struct {
	c      OpCounter
	ops    [numStateKinds][numOps]uint32
	errs   [numStateKinds][numOps]uint32
	counts [numStateKinds][opLatencyBuckets + 1]uint32
	sumNs  [numStateKinds]int64
	// used marks the state kinds with anything to flush: set by Add and
	// Count alike, so that a kind none of whose operations was timed still
	// has its counts flushed.
	used [numStateKinds]bool
}

// Tally starts a local count.
func (c OpCounter) Tally() OpTally { return OpTally{c: c} }

// Add counts one operation of op on a state of kind sk that took d.
func (t *OpTally) Add(sk backend.StateKind, op Op, d time.Duration, failed bool) {
	s := int(sk)
	if s >= numStateKinds {
		s = 0
	}
	if op >= numOps {
		op = 0
	}
	t.ops[s][op]++
	if failed {
		t.errs[s][op]++
	}
	t.counts[s][t.c.m.OpLatency[t.c.b][s].Bucket(d)]++
	t.sumNs[s] += int64(d)
	t.used[s] = true
}

// Count counts one operation whose latency was not measured.
func (t *OpTally) Count(sk backend.StateKind, op Op, failed bool) {
	s := int(sk)
	if s >= numStateKinds {
		s = 0
	}
	if op >= numOps {
		op = 0
	}
	t.ops[s][op]++
	if failed {
		t.errs[s][op]++
	}
	t.used[s] = true
}

// Flush adds the local counts to the daemon's metrics and resets them.
func (t *OpTally) Flush() {
	m, b := t.c.m, t.c.b
	for s := range numStateKinds {
		if !t.used[s] {
			continue
		}
		m.OpLatency[b][s].Merge(t.counts[s][:], t.sumNs[s])
		for op, c := range t.ops[s] {
			if c > 0 {
				m.Ops[b][s][op].Add(uint64(c))
			}
			if e := t.errs[s][op]; e > 0 {
				m.OpErrors[b][s][op].Add(uint64(e))
			}
		}
	}
	*t = OpTally{c: t.c}
}
