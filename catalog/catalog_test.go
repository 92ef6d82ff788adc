package catalog

import (
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var ctx = context.Background()

func openCat(t *testing.T, s tiered.Store, clk *testClock, mod ...func(*Options)) *Catalog {
	t.Helper()
	o := clk.opts(s)
	for _, f := range mod {
		f(&o)
	}
	c, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkpoint runs one whole checkpoint of tasks.
func checkpoint(t *testing.T, c *Catalog, s tiered.Store, id uint64, tasks ...*fakeTask) *Manifest {
	t.Helper()
	job := tasks[0].task.Job
	report(t, c, s, id, tasks...)
	m, err := c.Complete(ctx, job, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		tk.notifyComplete(id)
	}
	return m
}

func exists(t *testing.T, s tiered.Store, name string) bool {
	t.Helper()
	_, err := s.Stat(ctx, name)
	if err != nil && !tiered.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func filesOf(m *Manifest) []string {
	var out []string
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			out = append(out, f.Path)
		}
	}
	return out
}

func TestIsMetadata(t *testing.T) {
	for name, want := range map[string]bool{
		"job/_catalog":                true,
		"job/chk-7/_metadata":         true,
		"savepoints/sp1/_metadata":    true,
		"job/shared/0a1b-000004.sst":  false,
		"job/chk-7/file-snapshot":     false,
		"savepoints/sp1/data/x/y.sst": false,
		"job/_catalog.tmp":            false,
		"_metadata-not":               false,
	} {
		if got := IsMetadata(name); got != want {
			t.Errorf("IsMetadata(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	for name, want := range map[string]objName{
		"j/shared/x":              {kind: objShared, job: "j"},
		"j/shared/a/b":            {kind: objShared, job: "j"},
		"j/chk-7/op-0/f":          {kind: objCheckpoint, job: "j", id: 7},
		"j/chk-7/_metadata":       {kind: objCheckpointManifest, job: "j", id: 7},
		"j/_catalog":              {kind: objJobFile, job: "j"},
		"savepoints/s1/_metadata": {kind: objSavepointManifest, sp: "s1"},
		"savepoints/s1/data/x":    {kind: objSavepoint, sp: "s1"},
		"j/chk-07/x":              {},
		"j/chk-/x":                {},
		"j/other/x":               {},
		"j/x":                     {},
		".tmp/x":                  {},
		"savepoints/_x/y":         {},
		"x":                       {},
	} {
		if got := classify(name); got != want {
			t.Errorf("classify(%q) = %+v, want %+v", name, got, want)
		}
	}
	if ValidateJob("savepoints") == nil || ValidateJob("../x") == nil || ValidateJob("ok-job.1") != nil {
		t.Fatal("job name validation")
	}
}

func TestCompleteRetainsLastK(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63})
	b := newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127})
	var ms []*Manifest
	for id := uint64(1); id <= 5; id++ {
		a.state["k"+string(rune('a'+id))] = "v" // one bucket changes per checkpoint
		b.state["x"] = string(rune('0' + id))
		ms = append(ms, checkpoint(t, c, s, id, a, b))
	}
	if got := c.Retained("j"); !reflect.DeepEqual(got, []uint64{4, 5}) {
		t.Fatalf("retained %v, want [4 5]", got)
	}
	live := map[string]bool{}
	for _, m := range ms[3:] {
		for _, p := range filesOf(m) {
			live[p] = true
			if !exists(t, s, p) {
				t.Fatalf("file %s of a retained checkpoint is gone", p)
			}
		}
	}
	for _, m := range ms[:3] {
		if exists(t, s, CheckpointManifest("j", m.CheckpointID)) {
			t.Fatalf("manifest of subsumed checkpoint %d survives", m.CheckpointID)
		}
		for _, p := range filesOf(m) {
			if !live[p] && exists(t, s, p) {
				t.Fatalf("file %s of subsumed checkpoint %d survives with no reference", p, m.CheckpointID)
			}
		}
	}
	// Every object left is referenced (no GC needed after clean discards).
	for name := range storeSnapshot(t, s, "j/") {
		if !live[name] && name != "j/_catalog" && !strings.HasSuffix(name, "/_metadata") {
			t.Fatalf("unreferenced object %s left behind", name)
		}
	}
	// Completing again returns the same manifest; a second checkpoint with
	// an id in use is refused.
	m, err := c.Complete(ctx, "j", 5)
	if err != nil || m.Completed != ms[4].Completed {
		t.Fatalf("retried complete: %v", err)
	}
	if err := c.BeginCheckpoint("j", 5); !errors.Is(err, ErrExists) {
		t.Fatalf("begin of a completed id: %v", err)
	}
	hist := c.List("j")
	if len(hist) != 5 || hist[0].Retained || !hist[4].Retained || hist[4].Status != StatusCompleted || hist[4].FullSize == 0 {
		t.Fatalf("history %+v", hist)
	}
}

