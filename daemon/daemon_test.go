package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	node  *host.Host
	d     *daemon.Daemon
	cat   *catalog.Catalog
	store *memstore.Store
	heap  *memstore.Store
}

// storeNames lists the objects of s under prefix.
func storeNames(t *testing.T, s tiered.Store, prefix string) []string {
	t.Helper()
	var out []string
	err := tiered.Walk(context.Background(), s, prefix, func(o tiered.ObjectInfo) error {
		out = append(out, o.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newEnv runs a node (as "stated serve" assembles it) on an in-memory
// checkpoint store, without a socket: the tests call its daemon.
func newEnv(t *testing.T, mod func(*host.Options)) *env {
	t.Helper()
	return newEnvOn(t, memstore.New(), mod)
}

// newEnvOn is newEnv on a given checkpoint store (a second node restoring
// what a first one wrote).
func newEnvOn(t *testing.T, store *memstore.Store, mod func(*host.Options)) *env {
	t.Helper()
	ctx := context.Background()
	o := host.Options{DataDir: t.TempDir(), Store: store, NoSocket: true, Logger: quiet}
	if mod != nil {
		mod(&o)
	}
	n, err := host.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := n.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	})
	return &env{d: n.Daemon(), cat: n.Catalog(), store: store, heap: n.HeapSnapshots(), node: n}
}

var valueState = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}

func (e *env) open(t *testing.T, job string, sub int, kind backend.Kind) *daemon.Instance {
	t.Helper()
	in, err := e.d.Open(context.Background(), daemon.OpenParams{
		Task:      backend.TaskID{Job: job, Operator: "op", Subtask: sub},
		KeyGroups: backend.KeyGroupRangeForOperator(128, 2, sub), Kind: kind, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestLookupIsolationAndReplace(t *testing.T) {
	e := newEnv(t, nil)
	in := e.open(t, "a", 0, backend.KindHeap)
	if got, err := e.d.Lookup(in.ID, "a"); err != nil || got != in {
		t.Fatalf("lookup: %v", err)
	}
	if _, err := e.d.Lookup(in.ID, "b"); !errors.Is(err, daemon.ErrPermissionDenied) {
		t.Fatalf("other job: %v", err)
	}
	if _, err := e.d.Lookup(make([]byte, 16), "a"); !errors.Is(err, daemon.ErrUnknownInstance) {
		t.Fatalf("unknown id: %v", err)
	}
	p := daemon.OpenParams{Task: in.Task, KeyGroups: in.KeyGroups, Kind: backend.KindHeap, States: valueState}
	if _, err := e.d.Open(context.Background(), p); !errors.Is(err, daemon.ErrAlreadyOpen) {
		t.Fatalf("second open: %v", err)
	}
	p.Replace = true
	in2, err := e.d.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Lookup(in.ID, "a"); !errors.Is(err, daemon.ErrUnknownInstance) {
		t.Fatalf("replaced instance still found: %v", err)
	}
	// The replaced backend closes in the background (the daemon's tables
	// no longer reach it): soon, not necessarily yet.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		err := in.Backend.Put("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: []byte("k")}, nil)
		if errors.Is(err, backend.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replaced backend still open after 5 s: %v", err)
		}
	}
	if err := e.d.CloseInstance(in2.ID, "b"); !errors.Is(err, daemon.ErrPermissionDenied) {
		t.Fatalf("close by another job: %v", err)
	}
	if err := e.d.CloseInstance(in2.ID, "a"); err != nil {
		t.Fatal(err)
	}
}

func TestMaxInstances(t *testing.T) {
	e := newEnv(t, func(o *host.Options) { o.MaxInstances = 1 })
	e.open(t, "a", 0, backend.KindHeap)
	_, err := e.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "a", Operator: "op", Subtask: 1},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 1}, Kind: backend.KindFile})
	if !errors.Is(err, daemon.ErrLimit) {
		t.Fatalf("open past the limit: %v", err)
	}
}

