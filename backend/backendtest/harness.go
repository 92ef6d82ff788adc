package backendtest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// Harness opens instances of one backend kind for the suite.
type Harness struct {
	// Kind is the kind the backend reports in Info and in its handles.
	Kind backend.Kind
	// Open opens an instance. The suite fills opts (Task, KeyGroups,
	// MaxParallelism, States, Store, Restore, RestoreStore, NoClaim, Clock,
	// MaxValueSize). Each call must use fresh local resources (a new
	// t.TempDir() for lsm). Within one test the suite always passes the
	// same opts.Store, a *memstore.Store the suite created (unless Store
	// is set); the heap
	// backend keeps its snapshots in it, so the corruption tests can damage
	// its files.
	Open func(t testing.TB, opts backend.Options) (backend.Backend, error)
	// Store, if set, makes the store of one subtest (opts.Store) instead
	// of a fresh *memstore.Store: to run the suite against an S3 server.
	// It must be empty and closed when t ends.
	Store func(t testing.TB) tiered.Store
}

// DefaultRapidChecks is the number of rapid checks each property runs when
// the test binary was not given -rapid.checks; it keeps Run within seconds
// for the slowest backend. -rapid.checks=N overrides it.
const DefaultRapidChecks = 15

// Run runs the conformance suite: every operation of every state kind,
// TTL, timers, snapshots and restores (checked against Model with random
// operation sequences), sub-range and multi-handle restores, and bad input
// and damaged files. Each subtest uses its own store and clock.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("backendtest: Harness.Open is nil")
	}
	defer scaleRapid()()
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"OpenOptions", testOpenOptions},
		{"RegisterState", testRegisterState},
		{"Value", testValue},
		{"List", testList},
		{"Map", testMap},
		{"MapPaging", testMapPaging},
		{"Aggregate", testAggregate},
		{"Timers", testTimers},
		{"Namespaces", testNamespaces},
		{"KeyGroups", testKeyGroups},
		{"UnknownState", testUnknownState},
		{"WrongKind", testWrongKind},
		{"Oversized", testOversized},
		{"Closed", testClosed},
		{"TTL", testTTL},
		{"SnapshotRestore", testSnapshotRestore},
		{"PendingSnapshots", testPendingSnapshots},
		{"RestoreSubRange", testRestoreSubRange},
		{"RestoreSeveralHandles", testRestoreSeveralHandles},
		{"RestoreStates", testRestoreStates},
		{"AbortedCheckpoint", testAbortedCheckpoint},
		{"NoClaim", testNoClaim},
		{"CanonicalSnapshot", testCanonical},
		{"Concurrent", testConcurrent},
		{"CorruptFile", testCorruptFile},
		{"TruncatedFile", testTruncatedFile},
		{"MissingFile", testMissingFile},
		{"ChecksummedDamage", testChecksummedDamage},
		{"IncompatibleHandle", testIncompatibleHandle},
		{"ViewFrozen", testViewFrozen},
		{"ViewPages", testViewPages},
		{"ViewErrors", testViewErrors},
		{"ViewRelease", testViewRelease},
		{"ViewTTL", testViewTTL},
		{"ViewConcurrent", testViewConcurrent},
		{"Keys", testKeys},
		{"Load", testLoad},
		{"LoadErrors", testLoadErrors},
		{"LoadRoundTrip", testLoadRoundTrip},
		{"Model", testModel},
		{"ModelSeveralHandles", testModelSeveralHandles},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newEnv(t, h))
		})
	}
}

// scaleRapid lowers rapid's default check count to DefaultRapidChecks
// unless -rapid.checks was given, and returns the function that restores
// it.
func scaleRapid() func() {
	f := flag.Lookup("rapid.checks")
	if f == nil {
		return func() {}
	}
	set := false
	flag.Visit(func(g *flag.Flag) { set = set || g.Name == "rapid.checks" })
	if set {
		return func() {}
	}
	old := f.Value.String()
	if err := f.Value.Set(fmt.Sprint(DefaultRapidChecks)); err != nil {
		return func() {}
	}
	return func() { _ = f.Value.Set(old) }
}

// tester is what the suite's helpers need: *testing.T and *rapid.T fit.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Clock is a settable clock for TTL tests; safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.UnixMilli(1_700_000_000_000)} }

// Now returns the clock's time (a backend.Clock).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Ms returns the clock's time in unix milliseconds.
func (c *Clock) Ms() int64 { return c.Now().UnixMilli() }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Test geometry: a small maxParallelism keeps per-key-group loops cheap,
// and the instance range leaves key groups on both sides to reject.
const (
	testMaxP = 16
)

var testRange = backend.KeyGroupRange{Start: 4, End: 11}

// env is one subtest's world: a store, a clock and the harness.
type env struct {
	t     *testing.T
	h     Harness
	store tiered.Store
	clock *Clock
	task  backend.TaskID
	ctx   context.Context
	mu    sync.Mutex
	ids   uint64
}

func newEnv(t *testing.T, h Harness) *env {
	var store tiered.Store = memstore.New()
	if h.Store != nil {
		store = h.Store(t)
	}
	return &env{
		t: t, h: h, store: store, clock: NewClock(),
		task: backend.TaskID{Job: "job1", Operator: "op", Subtask: 0},
		ctx:  context.Background(),
	}
}

// nextID returns increasing checkpoint ids, as a coordinator does.
func (e *env) nextID() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids++
	return e.ids
}

func (e *env) opts(r backend.KeyGroupRange, states ...backend.StateDescriptor) backend.Options {
	return backend.Options{
		Task: e.task, KeyGroups: r, MaxParallelism: testMaxP, States: states,
		Store: e.store, Clock: e.clock.Now,
	}
}