func TestCompleteChecksFilesAndHandles(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	if _, err := c.Complete(ctx, "j", 1); !errors.Is(err, ErrState) {
		t.Fatalf("complete without begin: %v", err)
	}
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	a.snapshot(1)
	h, err := a.upload(ctx, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A file that vanished: Complete fails and the checkpoint stays in
	// flight.
	lost := h.Files[2].Path
	data := storeSnapshot(t, s, lost)[lost]
	if err := s.Delete(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "j", 1, h); !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), lost) {
		t.Fatalf("complete with a missing file: %v", err)
	}
	if exists(t, s, CheckpointManifest("j", 1)) {
		t.Fatal("manifest written for a failed completion")
	}
	if err := tiered.PutBytes(ctx, s, lost, []byte(data)); err != nil {
		t.Fatal(err)
	}
	// Handles of another job, another checkpoint, or with files outside
	// the layout are refused.
	bad := []func(h *backend.Handle){
		func(h *backend.Handle) { h.Task.Job = "other" },
		func(h *backend.Handle) { h.CheckpointID = 9 },
		func(h *backend.Handle) { h.Files[0].Path = "j/chk-2/op-0/meta" },
		func(h *backend.Handle) { h.Files[1].Path = "j/chk-1/op-0/sneaky"; h.Files[1].Shared = true },
		func(h *backend.Handle) { h.Files[1].Path = "savepoints/s/data/x" },
	}
	for i, f := range bad {
		hh := h.Clone()
		f(hh)
		if err := c.AddTaskHandle("j", 1, hh); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("bad handle %d accepted: %v", i, err)
		}
	}
	m, err := c.Complete(ctx, "j", 1, h)
	if err != nil {
		t.Fatal(err)
	}
	if m.FullSize != h.FullSize || len(m.Tasks) != 1 {
		t.Fatalf("manifest %+v", m)
	}
	if err := c.Abort(ctx, "j", 1, StatusAborted, "late"); !errors.Is(err, ErrState) {
		t.Fatalf("abort of a completed checkpoint: %v", err)
	}
}