func TestCheckpointFlow(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	a := e.open(t, "job", 0, backend.KindFile)
	b := e.open(t, "job", 1, backend.KindLSM)
	if _, err := e.d.Snapshot(ctx, a, 1, false); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.CompleteCheckpoint(ctx, "job", 1, nil)
	if !errors.Is(err, daemon.ErrCheckpointFailed) || !strings.Contains(err.Error(), "job/op/1") {
		t.Fatalf("complete without task 1: %v", err)
	}
	if _, err := e.d.Snapshot(ctx, a, 1, false); err == nil {
		t.Fatal("second snapshot of the same checkpoint by one task accepted")
	}
	res, err := e.d.Snapshot(ctx, b, 1, true)
	if err != nil || !res.Done || res.Files == 0 {
		t.Fatalf("snapshot with wait: %+v %v", res, err)
	}
	info, err := e.d.CompleteCheckpoint(ctx, "job", 1, nil)
	if err != nil || info.Tasks != 2 || info.Status != "completed" {
		t.Fatalf("complete: %+v %v", info, err)
	}
	if again, err := e.d.CompleteCheckpoint(ctx, "job", 1, nil); err != nil || again.ID != 1 {
		t.Fatalf("complete again: %v", err)
	}
	if _, err := e.d.Snapshot(ctx, a, 1, false); !errors.Is(err, daemon.ErrCheckpointFailed) {
		t.Fatalf("snapshot of a completed checkpoint: %v", err)
	}
	// Abort: later snapshots of it are refused, complete fails.
	if _, err := e.d.Snapshot(ctx, a, 2, false); err != nil {
		t.Fatal(err)
	}
	if err := e.d.AbortCheckpoint(ctx, "job", 2, "aborted: test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Snapshot(ctx, b, 2, false); !errors.Is(err, daemon.ErrCheckpointFailed) {
		t.Fatalf("snapshot of an aborted checkpoint: %v", err)
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "job", 2, nil); !errors.Is(err, daemon.ErrCheckpointFailed) {
		t.Fatalf("complete of an aborted checkpoint: %v", err)
	}
	// Subsumption: completing 4 aborts 3.
	for _, in := range []*daemon.Instance{a, b} {
		if _, err := e.d.Snapshot(ctx, in, 3, false); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Snapshot(ctx, in, 4, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "job", 4, nil); err != nil {
		t.Fatal(err)
	}
	list, err := e.d.ListCheckpoints(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	status := map[uint64]string{}
	for _, c := range list {
		status[c.ID] = c.Status
	}
	if status[1] != "completed" || status[2] != "aborted" || status[3] != "aborted" || status[4] != "completed" {
		t.Fatalf("history %v", status)
	}
	m := e.d.Metrics()
	if m.CheckpointsCompleted.Load() != 2 || m.CheckpointFailures[daemon.FailureAborted].Load() != 2 {
		t.Fatalf("metrics: completed %d, aborted %d", m.CheckpointsCompleted.Load(), m.CheckpointFailures[daemon.FailureAborted].Load())
	}
	// A restore finds checkpoint 4 for both tasks.
	if err := e.d.CloseInstance(a.ID, "job"); err != nil {
		t.Fatal(err)
	}
	r, err := e.d.Open(ctx, daemon.OpenParams{Task: a.Task, KeyGroups: a.KeyGroups, Kind: backend.KindFile, States: valueState,
		Restore: &daemon.RestoreSpec{Latest: true}})
	if err != nil || r.RestoredFrom != 4 {
		t.Fatalf("restore: %v", err)
	}
}

func TestDeclinedAndExpired(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(o *host.Options) { o.HeapSnapshotCap, o.CheckpointTimeout = 1, 50*time.Millisecond })
	h := e.open(t, "job", 0, backend.KindHeap)
	if err := h.Backend.Put("v", backend.Key{KeyGroup: h.KeyGroups.Start, Key: []byte("k")}, []byte("a value larger than one byte")); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.Snapshot(ctx, h, 1, true)
	if !errors.Is(err, backend.ErrDeclined) {
		t.Fatalf("snapshot over the heap cap: %v", err)
	}
	f := e.open(t, "other", 0, backend.KindFile)
	// What a task on another host uploaded for the checkpoint: the expiry
	// must delete it (deterministically there before the timer fires).
	elsewhere := catalog.CheckpointDir("other", 1) + "/op-1/state-elsewhere"
	if err := tiered.PutBytes(ctx, e.store, elsewhere, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Snapshot(ctx, f, 1, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.d.Metrics().CheckpointFailures[daemon.FailureExpired].Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("checkpoint did not expire")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "other", 1, nil); !errors.Is(err, daemon.ErrCheckpointFailed) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("complete of an expired checkpoint: %v", err)
	}
	// The daemon's timer is the one expiry: the catalog recorded it as
	// expired and its private files are gone.
	if list, _ := e.d.ListCheckpoints(ctx, "other"); len(list) != 1 || list[0].Status != "expired" ||
		list[0].Reason != "not completed within 50ms" {
		t.Fatalf("history of the expired checkpoint: %+v", list)
	}
	if got := e.cat.InFlight("other"); len(got) != 0 {
		t.Fatalf("the expired checkpoint is still in flight in the catalog: %v", got)
	}
	if left := storeNames(t, e.store, catalog.CheckpointDir("other", 1)+"/"); len(left) != 0 {
		t.Fatalf("files of the expired checkpoint survive: %v", left)
	}
	if n := e.d.Metrics().CheckpointFailures[daemon.FailureDeclined].Load(); n != 1 {
		t.Fatalf("declined count %d", n)
	}
	list, _ := e.d.ListCheckpoints(ctx, "job")
	if len(list) != 1 || list[0].Status != "declined" {
		t.Fatalf("history of the declined checkpoint: %+v", list)
	}
}

// slowBackend's snapshots upload until their context ends.
type slowBackend struct{ backend.Backend }

type slowSnapshot struct{ backend.PendingSnapshot }

func (s slowSnapshot) Run(ctx context.Context) (*backend.Handle, error) {
	<-ctx.Done()
	s.Release()
	return nil, ctx.Err()
}

func (b slowBackend) Snapshot(ctx context.Context, id uint64) (backend.PendingSnapshot, error) {
	p, err := b.Backend.Snapshot(ctx, id)
	return slowSnapshot{p}, err
}

func TestShutdownAbortsInflightSnapshots(t *testing.T) {
	ctx := context.Background()
	// File snapshots never finish uploading: Shutdown must abort them.
	e := newEnv(t, func(o *host.Options) {
		o.WrapOpener = func(k backend.Kind, op daemon.Opener) daemon.Opener {
			if k != backend.KindFile {
				return op
			}
			return func(ctx context.Context, o backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
				b, err := op(ctx, o, env)
				return slowBackend{b}, err
			}
		}
	})
	d, cat := e.d, e.cat
	in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Snapshot(ctx, in, 1, false); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := d.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("shutdown did not abort the snapshot")
	}
	if _, err := d.Snapshot(ctx, in, 2, false); !errors.Is(err, daemon.ErrShuttingDown) {
		t.Fatalf("snapshot after shutdown: %v", err)
	}
	list := cat.List("j")
	if len(list) != 1 || list[0].Status != catalog.StatusAborted {
		t.Fatalf("history after shutdown: %+v", list)
	}
}