// open opens an instance through the harness, turns a panic into a
// failure, and closes the instance when t's test (or rapid check) ends.
func (e *env) open(t tester, opts backend.Options) (b *guarded, err error) {
	t.Helper()
	func() {
		defer catch(t, "Open", &err)
		var raw backend.Backend
		raw, err = e.h.Open(e.t, opts)
		if err == nil {
			if raw == nil {
				err = errors.New("backendtest: Open returned a nil backend and no error")
				return
			}
			b = guard(t, raw)
		}
	}()
	if b != nil {
		t.Cleanup(func() { _ = b.Close() })
	}
	return b, err
}

func (e *env) mustOpen(t tester, opts backend.Options) *guarded {
	t.Helper()
	b, err := e.open(t, opts)
	if err != nil {
		t.Fatalf("open %s %s: %v", e.h.Kind, opts.KeyGroups, err)
	}
	return b
}

// checkpoint takes a full checkpoint (Snapshot then Run) and checks the
// handle.
func (e *env) checkpoint(t tester, b *guarded) *backend.Handle {
	t.Helper()
	id := e.nextID()
	p, err := b.Snapshot(e.ctx, id)
	if err != nil {
		t.Fatalf("snapshot %d: %v", id, err)
	}
	want := b.States()
	h, err := p.Run(e.ctx)
	if err != nil {
		t.Fatalf("snapshot %d: run: %v", id, err)
	}
	e.checkHandle(t, b.Info(), h, id, want)
	return h
}

// checkHandle checks a handle against the instance that wrote it and the
// files in the store.
func (e *env) checkHandle(t tester, info backend.Info, h *backend.Handle, id uint64, states []backend.StateDescriptor) {
	t.Helper()
	if h == nil {
		t.Fatalf("snapshot %d: Run returned a nil handle", id)
		return
	}
	if err := h.Validate(); err != nil {
		t.Fatalf("snapshot %d: invalid handle: %v", id, err)
	}
	if h.Backend != e.h.Kind || h.Task != info.Task || h.KeyGroups != info.KeyGroups ||
		h.MaxParallelism != info.MaxParallelism || h.CheckpointID != id {
		t.Fatalf("snapshot %d: handle says backend %s task %s range %s max %d checkpoint %d; instance is %s %s %s %d",
			id, h.Backend, h.Task, h.KeyGroups, h.MaxParallelism, h.CheckpointID, e.h.Kind, info.Task, info.KeyGroups, info.MaxParallelism)
	}
	if !sameStates(h.States, states) {
		t.Fatalf("snapshot %d: handle states %v, registered %v", id, h.States, states)
	}
	enc, err := backend.EncodeHandle(h)
	if err != nil {
		t.Fatalf("snapshot %d: encode handle: %v", id, err)
	}
	dec, err := backend.DecodeHandle(enc)
	if err != nil {
		t.Fatalf("snapshot %d: decode handle: %v", id, err)
	}
	if enc2, err := backend.EncodeHandle(dec); err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("snapshot %d: handle does not survive encode/decode (%v)", id, err)
	}
	e.checkFiles(t, e.store, h, fmt.Sprintf("%s/chk-%d/%s/", h.Task.Job, id, h.Task.Dir()), h.Task.Job+"/shared/")
}

// checkFiles checks that every file of h is in store with its size and
// checksum, under privPrefix (or sharedPrefix for shared files), and that
// FullSize adds up.
func (e *env) checkFiles(t tester, store tiered.Store, h *backend.Handle, privPrefix, sharedPrefix string) {
	t.Helper()
	var total int64
	for _, f := range h.Files {
		total += f.Size
		if f.Shared && !strings.HasPrefix(f.Path, sharedPrefix) {
			t.Fatalf("checkpoint %d: shared file %s is not under %s", h.CheckpointID, f.Path, sharedPrefix)
		}
		if !f.Shared && !strings.HasPrefix(f.Path, privPrefix) {
			t.Fatalf("checkpoint %d: private file %s is not under %s", h.CheckpointID, f.Path, privPrefix)
		}
		data, err := tiered.ReadAll(e.ctx, store, f.Path, 0)
		if err != nil {
			t.Fatalf("checkpoint %d: file %s of the handle: %v", h.CheckpointID, f.Path, err)
		}
		// Size-only files (lsm remote mode) carry no CRC: their blocks
		// have Pebble's checksums.
		if int64(len(data)) != f.Size || (!f.SizeOnly && frame.Checksum(data) != f.CRC32C) {
			t.Fatalf("checkpoint %d: file %s has %d bytes crc %08x, handle says %d bytes crc %08x",
				h.CheckpointID, f.Path, len(data), frame.Checksum(data), f.Size, f.CRC32C)
		}
	}
	if h.FullSize != total || h.CheckpointedSize < 0 || h.CheckpointedSize > h.FullSize {
		t.Fatalf("checkpoint %d: full size %d (files add up to %d), checkpointed size %d",
			h.CheckpointID, h.FullSize, total, h.CheckpointedSize)
	}
}

func sameStates(a, b []backend.StateDescriptor) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// restore opens an instance of range r from handles.
func (e *env) restore(t tester, r backend.KeyGroupRange, states []backend.StateDescriptor, handles ...*backend.Handle) *guarded {
	t.Helper()
	o := e.opts(r, states...)
	o.Restore = handles
	return e.mustOpen(t, o)
}

// must fails t on err.
func must(t tester, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// wantErr fails t unless err wraps target.
func wantErr(t tester, err, target error, what string, args ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %q", fmt.Sprintf(what, args...), err, target)
	}
}