func TestAbortLeavesSharedFilesToTheSweep(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	m1 := checkpoint(t, c, s, 1, a)
	a.state["k2"] = "v2"
	if err := c.BeginCheckpoint("j", 2); err != nil {
		t.Fatal(err)
	}
	a.snapshot(2)
	h, err := a.upload(ctx, s, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle("j", 2, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, "j", 2, StatusDeclined, "too big"); err != nil {
		t.Fatal(err)
	}
	a.notifyAborted(2)
	if left := storeSnapshot(t, s, CheckpointDir("j", 2)+"/"); len(left) != 0 {
		t.Fatalf("private files of the aborted checkpoint survive: %v", names(left))
	}
	var newShared []string
	for _, f := range h.Files {
		if f.Shared && !slices.Contains(filesOf(m1), f.Path) {
			newShared = append(newShared, f.Path)
			if !exists(t, s, f.Path) {
				t.Fatalf("abort deleted shared upload %s at once", f.Path)
			}
		}
	}
	if len(newShared) == 0 {
		t.Fatal("test needs a new shared upload")
	}
	rep, err := c.GC(ctx, false)
	if err != nil || len(rep.Orphans) != 0 || rep.Young != len(newShared) {
		t.Fatalf("gc within the grace period: %+v %v", rep, err)
	}
	clk.Advance(2 * time.Hour)
	rep, err = c.GC(ctx, true)
	if err != nil || len(rep.Orphans) != len(newShared) || !exists(t, s, newShared[0]) {
		t.Fatalf("dry run: %+v %v", rep, err)
	}
	rep, err = c.GC(ctx, false)
	if err != nil || len(rep.Orphans) != len(newShared) {
		t.Fatalf("gc past the grace period: %+v %v", rep, err)
	}
	for _, p := range newShared {
		if exists(t, s, p) {
			t.Fatalf("orphan %s survives", p)
		}
	}
	for _, p := range filesOf(m1) {
		if !exists(t, s, p) {
			t.Fatalf("gc deleted %s of a retained checkpoint", p)
		}
	}
	hist := c.List("j")
	if len(hist) != 2 || hist[1].Status != StatusDeclined || hist[1].Reason != "too big" {
		t.Fatalf("history %+v", hist)
	}
}

func TestGCSparesInFlightCheckpoints(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	a.snapshot(1)
	h, err := a.upload(ctx, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour) // a very slow checkpoint: all its files are "old"
	before := storeSnapshot(t, s, "")
	// Nothing is referenced yet. The private directory is protected by the
	// in-flight mark; the shared uploads are not (no handle was offered,
	// and they are past the grace period), so exactly they go.
	rep, err := c.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Orphans {
		if !strings.HasPrefix(o.Name, "j/shared/") {
			t.Fatalf("gc deleted %s", o.Name)
		}
	}
	if len(rep.Orphans) != fakeBuckets {
		t.Fatalf("gc deleted %d objects, want the %d shared uploads", len(rep.Orphans), fakeBuckets)
	}
	after := storeSnapshot(t, s, "")
	for name := range before {
		if strings.HasPrefix(name, CheckpointDir("j", 1)+"/") && after[name] == "" {
			t.Fatalf("gc deleted %s of an in-flight checkpoint", name)
		}
	}
	// Once the handle is offered its shared files are protected too: put
	// them back and check a sweep leaves them, and that Complete then works.
	for name, data := range before {
		if err := tiered.PutBytes(ctx, s, name, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.AddTaskHandle("j", 1, h); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour)
	if rep, err := c.GC(ctx, false); err != nil || len(rep.Orphans) != 0 {
		t.Fatalf("gc with a pending handle deleted %+v (%v)", rep, err)
	}
	if _, err := c.Complete(ctx, "j", 1); err != nil {
		t.Fatal(err)
	}
}

func TestCompleteRefusesFilesBeingDeleted(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	a.snapshot(1)
	h, err := a.upload(ctx, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The sweep has marked one of the files for deletion (it raced with
	// the upload of an aborted checkpoint that used the same object).
	c.mu.Lock()
	c.mu.guard.deleting[h.Files[1].Path] = true
	c.mu.Unlock()
	if err := c.AddTaskHandle("j", 1, h); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("handle with a file being deleted accepted: %v", err)
	}
}

// TestExpiryIsTheCallers checks the catalog's half of expiry: it never
// ends an in-flight checkpoint on its own, however old (the daemon owns the
// one timer), and an Abort with StatusExpired records it and deletes its
// private files.
func TestExpiryIsTheCallers(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	if err := tiered.PutBytes(ctx, s, "j/chk-1/op-0/partial", []byte("x")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(c.GCGrace() + time.Hour)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := c.InFlight("j"); !reflect.DeepEqual(got, []uint64{1}) || !exists(t, s, "j/chk-1/op-0/partial") {
		t.Fatalf("the sweep ended an in-flight checkpoint: in flight %v", got)
	}
	if err := c.Abort(ctx, "j", 1, StatusExpired, "not completed within 10m0s"); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, "j/chk-1/op-0/partial") {
		t.Fatal("private file of an expired checkpoint survives")
	}
	if h := c.List("j"); len(h) != 1 || h[0].Status != StatusExpired || h[0].Reason != "not completed within 10m0s" {
		t.Fatalf("history %+v", h)
	}
}

func TestReopenRebuildsEverything(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for id := uint64(1); id <= 4; id++ {
		a.state["k"] = string(rune('a' + id))
		checkpoint(t, c, s, id, a)
	}
	if err := c.Abort(ctx, "j", 5, StatusAborted, "task failed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", 4); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	hist := c.List("j")
	c.Close()

	c2 := openCat(t, s, clk)
	if got := c2.Stats(); got != before {
		t.Fatalf("stats after reopen %+v, before %+v", got, before)
	}
	if got := c2.List("j"); !reflect.DeepEqual(stripTimes(got), stripTimes(hist)) {
		t.Fatalf("history after reopen\n%+v\nbefore\n%+v", got, hist)
	}
	if m, ok := c2.Latest("j"); !ok || m.CheckpointID != 4 {
		t.Fatalf("latest after reopen: %+v", m)
	}
	if len(c2.Problems()) != 0 {
		t.Fatal(c2.Problems())
	}
}

func stripTimes(rs []Record) []Record {
	out := slices.Clone(rs)
	for i := range out {
		out[i].Started, out[i].Ended = time.Time{}, time.Time{}
	}
	return out
}

func TestDamagedManifestIsKeptAndReported(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	m := checkpoint(t, c, s, 1, a)
	c.Close()
	enc := storeSnapshot(t, s, CheckpointManifest("j", 1))[CheckpointManifest("j", 1)]
	b := []byte(enc)
	b[len(b)/2] ^= 1
	if err := tiered.PutBytes(ctx, s, CheckpointManifest("j", 1), b); err != nil {
		t.Fatal(err)
	}
	c2 := openCat(t, s, clk)
	if len(c2.Problems()) != 1 {
		t.Fatalf("problems %v", c2.Problems())
	}
	clk.Advance(5 * time.Hour)
	if _, err := c2.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range filesOf(m) {
		if p != "" && strings.HasPrefix(p, "j/chk-1/") && !exists(t, s, p) {
			t.Fatalf("gc deleted %s next to a damaged manifest", p)
		}
	}
	if !exists(t, s, CheckpointManifest("j", 1)) {
		t.Fatal("gc deleted a damaged manifest")
	}
}

func TestDeleteRetriesAndSweepRepairs(t *testing.T) {
	mem := memstore.New()
	fs := newFaultStore(mem)
	clk := &testClock{}
	c := openCat(t, fs, clk, func(o *Options) { o.Retain = 1 })
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "1"
	m1 := checkpoint(t, c, fs, 1, a)
	// Two transient failures: the retries inside one delete absorb them.
	fs.failDeletes = 2
	a.state["k"] = "2"
	checkpoint(t, c, fs, 2, a)
	if exists(t, mem, CheckpointManifest("j", 1)) {
		t.Fatal("retried delete did not finish")
	}
	// More failures than retries: the discard is left pending, the
	// checkpoint's files stay protected, and the next sweep finishes.
	fs.failDeletes = 100
	a.state["k"] = "3"
	checkpoint(t, c, fs, 3, a)
	if !exists(t, mem, CheckpointManifest("j", 2)) {
		t.Fatal("manifest deleted despite failing deletes?")
	}
	fs.failDeletes = 0
	rep, err := c.GC(ctx, false)
	if err != nil || len(rep.Discarded) != 1 {
		t.Fatalf("sweep did not retry the discard: %+v %v", rep, err)
	}
	if exists(t, mem, CheckpointManifest("j", 2)) || !reflect.DeepEqual(c.Retained("j"), []uint64{3}) {
		t.Fatal("discard not finished by the sweep")
	}
	_ = m1
}

func TestBatchesAndParallelDeletes(t *testing.T) {
	mem := memstore.New()
	fs := newFaultStore(mem)
	clk := &testClock{}
	c := openCat(t, fs, clk, func(o *Options) { o.DeleteBatch = 10 })
	for i := 0; i < 95; i++ {
		if err := tiered.PutBytes(ctx, fs, "j/shared/orphan-"+string(rune('A'+i/26))+string(rune('a'+i%26)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Hour)
	fs.deleteCalls = 0
	rep, err := c.GC(ctx, false)
	if err != nil || len(rep.Orphans) != 95 || rep.Bytes != 95 {
		t.Fatalf("gc: %+v %v", rep, err)
	}
	if fs.deleteCalls != 10 {
		t.Fatalf("%d delete calls for 95 names in batches of 10", fs.deleteCalls)
	}
	if left := storeSnapshot(t, mem, "j/"); len(left) != 0 {
		t.Fatalf("left %v", names(left))
	}
}

func TestSweeperStartsAndStops(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.SweepInterval = time.Millisecond; o.GCGrace = 2 * time.Hour })
	if err := tiered.PutBytes(ctx, s, "j/shared/orphan", []byte("x")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Hour)
	passes := make(chan *GCReport, 1)
	c.afterSweep = func(rep *GCReport, _ error) {
		select {
		case passes <- rep:
		default: // the test reads the first pass only
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !errors.Is(err, ErrState) {
		t.Fatalf("second start: %v", err)
	}
	select {
	case rep := <-passes:
		if rep == nil || len(rep.Orphans) != 1 || rep.Orphans[0].Name != "j/shared/orphan" {
			t.Fatalf("first background pass: %+v", rep)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the background sweep never ran")
	}
	if exists(t, s, "j/shared/orphan") {
		t.Fatal("background sweep did not delete the orphan")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.BeginCheckpoint("j", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("begin after close: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{Retain: -1, GCGrace: -time.Minute, DeleteBatch: 5000}
	o.EnsureDefaults()
	err := o.Validate()
	for _, want := range []string{"no store", "retain", "gc grace", "delete batch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate error %v does not mention %q", err, want)
		}
	}
}

func TestUnknownJobFileIsNotOverwrittenWhenDamaged(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	if err := tiered.PutBytes(ctx, s, "j/_catalog", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	c := openCat(t, s, clk)
	if len(c.Problems()) != 1 {
		t.Fatalf("problems %v", c.Problems())
	}
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for id := uint64(1); id <= 4; id++ {
		a.state["k"] = string(rune('a' + id))
		checkpoint(t, c, s, id, a)
	}
	// Retention is off for the job (a pin may have been lost with the
	// file), and the damaged file is left for a human.
	if got := c.Retained("j"); len(got) != 4 {
		t.Fatalf("retained %v", got)
	}
	if got := storeSnapshot(t, s, "j/_catalog")["j/_catalog"]; got != "garbage" {
		t.Fatal("damaged job file overwritten")
	}
}

// TestCancelledCompleteTakesBackItsManifest: a Complete whose context is
// cancelled after the manifest landed removes the manifest again, so no
// checkpoint the caller was told failed reappears after a restart.
func TestCancelledCompleteTakesBackItsManifest(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	cs := &cancelOnPut{Store: mem}
	c := openCat(t, cs, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	a.snapshot(1)
	h, err := a.upload(ctx, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cs.cancel = cancel
	if _, err := c.Complete(cctx, "j", 1, h); err == nil {
		t.Fatal("complete succeeded with a cancelled context")
	}
	if exists(t, mem, CheckpointManifest("j", 1)) {
		t.Fatal("the manifest of a failed completion survives")
	}
}

// cancelOnPut lands a PutIfAbsent, then cancels the caller's context and
// reports the cancellation, as a client that gave up waiting would see.
type cancelOnPut struct {
	tiered.Store
	cancel context.CancelFunc
}

func (s *cancelOnPut) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := s.Store.PutIfAbsent(ctx, name, r, size); err != nil {
		return err
	}
	if s.cancel != nil {
		s.cancel()
		return ctx.Err()
	}
	return nil
}

// TestDroppedCompletionStaysCompleted: a checkpoint that completed
// through one node, and that retention has since dropped, is begun again
// by another node replaying its reports to a new leader, and aborted by a
// node that did not hear of the completion when a later one completes
// through it. Both must be refused as completed (the replaying client
// then forgets it); before, either turned its history record into
// "aborted": an acknowledged completion listed as aborted (found by the
// partition suite, tests/partition).
func TestDroppedCompletionStaysCompleted(t *testing.T) {
	s := memstore.New()
	c := openCat(t, s, &testClock{}, func(o *Options) { o.Retain = 1 })
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for id := uint64(1); id <= 2; id++ {
		a.state["k"] = strconv.FormatUint(id, 10)
		checkpoint(t, c, s, id, a)
	}
	for deadline := time.Now().Add(10 * time.Second); exists(t, s, CheckpointManifest("j", 1)); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("checkpoint 1 was never discarded")
		}
	}
	if err := c.BeginCheckpoint("j", 1); !errors.Is(err, ErrExists) {
		t.Fatalf("begin of a completed checkpoint retention dropped: %v, want ErrExists", err)
	}
	// The daemon of a node that did not hear of 1's completion aborts
	// its own copy of it when a later checkpoint completes through it.
	if err := c.Abort(ctx, "j", 1, StatusAborted, "subsumed by checkpoint 2"); !errors.Is(err, ErrState) {
		t.Fatalf("abort of a completed checkpoint retention dropped: %v, want ErrState", err)
	}
	a.state["k"] = "3"
	checkpoint(t, c, s, 3, a)
	for _, r := range c.List("j") {
		if r.ID == 1 && r.Status != StatusCompleted {
			t.Fatalf("completed checkpoint 1 is listed %s (%s)", r.Status, r.Reason)
		}
	}
}