func TestTally(t *testing.T) {
	e := newEnv(t, nil)
	m := e.d.Metrics()
	in := e.open(t, "j", 0, backend.KindHeap)
	tally := in.Ops.Tally()
	tally.Add(backend.KindValue, daemon.OpPut, 3*time.Microsecond, false)
	tally.Add(backend.KindValue, daemon.OpPut, 3*time.Microsecond, true)
	tally.Add(backend.KindMap, daemon.OpMapGet, time.Millisecond, false)
	tally.Flush()
	hi := daemon.BackendIndex(backend.KindHeap)
	if m.Ops[hi][backend.KindValue][daemon.OpPut].Load() != 2 || m.OpErrors[hi][backend.KindValue][daemon.OpPut].Load() != 1 {
		t.Fatal("tally counts")
	}
	if s := m.OpLatency[hi][backend.KindValue].Snapshot(); s.Count != 2 || s.Buckets[4e-6] != 2 || s.Buckets[2e-6] != 0 {
		t.Fatalf("tally latency %+v", s)
	}
	if s := m.OpLatency[hi][backend.KindMap].Snapshot(); s.Count != 1 {
		t.Fatalf("map latency %+v", s)
	}
}

// TestTallyCountsUntimedKinds: a kind counted only with Count (none of its
// operations timed, as in a large batch's samples) still reaches the
// counters, and its latency histogram stays empty.
func TestTallyCountsUntimedKinds(t *testing.T) {
	e := newEnv(t, nil)
	m := e.d.Metrics()
	in := e.open(t, "j", 0, backend.KindFile)
	tally := in.Ops.Tally()
	tally.Add(backend.KindValue, daemon.OpPut, time.Microsecond, false)
	for range 3 {
		tally.Count(backend.KindAggregate, daemon.OpAggregateAdd, false)
		tally.Count(backend.KindList, daemon.OpListAppend, true)
	}
	tally.Flush()
	fi := daemon.BackendIndex(backend.KindFile)
	for _, c := range []struct {
		sk         backend.StateKind
		op         daemon.Op
		ops, errs  uint64
		latencyCnt uint64
	}{
		{backend.KindValue, daemon.OpPut, 1, 0, 1},
		{backend.KindAggregate, daemon.OpAggregateAdd, 3, 0, 0},
		{backend.KindList, daemon.OpListAppend, 3, 3, 0},
	} {
		if got := m.Ops[fi][c.sk][c.op].Load(); got != c.ops {
			t.Errorf("%s on kind %d: %d ops, want %d", c.op, c.sk, got, c.ops)
		}
		if got := m.OpErrors[fi][c.sk][c.op].Load(); got != c.errs {
			t.Errorf("%s on kind %d: %d errors, want %d", c.op, c.sk, got, c.errs)
		}
		if got := m.OpLatency[fi][c.sk].Snapshot().Count; got != c.latencyCnt {
			t.Errorf("kind %d: %d latency samples, want %d", c.sk, got, c.latencyCnt)
		}
	}
	// Flush reset the tally: flushing again adds nothing.
	tally.Flush()
	if got := m.Ops[fi][backend.KindAggregate][daemon.OpAggregateAdd].Load(); got != 3 {
		t.Errorf("after a second flush: %d", got)
	}
}

// TestHeapSnapshotMemoryBounded: heap snapshots live in daemon memory; the
// catalog deletes those of subsumed, aborted and declined checkpoints, so a
// heap instance that takes many checkpoints holds about Retain snapshots,
// and a retained one still restores.
func TestHeapSnapshotMemoryBounded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	in := e.open(t, "job", 0, backend.KindHeap)
	val := make([]byte, 1000)
	var maxSnap int64
	for id := uint64(1); id <= 50; id++ {
		for i := 0; i < 20; i++ {
			val[0] = byte(id)
			k := backend.Key{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), Key: []byte(fmt.Sprint("k", i))}
			if err := in.Backend.Put("v", k, val); err != nil {
				t.Fatal(err)
			}
		}
		res, err := e.d.Snapshot(ctx, in, id, true)
		if err != nil {
			t.Fatal(err)
		}
		maxSnap = max(maxSnap, res.FullSize)
		if _, err := e.d.CompleteCheckpoint(ctx, "job", id, nil); err != nil {
			t.Fatal(err)
		}
		// catalog.DefaultRetain checkpoints are kept.
		if got := e.heap.Bytes(); got > int64(catalog.DefaultRetain)*maxSnap {
			t.Fatalf("after checkpoint %d the daemon holds %d bytes of heap snapshots, more than %d snapshots of at most %d",
				id, got, catalog.DefaultRetain, maxSnap)
		}
	}
	if maxSnap < 20000 {
		t.Fatalf("snapshots of %d bytes: the test writes too little to tell", maxSnap)
	}
	held := e.heap.Bytes()
	// Aborted (after the upload) and declined checkpoints leave nothing.
	if _, err := e.d.Snapshot(ctx, in, 51, true); err != nil {
		t.Fatal(err)
	}
	if e.heap.Bytes() <= held {
		t.Fatal("the snapshot of checkpoint 51 is not in the heap store")
	}
	if err := e.d.AbortCheckpoint(ctx, "job", 51, "aborted: test"); err != nil {
		t.Fatal(err)
	}
	if got := e.heap.Bytes(); got != held {
		t.Fatalf("aborted checkpoint 51 left %d bytes in the heap store", got-held)
	}
	if _, err := e.d.Snapshot(ctx, in, 52, true); err != nil {
		t.Fatal(err)
	}
	if err := e.d.AbortCheckpoint(ctx, "job", 52, "declined: test"); err != nil {
		t.Fatal(err)
	}
	if got := e.heap.Bytes(); got != held {
		t.Fatalf("declined checkpoint 52 left %d bytes in the heap store", got-held)
	}
	// A retained checkpoint restores, the latest and an older one.
	for _, spec := range []daemon.RestoreSpec{{Latest: true}, {CheckpointID: 48}} {
		r, err := e.d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: 0},
			KeyGroups: in.KeyGroups, Kind: backend.KindHeap, States: valueState, Restore: &spec, Replace: true})
		if err != nil {
			t.Fatalf("restore from %+v: %v", spec, err)
		}
		want := byte(50)
		if spec.CheckpointID != 0 {
			want = byte(spec.CheckpointID)
		}
		v, ok, err := r.Backend.Get("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: []byte("k0")})
		if err != nil || !ok || v[0] != want {
			t.Fatalf("restored from %+v: %v %v %v", spec, ok, err, v[:1])
		}
	}
	// A subsumed checkpoint is gone, and says so.
	_, err := e.d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: 0},
		KeyGroups: in.KeyGroups, Kind: backend.KindHeap, States: valueState,
		Restore: &daemon.RestoreSpec{CheckpointID: 10}, Replace: true})
	if !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("restore from subsumed checkpoint 10: %v", err)
	}
}

// TestRestoreModeDefault: without a mode, a restore from latest claims
// (a failover of the same job keeps owning its checkpoint, so restarts do
// not pile up pinned checkpoints), and one from an explicit checkpoint id
// is no-claim (that checkpoint is pinned).
func TestRestoreModeDefault(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []backend.Kind{backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t, nil)
			in := e.open(t, "job", 0, kind)
			id := uint64(0)
			checkpoint := func(in *daemon.Instance) {
				t.Helper()
				id++
				k := backend.Key{KeyGroup: in.KeyGroups.Start, Key: []byte(fmt.Sprint("k", id))}
				if err := in.Backend.Put("v", k, []byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := e.d.Snapshot(ctx, in, id, true); err != nil {
					t.Fatal(err)
				}
				if _, err := e.d.CompleteCheckpoint(ctx, "job", id, nil); err != nil {
					t.Fatal(err)
				}
			}
			reopen := func(spec daemon.RestoreSpec) *daemon.Instance {
				t.Helper()
				r, err := e.d.Open(ctx, daemon.OpenParams{Task: in.Task, KeyGroups: in.KeyGroups, Kind: kind,
					States: valueState, Restore: &spec, Replace: true})
				if err != nil {
					t.Fatalf("restore %+v: %v", spec, err)
				}
				return r
			}
			pinned := func() (retained int, pins []uint64) {
				t.Helper()
				list, err := e.d.ListCheckpoints(ctx, "job")
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range list {
					if c.Retained {
						retained++
					}
					if c.Pinned {
						pins = append(pins, c.ID)
					}
				}
				return retained, pins
			}
			checkpoint(in)
			// Ten crash-restarts from latest, a checkpoint after each.
			for round := 0; round < 10; round++ {
				in = reopen(daemon.RestoreSpec{Latest: true})
				if in.RestoredFrom != id {
					t.Fatalf("restored from %d, want %d", in.RestoredFrom, id)
				}
				checkpoint(in)
				checkpoint(in)
			}
			if n, pins := pinned(); n != catalog.DefaultRetain || len(pins) != 0 {
				t.Fatalf("after restarts from latest: %d retained, pinned %v; want %d and none", n, pins, catalog.DefaultRetain)
			}
			// An explicit checkpoint id is no-claim: pinned, kept past
			// retention.
			chosen := id - 1
			in = reopen(daemon.RestoreSpec{CheckpointID: chosen})
			for range 4 {
				checkpoint(in)
			}
			if _, pins := pinned(); len(pins) != 1 || pins[0] != chosen {
				t.Fatalf("after a restore from checkpoint %d: pinned %v", chosen, pins)
			}
			// An explicit claim of it unpins it; an explicit no-claim of
			// latest pins.
			in = reopen(daemon.RestoreSpec{CheckpointID: chosen, Claim: true})
			if _, pins := pinned(); len(pins) != 0 {
				t.Fatalf("after claiming %d: pinned %v", chosen, pins)
			}
			in = reopen(daemon.RestoreSpec{Latest: true, NoClaim: true})
			if _, pins := pinned(); len(pins) != 1 || pins[0] != id {
				t.Fatalf("after a no-claim restore from latest (%d): pinned %v", id, pins)
			}
			_, err := e.d.Open(ctx, daemon.OpenParams{Task: in.Task, KeyGroups: in.KeyGroups, Kind: kind,
				Restore: &daemon.RestoreSpec{Latest: true, Claim: true, NoClaim: true}, Replace: true})
			if !errors.Is(err, backend.ErrInvalidArgument) {
				t.Fatalf("claim and no-claim at once: %v", err)
			}
		})
	}
}

// An instance with no batch stream for IdleInstanceTimeout is closed (its
// task died without closing it); one with a stream stays however long it
// is open, and is closed once its stream has been gone that long.
func TestIdleInstancesAreReaped(t *testing.T) {
	const idle = 100 * time.Millisecond
	e := newEnv(t, func(o *host.Options) { o.IdleInstanceTimeout = idle })
	orphan := e.open(t, "a", 0, backend.KindHeap)
	live := e.open(t, "a", 1, backend.KindLSM)
	release, err := live.AcquireStream()
	if err != nil {
		t.Fatal(err)
	}
	gone := func(in *daemon.Instance) bool {
		_, err := e.d.Lookup(in.ID, "a")
		return errors.Is(err, daemon.ErrUnknownInstance)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
		}
	}
	// The reaper unregisters an instance, closes it, then counts it.
	waitFor("the instance without a stream is closed", func() bool {
		return gone(orphan) && e.d.Metrics().InstancesReaped.Load() >= 1
	})
	if got := e.d.Metrics().InstancesReaped.Load(); got != 1 {
		t.Fatalf("reaped %d instances, want 1", got)
	}
	if err := orphan.Backend.Put("v", backend.Key{KeyGroup: 0, Key: []byte("k")}, []byte("v")); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("write to a reaped instance: %v, want ErrClosed", err)
	}
	time.Sleep(3 * idle) // several reaper passes with the stream attached
	if gone(live) {
		t.Fatal("an instance with a batch stream was reaped")
	}
	release()
	waitFor("the instance whose stream ended is closed", func() bool { return gone(live) })
	if _, err := live.AcquireStream(); err == nil {
		t.Fatal("a stream attached to a reaped instance")
	}
}

// TestCheckpointTimeoutWithinGrace: the daemon's timer is the only expiry,
// so New refuses a timeout the catalog's sweep would not wait for.
func TestCheckpointTimeoutWithinGrace(t *testing.T) {
	ctx := context.Background()
	store, cat, set := catalogAndOpeners(t)
	cfg := daemon.Config{DataDir: t.TempDir(), Store: store, Catalog: cat, Openers: set.Openers, Logger: quiet,
		CheckpointTimeout: time.Hour}
	if _, err := daemon.New(cfg); err == nil || !strings.Contains(err.Error(), "gc grace") {
		t.Fatalf("a checkpoint timeout as long as the gc grace was accepted: %v", err)
	}
	cfg.CheckpointTimeout = 59 * time.Minute
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestParseFailure: the text form of a reason (what the API carries) maps
// to the typed failure the metrics and the catalog history use.
func TestParseFailure(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want daemon.Failure
	}{
		{"declined: too big", daemon.Failure{Reason: daemon.FailureDeclined, Text: "too big"}},
		{"expired: not completed within 1s", daemon.Failure{Reason: daemon.FailureExpired, Text: "not completed within 1s"}},
		{"aborted: job restarts", daemon.Failure{Reason: daemon.FailureAborted, Text: "job restarts"}},
		{"aborted", daemon.Failure{Reason: daemon.FailureAborted}},
		{"declined", daemon.Failure{Reason: daemon.FailureDeclined}},
		{"operator cancelled", daemon.Failure{Reason: daemon.FailureAborted, Text: "operator cancelled"}},
		{"", daemon.Failure{Reason: daemon.FailureAborted}},
	} {
		got := daemon.ParseFailure(tc.in)
		if got != tc.want {
			t.Errorf("ParseFailure(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if tc.in != "" && tc.want.Text != "" && got.String() != tc.in && tc.in != "operator cancelled" {
			t.Errorf("%+v prints as %q, want %q", got, got.String(), tc.in)
		}
	}
	for r, want := range map[daemon.FailureReason]catalog.Status{
		daemon.FailureDeclined: catalog.StatusDeclined, daemon.FailureExpired: catalog.StatusExpired, daemon.FailureAborted: catalog.StatusAborted,
	} {
		if got := r.Status(); got != want {
			t.Errorf("%s records as %s, want %s", r, got, want)
		}
	}
}

// manifestGate holds the catalog's manifest write until release is
// closed, then fails it: a completion that is slow and then fails.
type manifestGate struct {
	tiered.Store
	entered, release chan struct{}
}

func (g *manifestGate) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	if !strings.HasSuffix(name, "/"+catalog.ManifestName) {
		return g.Store.PutIfAbsent(ctx, name, r, size)
	}
	close(g.entered)
	<-g.release
	return errors.New("manifestGate: write failed")
}

// TestExpiryDuringAFailedCompletion: the timer fires while the checkpoint
// completes, and the completion then fails. The timer is the only expiry,
// so the checkpoint must expire then, not stay in flight for ever.
func TestExpiryDuringAFailedCompletion(t *testing.T) {
	ctx := context.Background()
	const timeout = 100 * time.Millisecond
	g := &manifestGate{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
	cat, err := catalog.Open(ctx, catalog.Options{Store: g})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	d, err := daemon.New(daemon.Config{DataDir: t.TempDir(), Store: g, Catalog: cat, Openers: set.Openers, Logger: quiet,
		CheckpointTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(ctx)
	in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Kind: backend.KindFile, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Snapshot(ctx, in, 1, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.CompleteCheckpoint(ctx, "j", 1, nil)
		done <- err
	}()
	<-g.entered
	// The timeout passing is what is tested: let the timer fire while the
	// manifest write hangs.
	time.Sleep(10 * timeout)
	close(g.release)
	if err := <-done; err == nil {
		t.Fatal("the completion succeeded despite the failed manifest write")
	}
	if n := d.Metrics().CheckpointFailures[daemon.FailureExpired].Load(); n != 1 {
		t.Fatalf("expired count %d after the failed completion, want 1", n)
	}
	if list, _ := d.ListCheckpoints(ctx, "j"); len(list) != 1 || list[0].Status != "expired" {
		t.Fatalf("history: %+v", list)
	}
}

// TestRestoreIsLogged: an instance opened from a restore logs how long the
// open took and, for an lsm instance, its restore's phases, so that an
// operator can see where a slow restore spent its time.
func TestRestoreIsLogged(t *testing.T) {
	ctx := context.Background()
	var logs lockedBuffer
	e := newEnv(t, func(o *host.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	a := e.open(t, "job", 0, backend.KindLSM)
	if err := a.Backend.Put("v", backend.Key{KeyGroup: a.KeyGroups.Start, Key: []byte("k")}, []byte("value")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Snapshot(ctx, a, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "job", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.d.CloseInstance(a.ID, "job"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Open(ctx, daemon.OpenParams{Task: a.Task, KeyGroups: a.KeyGroups, Kind: backend.KindLSM, States: valueState,
		Restore: &daemon.RestoreSpec{Latest: true}}); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "instance opened") && strings.Contains(l, "restoredFrom=1") {
			line = l
		}
	}
	for _, want := range []string{"took=", "restore.handles=1", "restore.total=", "restore.filesDownloaded=", "restore.open="} {
		if !strings.Contains(line, want) {
			t.Errorf("the restored open's log line lacks %q: %q", want, line)
		}
	}
}

// lockedBuffer is a bytes.Buffer for a logger written from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// slowClose is a backend whose Close waits for release, as an lsm
// backend's waits for Pebble's running compactions.
type slowClose struct {
	backend.Backend
	release chan struct{}
	closed  chan struct{}
}

func (s *slowClose) Close() error {
	<-s.release
	err := s.Backend.Close()
	close(s.closed)
	return err
}

// TestCloseDoesNotWaitForTheBackend: CloseInstance (and a replacing open)
// answer before the backend's close ends, so a task's failover does not
// wait for it; Shutdown waits for every such close.
func TestCloseDoesNotWaitForTheBackend(t *testing.T) {
	ctx := context.Background()
	store, cat, set := catalogAndOpeners(t)
	var slow []*slowClose
	var mu sync.Mutex
	ops := map[backend.Kind]daemon.Opener{}
	for k, o := range set.Openers {
		ops[k] = o
	}
	heap := set.Openers[backend.KindHeap]
	ops[backend.KindHeap] = func(ctx context.Context, opts backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
		b, err := heap(ctx, opts, env)
		if err != nil {
			return nil, err
		}
		s := &slowClose{Backend: b, release: make(chan struct{}), closed: make(chan struct{})}
		mu.Lock()
		slow = append(slow, s)
		mu.Unlock()
		return s, nil
	}
	d, err := daemon.New(daemon.Config{DataDir: t.TempDir(), Store: store, Catalog: cat, Openers: ops, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p := daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Kind: backend.KindHeap, States: valueState}
	a, err := d.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	p.Replace = true
	var b *daemon.Instance
	within(t, "the open that replaces an instance", func() { b, err = d.Open(ctx, p) })
	if err != nil {
		t.Fatal(err)
	}
	within(t, "CloseInstance", func() { err = d.CloseInstance(b.ID, "j") })
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range slow {
		select {
		case <-s.closed:
			t.Fatalf("backend %d closed before it was let go", i)
		default:
		}
	}
	_ = a
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) before the backends' closes ended", err)
	case <-time.After(100 * time.Millisecond):
	}
	for _, s := range slow {
		close(s.release)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, s := range slow {
		select {
		case <-s.closed:
		default:
			t.Errorf("backend %d not closed when Shutdown returned", i)
		}
	}
}

// within runs f and fails the test if it takes more than 5 seconds (f is
// then left blocked: the test has failed anyway).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s waited for the backend's close", what)
	}
}

// catalogAndOpeners is a catalog (gc grace one hour) on a new in-memory
// store and the default openers, for a daemon a test assembles itself;
// both are closed when the test ends.
func catalogAndOpeners(t *testing.T) (*memstore.Store, *catalog.Catalog, *openers.Set) {
	t.Helper()
	store := memstore.New()
	cat, err := catalog.Open(context.Background(), catalog.Options{Store: store, GCGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return store, cat, set
}
